"""Advisory file locks between jobs on one node: GPU claims (shares of a GPU's memory) and model
downloads.

flock locks (a GPU claim's taken with fcntl itself, so that one can be held until the process
ends): the kernel drops them when the process exits, however it exits, so a killed job never leaves
anything locked. Never filelock's soft fallback (a lock file a killed job would leave behind), and
lock files stay (one removed while another job waits on it would let two jobs hold "the" lock);
only a GPU claim that no job holds is removed, which no job ever waits on.
"""

import contextlib
import dataclasses
import fcntl
import glob
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

log = logging.getLogger("workflow")


def _lock(path: Path) -> FileLock:
    return FileLock(path, fallback_to_soft=False, preserve_lock_file=True, thread_local=False)


@dataclasses.dataclass(frozen=True)
class Gpu:
    """A GPU of this node as the claims know it: its UUID and its memory (MB)."""

    uuid: str
    memory_mb: int


# The claims that processes hold until they end (claim_gpu's until_exit): open descriptors, never
# closed here, so that no finaliser releases them while the process still holds its GPU memory.
_HELD_UNTIL_EXIT: list[int] = []


@contextlib.contextmanager
def claim_gpu(
    gpus: list[Gpu], mb: int | None = None, lock_dir: Path | None = None, poll_s: float = 5.0, until_exit=False
) -> Iterator[int]:
    """Claim `mb` of the memory of a GPU of `gpus` (None: the whole GPU) that other jobs of this
    user on this node have not claimed, while in the context; yields its index. `until_exit`: the
    claim ends with the process, when the kernel frees what it held on the GPU.

    A claim is a file named after the GPU's UUID and the share, held locked; one whose job ended is
    unlocked, and the next job to look removes it. Of the GPUs where the share fits, the job takes
    the one with the fewest claims, then the most memory left; where it fits on none, it waits.
    """
    lock_dir = lock_dir or Path(tempfile.gettempdir()) / f"virnucpro-gpu-claims-{os.getuid()}"
    lock_dir.mkdir(parents=True, exist_ok=True)
    looking = _lock(lock_dir / "looking.lock")  # one job looks at the claims at a time
    waiting = False
    while True:
        with looking:
            held = {gpu.uuid: _live_claims(lock_dir, gpu.uuid) for gpu in gpus}
            fits = [
                (len(held[gpu.uuid]), -(gpu.memory_mb - sum(held[gpu.uuid])), index)
                for index, gpu in enumerate(gpus)
                if sum(held[gpu.uuid]) + _share(gpu, mb) <= gpu.memory_mb
            ]
            if fits:
                index = min(fits)[2]
                gpu = gpus[index]
                path = lock_dir / f"{gpu.uuid}.{_share(gpu, mb)}mb.{os.getpid()}.claim"
                claim = _flock(path)  # a claim of this pid's is an ended job's (a process holds one at most)
                break
        if not waiting:
            log.info(
                "no GPU has %s unclaimed (%s); waiting for other jobs to end",
                f"{mb} MB" if mb else "all its memory",
                ", ".join(f"{gpu.uuid}: {sum(held[gpu.uuid])} of {gpu.memory_mb} MB claimed" for gpu in gpus),
            )
            waiting = True
        time.sleep(poll_s)
    try:
        yield index
    finally:
        if until_exit:
            _HELD_UNTIL_EXIT.append(claim)
        else:
            with looking:
                path.unlink()
                os.close(claim)


def _flock(path: Path) -> int | None:
    """An open descriptor of `path` holding its flock lock, or None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _share(gpu: Gpu, mb: int | None) -> int:
    """What a claim of `mb` takes of `gpu`: all of it for None or for more than it has."""
    return min(mb or gpu.memory_mb, gpu.memory_mb)


def _live_claims(lock_dir: Path, uuid: str) -> list[int]:
    """The MB of each claim on GPU `uuid` whose job holds it; claims of ended jobs are removed."""
    live = []
    for path in lock_dir.glob(f"{glob.escape(uuid)}.*mb.*.claim"):
        fd = _flock(path)
        if fd is None:
            live.append(int(path.name[len(uuid) + 1 :].split("mb.")[0]))
            continue
        path.unlink()  # no job holds it, and no other looks while this one does
        os.close(fd)
    return live


@contextlib.contextmanager
def exclusive(path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on `path`; with wait=False the block is given False when another holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = _lock(path)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        if not wait:
            yield False
            return
        log.info("waiting for another job to release %s", path)
        lock.acquire()
    try:
        yield True
    finally:
        lock.release()
