"""Advisory file locks between jobs on one node: GPU claims and model downloads.

The locks are flock locks (filelock), which belong to an open file: the kernel drops them when the
process exits, however it exits, so a killed job never leaves a GPU or a model cache locked. Never
filelock's soft fallback (a lock file that a killed job would leave behind), and the lock files
stay (one removed while another job waits on it would let two jobs hold "the" lock).
"""

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

log = logging.getLogger("workflow")
_held = []  # GPU claims stay held for the life of the process


def _lock(path: Path) -> FileLock:
    return FileLock(path, fallback_to_soft=False, preserve_lock_file=True, thread_local=False)


def claim_gpu(uuids: list[str], lock_dir: Path | None = None, poll_s: float = 5.0) -> int:
    """Index of a GPU that no other job of this user on this node has claimed.

    Locally nothing tells concurrent embed jobs apart (SLURM would set CUDA_VISIBLE_DEVICES per
    job), so each claims a GPU by locking a file named after its UUID; when all are claimed,
    it waits for one to come free.
    """
    lock_dir = lock_dir or Path(tempfile.gettempdir()) / f"virnucpro-gpu-claims-{os.getuid()}"
    lock_dir.mkdir(parents=True, exist_ok=True)
    waiting = False
    while True:
        for index, uuid in enumerate(uuids):
            lock = _lock(lock_dir / f"{uuid}.lock")
            try:
                lock.acquire(blocking=False)
            except Timeout:
                continue
            _held.append(lock)
            return index
        if not waiting:
            log.info("all %d GPUs are claimed by other jobs; waiting for one to come free", len(uuids))
            waiting = True
        time.sleep(poll_s)


@contextlib.contextmanager
def exclusive(path: Path, wait: bool = True) -> Iterator[bool]:
    """Hold an exclusive lock on `path` (created if needed), waiting for other holders; with
    wait=False, not waiting: the block is given False when another process holds it."""
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
