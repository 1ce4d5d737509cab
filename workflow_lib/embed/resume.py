"""Resuming a killed embed job: its rows are committed in parts beside the output, so that a rerun
embeds only what was not committed, in the same batches, and writes the same file.

Each part holds the rows written to the output since the previous part, as stored, written under a
temporary name and renamed, so a kill leaves only whole parts. Parts belong to one shard and one set
of settings (the fingerprint): a rerun with anything else starts from zero. The unfinished output is
written in the same directory (`scratch`), so a killed job leaves nothing that looks like its output.
"""

import contextlib
import logging
import os
import shutil
import signal
import time
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from workflow_lib.io import h5store
from workflow_lib.io.outputs import atomic_open
from workflow_lib.io.sharding import ShardIndex
from workflow_lib.io.tables import read_json, write_json

log = logging.getLogger("workflow")


class ShardRows:
    """The rows of one shard's output: checked finite, put in the HDF5 writer, counted (each must be
    written exactly once). Made, it keeps an earlier run's parts of the same fingerprint; `replay`
    writes them into the writer. Rows stored since are committed when a commit is due or the writer
    is full, and at the end."""

    def __init__(self, output_path: str | Path, fingerprint: dict, interval: float):
        output_path = Path(output_path)
        self.dir = output_path.with_name(f".{output_path.name}.parts")
        self.scratch = self.dir / f"output.tmp{os.getpid()}.h5"  # where the output is written until complete
        self.interval, self.last = interval, time.monotonic()
        stamp = self.dir / "fingerprint.json"
        try:
            kept = read_json(stamp) == fingerprint
        except (OSError, ValueError):  # none, or cut short by a crash
            kept = False
        if not kept:
            if self.dir.exists():
                log.info(
                    f"{self.dir}: left by a run of another shard or other settings, or cut short; starting from zero"
                )
                shutil.rmtree(self.dir)
            write_json(fingerprint, stamp)
        for old in self.dir.glob("output.tmp*"):
            old.unlink(missing_ok=True)
        self.parts = sorted(self.dir.glob("part_*.npz"))
        self.next_part = len(self.parts)

    def replay(self, index: ShardIndex, writer: h5store.Writer, source: np.ndarray | None = None) -> None:
        """Each kept part's rows into `writer`; `committed` marks them, `done` counts them. `source`:
        each row's first row of the same sequence (packing.first_copies), where the copies are
        given their first's values at the end (copy_rows)."""
        self.index, self.writer = index, writer
        self.tokens = np.zeros(len(index), dtype=np.int32)
        self.written = np.zeros(len(index), dtype=np.uint8)
        self.source = np.arange(len(index)) if source is None else source
        self.copies = self.source != np.arange(len(index))
        # the values of the rows that have copies, kept uncompressed as they are stored: read back
        # from the output's compressed chunks, they would cost a pass over the whole file
        self.firsts = np.unique(self.source[self.copies])
        shape = (self.firsts.size, writer.data.shape[1])
        self.kept = np.lib.format.open_memmap(self.dir / "firsts.npy", "w+", writer.dtype, shape) if shape[0] else None
        for part in self.parts:
            try:
                with np.load(part, allow_pickle=False) as data:
                    rows, embeddings, tokens = data["rows"], data["embeddings"], data["tokens"]
            except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:  # cut short, or not ours
                log.warning("%s: unreadable (%s); its frames are embedded again", part, error)
                continue
            writer.write(rows, embeddings)
            self._keep(rows, embeddings)
            self.tokens[rows], self.written[rows] = tokens, 1
        self.committed = self.written == 1
        self.done = int(self.committed.sum())  # a running count: a scan of `written` per batch is quadratic
        if self.done:
            log.info("resuming: %d of %d frames were committed by an interrupted run", self.done, len(index))

    def store(self, results: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Batches' (rows, token counts, pooled embeddings) into the writer."""
        for rows, tokens, pooled in results:
            fresh = ~self.committed[rows]  # a batch split after running out of memory may be partly committed
            if not fresh.all():  # else no copy: at DNABERT-S rates it costs the main process
                rows, tokens, pooled = rows[fresh], tokens[fresh], pooled[fresh]
            with np.errstate(over="ignore"):  # an overflow to inf fails the job just below
                stored = pooled.astype(self.writer.dtype, copy=False)
            self._check_finite(rows, pooled, stored)
            self.writer.put(rows, stored)
            self._keep(rows, stored)
            self.tokens[rows] = tokens
            self.written[rows] += 1
            self.done += len(rows)
        if time.monotonic() - self.last >= self.interval or self.writer.full():
            self.commit()

    def _keep(self, rows: np.ndarray, values: np.ndarray) -> None:
        """The values of those of `rows` that have copies, into `kept`."""
        if self.kept is None:
            return
        at = np.minimum(np.searchsorted(self.firsts, rows), self.firsts.size - 1)
        hit = self.firsts[at] == rows
        self.kept[at[hit]] = values[hit]

    def copy_rows(self) -> None:
        """Give each copy its first's stored values and token count, once every first is stored: in
        row order, a writer's buffer at a time, so that each chunk of the output is rewritten about
        once. They are not committed as parts: a rerun copies them again."""
        self.commit()  # the firsts still held
        copies = np.flatnonzero(self.copies & ~self.committed)
        per_block = max(1, h5store.BUFFER_BYTES // max(self.writer.data.shape[1] * self.writer.dtype.itemsize, 1))
        for start in range(0, copies.size, per_block):
            rows = copies[start : start + per_block]
            firsts = self.source[rows]
            self.writer.put(rows, self.kept[np.searchsorted(self.firsts, firsts)])
            self.writer.flush()
            self.tokens[rows], self.written[rows] = self.tokens[firsts], self.written[rows] + 1
            self.done += rows.size
        self.kept = None
        (self.dir / "firsts.npy").unlink(missing_ok=True)

    def commit(self) -> None:
        """Write what the writer holds to the output, and those rows as one part."""
        with sigterm_held():
            rows, values = self.writer.flush()
            if rows.size:
                with atomic_open(self.dir / f"part_{self.next_part:06d}.npz", "wb") as handle:
                    np.savez(handle, rows=rows, embeddings=values, tokens=self.tokens[rows])
                self.next_part += 1
            self.last = time.monotonic()

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _check_finite(self, rows: np.ndarray, values: np.ndarray, stored: np.ndarray) -> None:
        """A batch's embeddings are finite, computed and as stored; else the job fails naming frames."""
        finite = np.isfinite(stored).all(axis=1)
        if finite.all():
            return
        bad = rows[~finite]
        if np.isfinite(values[~finite]).all():
            advice = f"they overflow {self.writer.storage}: set embedding.storage to float32"
        else:
            advice = "set embedding.precision to fp32 or bf16"
        raise RuntimeError(f"{self.index.path}: non-finite embeddings for {self._examples(bad)}; {advice}")

    def check_complete(self) -> None:
        """Every frame embedded exactly once, before the output is renamed into place."""
        if (self.written == 1).all():
            return
        lost, repeated = np.flatnonzero(self.written == 0), np.flatnonzero(self.written > 1)
        raise RuntimeError(
            f"{self.index.path}: {lost.size} frames not embedded (e.g. {self._examples(lost)}), "
            f"{repeated.size} embedded more than once (e.g. {self._examples(repeated)})"
        )

    def _examples(self, rows: np.ndarray) -> list[str]:
        return [self.index[i] for i in rows[:3]]


@contextlib.contextmanager
def sigterm_held() -> Iterator[None]:
    """SIGTERM held back until the block ends: raised inside a commit, rows taken from the writer
    would reach neither the commit log nor the final commit. Nested, the outer block keeps it held."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
