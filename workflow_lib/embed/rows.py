"""Where a shard's embedded rows go: checked finite, into the HDF5 writer, counted (each row must
be written exactly once), and committed for a stopped job to resume from."""

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from workflow_lib.embed.device_feed import Embedded
from workflow_lib.embed.loader import ShardIndex
from workflow_lib.embed.resume import Commits
from workflow_lib.embed.stopping import sigterm_held
from workflow_lib.io import h5store

log = logging.getLogger("workflow")


class ShardRows:
    """The rows of one shard's output: an earlier run's commits replayed into the writer on opening;
    rows stored since committed when a commit is due or the writer is full, and at the end."""

    def __init__(self, index: ShardIndex, commits: Commits, writer: h5store.Writer):
        self.index, self.commits, self.writer = index, commits, writer
        self.tokens = np.zeros(len(index), dtype=np.int32)
        self.written = np.zeros(len(index), dtype=np.uint8)
        self.committed = commits.replay(writer.write, self.tokens)
        self.written[self.committed] = 1
        self.done = int(self.committed.sum())  # a running count: a scan of `written` per batch is quadratic
        if self.done:
            log.info("resuming: %d of %d frames were committed by an interrupted run", self.done, len(index))

    def store(self, results: Iterable[Embedded]) -> None:
        for rows, tokens, pooled in results:
            fresh = ~self.committed[rows]  # a batch split after running out of memory may be partly committed
            if not fresh.all():  # else no copy: at DNABERT-S rates it costs the main process
                rows, tokens, pooled = rows[fresh], tokens[fresh], pooled[fresh]
            with np.errstate(over="ignore"):  # an overflow to inf fails the job just below
                stored = pooled.astype(self.writer.dtype, copy=False)
            check_finite(self.index.path, self.index.ids, rows, pooled, stored, self.writer.storage)
            self.writer.put(rows, stored)
            self.tokens[rows] = tokens
            self.written[rows] += 1
            self.done += len(rows)
        if self.commits.due() or self.writer.full():
            self.commit()

    def commit(self) -> None:
        """Write what the writer holds to the output and commit it."""
        with sigterm_held():
            rows, values = self.writer.flush()
            self.commits.commit(rows, values, self.tokens[rows])

    def check_complete(self) -> None:
        """Every frame embedded exactly once, before the output is renamed into place."""
        if (self.written == 1).all():
            return
        lost, repeated = np.flatnonzero(self.written == 0), np.flatnonzero(self.written > 1)
        ids = self.index.ids
        raise RuntimeError(
            f"{self.index.path}: {lost.size} frames not embedded (e.g. {[ids[i] for i in lost[:3]]}), "
            f"{repeated.size} embedded more than once (e.g. {[ids[i] for i in repeated[:3]]})"
        )


def check_finite(
    path: Path, ids: Sequence[str], rows: np.ndarray, values: np.ndarray, stored: np.ndarray, storage: str
) -> None:
    """A batch's embeddings are finite, computed and as stored; else the job fails naming frames."""
    finite = np.isfinite(stored).all(axis=1)
    if finite.all():
        return
    bad = rows[~finite]
    if np.isfinite(values[~finite]).all():
        advice = f"they overflow {storage}: set embedding.storage to float32"
    else:
        advice = "set embedding.precision to fp32 or bf16"
    raise RuntimeError(f"{path}: non-finite embeddings for {[ids[i] for i in bad[:3]]}; {advice}")
