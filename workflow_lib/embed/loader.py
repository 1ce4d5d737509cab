"""The embed job's DataLoader: spawn workers read, tokenize and pack disjoint blocks of a shard.

Workers never touch CUDA (their init hides the GPUs before anything could initialise it), so the
main process only moves ready batches to the device. Each block of the shard belongs to exactly
one worker; the embed job still counts every row at the end, because a loader that loses or
repeats sequences fails silently otherwise.
"""

import contextlib
import hashlib
import operator
import os
import signal
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from workflow_lib.cli.errors import InputError
from workflow_lib.embed.packing import PackedBatch, greedy_batches, pack

# Records per block: the partly filled last batch of a block costs little, a worker's first batch comes soon.
BLOCK = 8192
PIECE = 4 << 20  # bytes of a shard read at a time while indexing it
# A worker that sends nothing for this long is stuck: fail the job instead of hanging it.
WORKER_TIMEOUT_S = 600


@dataclass(frozen=True)
class ShardIndex:
    """A shard FASTA written by prepare (a header line, a sequence line per record): where each
    block of BLOCK records starts (all a loader worker is given), its record count, and its SHA-256
    (an interrupted job's commits belong to this shard only)."""

    path: Path
    block_size: int
    offsets: list[int]  # byte offset of record i * block_size, then the file size
    n: int
    sha256: str

    @classmethod
    def read(cls, path: str | Path, planned: int | None = None) -> "ShardIndex":
        """Read in pieces; `planned`: the frames the run's plan gives the shard (else refused)."""
        path, block_size = Path(path), BLOCK
        n, offsets, digest = 0, [], hashlib.sha256()
        tail, start, n_lines = b"", 0, 0  # the unfinished line, where it starts, lines before it
        with open(path, "rb") as handle:
            while piece := handle.read(PIECE):
                digest.update(piece)
                lines = (tail + piece).split(b"\n")
                tail = lines.pop()
                headers = lines[n_lines % 2 :: 2]
                if any(not h.startswith(b">") for h in headers):
                    raise _not_a_shard(path)
                sizes = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1
                record_starts = (start + np.cumsum(sizes) - sizes)[n_lines % 2 :: 2]
                offsets += record_starts[-n % block_size :: block_size].tolist()
                n += len(headers)
                start, n_lines = start + int(sizes.sum()), n_lines + len(lines)
        if tail or n_lines % 2:
            raise _not_a_shard(path)
        if planned is not None and n != planned:
            # a prepare shard lies in the sample's shards directory, which Snakemake makes as a whole
            made = path.parent if path.parent.name == "shards" and path.parent.parent.name == "prepare" else path
            raise InputError(
                f"{path}: {n} frames where the plan has {planned}: cut short or changed since it was made; delete "
                f"{made} and run the workflow again"
            )
        return cls(path, block_size, offsets + [start], n, digest.hexdigest())

    def __len__(self) -> int:
        return self.n

    @property
    def n_blocks(self) -> int:
        return len(self.offsets) - 1

    def _lines(self, b: int) -> list[bytes]:
        """Block b's lines, header then sequence for each record, then an empty one."""
        with open(self.path, "rb") as handle:
            handle.seek(self.offsets[b])
            return handle.read(self.offsets[b + 1] - self.offsets[b]).split(b"\n")

    def read_block(self, b: int) -> list[bytes]:
        """The sequences of block b, read from the file."""
        return self._lines(b)[1::2]

    def block_ids(self, b: int) -> list[str]:
        return [header[1:].decode("utf-8") for header in self._lines(b)[:-1:2]]

    @property
    def ids(self) -> "ShardIds":
        return ShardIds(self)


class ShardIds(Sequence):
    """A shard's record IDs, read from its file a block at a time when asked for: a job holds none."""

    def __init__(self, index: ShardIndex):
        self.index = index

    def __len__(self) -> int:
        return self.index.n

    def __getitem__(self, key: int) -> str:
        i = operator.index(key) + (len(self) if key < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(f"record {key} of a shard of {len(self)}")
        return self.index.block_ids(i // self.index.block_size)[i % self.index.block_size]

    def __iter__(self) -> Iterator[str]:
        for b in range(self.index.n_blocks):
            yield from self.index.block_ids(b)


def _not_a_shard(path: Path) -> InputError:
    return InputError(f"{path}: not a shard written by prepare; delete the sample's prepare directory and run again")


class ShardBatches(IterableDataset):
    """Packed batches of a shard; worker w of W takes blocks w, w + W, ... `encode` turns a block's
    sequences into token arrays, unless `stored` gives block b's arrays (stored_tokens.py). Batches
    whose rows are all `done` (committed by an interrupted run) are left out; the others are the
    same batches as in a run from zero, so their results are the same to the bit."""

    def __init__(
        self,
        index: ShardIndex,
        encode: Callable[[list[bytes]], list[np.ndarray]],
        token_budget: int,
        done: np.ndarray | None = None,
        stored: Callable[[int], list[np.ndarray]] | None = None,
    ):
        self.index, self.encode, self.token_budget, self.stored = index, encode, token_budget, stored
        self.done = np.zeros(len(index), dtype=bool) if done is None else done

    def __iter__(self) -> Iterator[PackedBatch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for b in range(worker, self.index.n_blocks, workers):
            first = b * self.index.block_size
            done = self.done[first : first + self.index.block_size]
            if done.all():
                continue
            encoded = self.stored(b) if self.stored else self.encode(self.index.read_block(b))
            lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
            for batch in greedy_batches(lengths, self.token_budget):
                if not done[batch].all():
                    yield pack(first + batch, [encoded[i] for i in batch.tolist()], self.token_budget)


def init_worker(_worker_id: int) -> None:
    """Worker init: no CUDA, no thread pools, SIGTERM left to the main process (which shuts the
    workers down once it has committed)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    torch.set_num_threads(1)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _as_is(batch: PackedBatch) -> PackedBatch:
    return batch  # the default would turn numpy arrays into shared-memory tensors in the worker


@contextlib.contextmanager
def open_loader(dataset: ShardBatches, num_workers: int, prefetch_factor: int) -> Iterator[Iterator[PackedBatch]]:
    """Iterate the dataset's batches; workers are shut down on leaving, also on errors and signals."""
    workers = dict(
        multiprocessing_context="spawn",  # fork after CUDA or tokenizer threads start is unsafe
        worker_init_fn=init_worker,
        persistent_workers=True,
        prefetch_factor=prefetch_factor,
        timeout=WORKER_TIMEOUT_S,
    )
    loader = DataLoader(
        dataset, batch_size=None, collate_fn=_as_is, num_workers=num_workers, **(workers if num_workers else {})
    )
    iterator = iter(loader)
    try:
        yield iterator
    finally:
        shutdown = getattr(iterator, "_shutdown_workers", None)  # joins workers now, not at garbage collection
        if shutdown:
            shutdown()
