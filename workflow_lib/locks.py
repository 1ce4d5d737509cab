"""Advisory file locks between jobs on one node: GPU claims and model downloads.

flock locks belong to an open file: the kernel drops them when the process exits, however it
exits, so a killed job never leaves a GPU or a model cache locked.
"""

import contextlib
import fcntl
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("workflow")
_held = []  # GPU claims stay open (and locked) for the life of the process


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
            handle = open(lock_dir / f"{uuid}.lock", "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            _held.append(handle)
            return index
        if not waiting:
            log.info("all %d GPUs are claimed by other jobs; waiting for one to come free", len(uuids))
            waiting = True
        time.sleep(poll_s)


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if needed), waiting for other holders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another job to release %s", path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
