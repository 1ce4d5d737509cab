"""The embeddings HDF5 contract: dataset `ids` (UTF-8, shard FASTA order), dataset `embeddings`
([N, D], float32 or float16 as the attribute `storage` says; chunked by rows, shuffled and
compressed), and attributes describing how they were made. Readers of shards never hold a whole
dataset: `FeatureBlocks` reads a shard's files, one per model, in row blocks."""

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

from workflow_lib.cli.errors import InputError
from workflow_lib.io.outputs import atomic_path

REQUIRED_ATTRS = ("model", "checkpoint", "layer", "dim", "precision", "pooling", "n_tokens", "workflow_version")
CHUNK_ROWS = 1024  # rows per HDF5 chunk: each chunk is compressed (and written by embed) whole
# lzf rather than gzip, both after the byte shuffle: faster to write and read for a few per cent
# more bytes (decided by benchmarks/storage.py as of 2009c51, removed since)
COMPRESSION = {"compression": "lzf", "shuffle": True}
BLOCK_ROWS = 65536  # rows a block reader holds
BUFFER_BYTES = 256 << 20  # finished rows a writer holds before it writes them


def _open(path: str | Path) -> h5py.File:
    handle = None
    try:
        handle = h5py.File(path, "r")
        handle["ids"], handle["embeddings"]  # both must be there
        return handle
    except (OSError, KeyError) as error:
        if handle is not None:
            handle.close()
        raise InputError(
            f"{path}: not a readable embeddings file ({error}); delete it and run the workflow again"
        ) from None


class Writer:
    """An open embeddings file being filled: rows come in any order (`put`), are held up to
    BUFFER_BYTES and written (`flush`) chunk by chunk, each chunk in one write."""

    def __init__(self, handle: h5py.File, ids: list[str], dim: int, storage: str):
        self.storage, self.dtype = storage, np.dtype(storage)  # float32 or float16
        n = len(ids)
        names = handle.create_dataset("ids", shape=(n,), dtype=h5py.string_dtype("utf-8"))
        blocks = iter(ids)
        for start in range(0, n, BLOCK_ROWS):  # in blocks: never all IDs converted at once
            names[start : start + BLOCK_ROWS] = np.array(list(itertools.islice(blocks, BLOCK_ROWS)), dtype=object)
        layout = {"chunks": (min(n, CHUNK_ROWS), dim), **COMPRESSION} if n and dim else {}
        self.data = handle.create_dataset("embeddings", shape=(n, dim), dtype=self.dtype, **layout)
        self.chunk_rows = self.data.chunks[0] if self.data.chunks else max(n, 1)
        self.rows: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.held = 0

    def put(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Hold `values` (already of the storage dtype) for `rows`."""
        self.rows.append(np.asarray(rows, dtype=np.int64))
        self.values.append(values)
        self.held += values.nbytes

    def full(self) -> bool:
        return self.held >= BUFFER_BYTES

    def flush(self) -> tuple[np.ndarray, np.ndarray]:
        """Write the rows held; return them (sorted by row) and their values."""
        if not self.rows:
            return np.zeros(0, np.int64), np.zeros((0, self.data.shape[1]), self.dtype)
        # a repeated row (a loader fault) keeps one value: the embed job counts the writes and fails
        rows = np.unique(np.concatenate(self.rows))
        values = np.empty((rows.size, self.data.shape[1]), self.dtype)
        while self.rows:  # each piece into its sorted place, then let go: memory holds the rows once
            values[np.searchsorted(rows, self.rows.pop())] = self.values.pop()
        self.held = 0
        self.write(rows, values)
        return rows, values

    def write(self, rows: np.ndarray, values: np.ndarray) -> None:
        """Write `values` to `rows` (sorted, unique): one read-modify-write per chunk touched, a
        plain write where the rows cover the whole chunk."""
        chunk_of = rows // self.chunk_rows
        cuts = np.flatnonzero(np.diff(chunk_of)) + 1
        for part in np.split(np.arange(rows.size), cuts):
            if not part.size:
                continue
            start = int(chunk_of[part[0]]) * self.chunk_rows
            stop = min(start + self.chunk_rows, self.data.shape[0])
            if part.size == stop - start:
                self.data[start:stop] = values[part]
            else:
                block = self.data[start:stop]
                block[rows[part] - start] = values[part]
                self.data[start:stop] = block


@contextlib.contextmanager
def create(path: str | Path, ids: list[str], dim: int, storage: str, tmp: str | Path | None = None):
    """Yield a Writer of `path`, renamed into place when the block succeeds; set `writer.attrs` in it."""
    # No chunk cache: the Writer writes whole chunks, and a cached chunk would reach the disk only
    # when the file closes, where a full disk fails with a RuntimeError and leaves HDF5 unusable;
    # uncached, it fails in the write, as an OSError that atomic_path reports (no space left).
    with atomic_path(path, tmp) as name, h5py.File(name, "w", rdcc_nbytes=0) as handle:
        writer = Writer(handle, ids, dim, storage)
        writer.attrs = None
        yield writer
        writer.flush()
        missing = [a for a in REQUIRED_ATTRS if a not in (writer.attrs or {})]
        assert not missing, f"HDF5 attributes missing: {missing}"
        handle.attrs.update({**writer.attrs, "storage": storage})


class FeatureBlocks(contextlib.ExitStack):
    """One shard's classifier input: per frame, the embeddings of its files one after the other, in
    the order given, read in blocks of `rows` rows into one float32 block; the files' IDs are checked
    block by block. Use as a context manager."""

    def __init__(self, *paths: str | Path, rows: int = BLOCK_ROWS):
        super().__init__()
        self.paths = tuple(map(Path, paths))
        self.rows = rows
        self.files = [self.enter_context(_open(path)) for path in self.paths]
        self.attrs = [dict(f.attrs) for f in self.files]
        shapes = [f["embeddings"].shape for f in self.files]
        counts = {len(f["ids"]) for f in self.files} | {s[0] for s in shapes}
        if len(counts) != 1 or any(len(s) != 2 for s in shapes):
            self.close()
            raise InputError(f"{' and '.join(map(str, paths))} hold different frames; delete them and run again")
        self.n = shapes[0][0]
        self.dims = tuple(s[1] for s in shapes)
        self.dim = sum(self.dims)
        self.block: np.ndarray | None = None

    def ids(self, start: int, stop: int) -> list[str]:
        """The IDs of rows start:stop, which every file must hold alike."""
        ids = [f["ids"].asstr()[start:stop].tolist() for f in self.files]
        for path, other in zip(self.paths[1:], ids[1:]):
            if other != ids[0]:
                raise InputError(f"{self.paths[0]} and {path} hold different frames; delete both and run again")
        return ids[0]

    def read_rows(self, start: int, stop: int, out: np.ndarray) -> list[str]:
        """Rows start:stop of the files into `out` (float32, [stop - start, dim]); their IDs."""
        ids = self.ids(start, stop)
        column = 0
        for handle, dim in zip(self.files, self.dims):
            if dim and stop > start:  # HDF5 reads (and converts float16) into the block's columns
                handle["embeddings"].read_direct(
                    out, np.s_[start:stop, :], np.s_[0 : stop - start, column : column + dim]
                )
            column += dim
        return ids

    def __iter__(self) -> Iterator[tuple[slice, list[str], np.ndarray]]:
        """(rows of the files, their IDs, their features: a view of the one block, valid until the next)."""
        if self.block is None:
            self.block = np.empty((min(self.rows, max(self.n, 1)), self.dim), dtype=np.float32)
        for start in range(0, self.n, self.rows):
            stop = min(start + self.rows, self.n)
            ids = self.read_rows(start, stop, self.block)
            yield slice(start, stop), ids, self.block[: stop - start]

    def read_into(self, out: np.ndarray, rows: np.ndarray, first: int = 0) -> list[str]:
        """Rows first to first + len(rows) of the files into rows `rows` of `out` (float32, [.., dim]),
        a block at a time; their IDs."""
        ids: list[str] = []
        block = np.empty((min(self.rows, max(len(rows), 1)), self.dim), dtype=np.float32)
        for start in range(0, len(rows), self.rows):
            stop = min(start + self.rows, len(rows))
            ids += self.read_rows(first + start, first + stop, block)
            out[rows[start:stop]] = block[: stop - start]
        return ids
