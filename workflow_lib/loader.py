"""The embed job's DataLoader: spawn workers read, tokenize and pack disjoint blocks of a shard.

Workers never touch CUDA (their init hides the GPUs before anything could initialise it), so the
main process only moves ready batches to the device. Each block of the shard belongs to exactly
one worker; the embed job still counts every row at the end, because a loader that loses or
repeats sequences fails silently otherwise.
"""

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from .errors import InputError
from .packing import PackedBatch, greedy_batches, pack

# Records per block: large enough that the partly filled last batch of a block costs little
# fill, small enough that a worker's first batch comes quickly.
BLOCK = 8192
# A worker that sends nothing for this long is stuck: fail the job instead of hanging it.
WORKER_TIMEOUT_S = 600


@dataclass(frozen=True)
class ShardIndex:
    """A shard FASTA written by prepare (one header line, one sequence line per record): its IDs
    and where each block of `block_size` records starts, so that workers can seek to their own."""

    path: Path
    ids: list[str]
    block_size: int
    offsets: list[int]  # byte offset of record i * block_size, then the file size
    sha256: str  # of the file: an interrupted job's committed results belong to this shard only

    @classmethod
    def read(cls, path: str | Path, block_size: int | None = None) -> "ShardIndex":
        path, block_size = Path(path), block_size or BLOCK
        data = path.read_bytes()
        lines = data.split(b"\n")
        if lines[-1] or len(lines) % 2 == 0 or any(not h.startswith(b">") for h in lines[0:-1:2]):
            raise InputError(
                f"{path}: not a shard written by prepare; delete the sample's prepare directory and run again"
            )
        ids = [h[1:].decode("utf-8") for h in lines[0:-1:2]]  # IDs may hold any character but a newline
        ends = np.cumsum(np.fromiter(map(len, lines[:-1]), dtype=np.int64, count=len(lines) - 1) + 1)
        starts = np.concatenate(([0], ends[1::2]))  # record r starts after line 2r - 1
        offsets = [int(starts[i]) for i in range(0, len(ids), block_size)] + [len(data)]
        return cls(path, ids, block_size, offsets, hashlib.sha256(data).hexdigest())

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_blocks(self) -> int:
        return len(self.offsets) - 1

    def block(self, b: int) -> list[bytes]:
        """The sequences of block b, read from the file."""
        with open(self.path, "rb") as handle:
            handle.seek(self.offsets[b])
            return handle.read(self.offsets[b + 1] - self.offsets[b]).split(b"\n")[1::2]


class ShardBatches(IterableDataset):
    """Packed batches of a shard. With several workers, worker w takes blocks w, w + W, ...;
    `encode` turns a block's sequences (bytes) into their models' token arrays, BOS/EOS included.

    Batches whose rows are all `done` (committed by an interrupted run) are left out; the others
    are the same batches as in a run from zero, so their results are the same to the bit."""

    def __init__(
        self,
        index: ShardIndex,
        encode: Callable[[list[bytes]], list[np.ndarray]],
        token_budget: int,
        done: np.ndarray | None = None,
    ):
        self.index, self.encode, self.token_budget = index, encode, token_budget
        self.done = np.zeros(len(index), dtype=bool) if done is None else done

    def __iter__(self) -> Iterator[PackedBatch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for b in range(worker, self.index.n_blocks, workers):
            first = b * self.index.block_size
            done = self.done[first : first + self.index.block_size]
            if done.all():
                continue
            encoded = self.encode(self.index.block(b))
            lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
            for batch in greedy_batches(lengths, self.token_budget):
                if not done[batch].all():
                    yield pack(first + batch, [encoded[i] for i in batch.tolist()], self.token_budget)


def hide_gpus(_worker_id: int) -> None:
    """Worker init: no CUDA in loader workers, and no thread pools inside them."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    torch.set_num_threads(1)


def _as_is(batch: PackedBatch) -> PackedBatch:
    return batch  # the default would turn numpy arrays into shared-memory tensors in the worker


def default_num_workers(threads: int) -> int:
    """embedding.num_workers auto: one worker per CPU of the job beyond the main process, at most 8."""
    return max(0, min(threads - 1, 8))


@contextlib.contextmanager
def open_loader(dataset: ShardBatches, num_workers: int, prefetch_factor: int) -> Iterator[Iterator[PackedBatch]]:
    """Iterate the dataset's batches (numpy arrays); workers are shut down on leaving, also on
    errors and signals."""
    workers = dict(
        multiprocessing_context="spawn",  # fork after CUDA or tokenizer threads start is unsafe
        worker_init_fn=hide_gpus,
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


def queue_depth(iterator: Iterator) -> int | None:
    """Batches ready in the loader's queue (None when the platform cannot tell)."""
    queue = getattr(iterator, "_data_queue", None)
    try:
        return queue.qsize() if queue is not None else None
    except NotImplementedError:  # multiprocessing queues on macOS
        return None
