"""A shard's batches: spawn loader workers read, tokenize and pack disjoint blocks of it; sequences
sorted by length fill one concatenated row each up to a token budget.

A packed batch is one row of the sequences' tokens end to end, with `cu_seqlens` marking where
each sequence starts (the varlen layout of FlashAttention); nothing is padded or truncated.
Workers never touch CUDA (their init hides the GPUs before anything could initialise it), so the
main process only moves ready batches to the device. Each block of the shard belongs to exactly
one worker; the embed job still counts every row at the end, because a loader that loses or
repeats sequences fails silently otherwise.
"""

import contextlib
import hashlib
import os
import signal
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from workflow_lib.io.sharding import ShardIndex
from workflow_lib.models.varlen import Layout

# A worker that sends nothing for this long is stuck: fail the job instead of hanging it.
WORKER_TIMEOUT_S = 600


class PackedBatch(NamedTuple):
    """Arrays are numpy in loader workers (pickled by value: cheaper than shared-memory tensors for
    batches this small) and torch tensors from `tensors()` on."""

    rows: torch.Tensor  # int64 [B]: the sequences' rows in the shard
    tokens: torch.Tensor  # int64 [T]: their tokens, concatenated
    cu_seqlens: torch.Tensor  # int32 [B + 1]: sequence i is tokens[cu_seqlens[i]:cu_seqlens[i + 1]]
    max_len: int  # the longest sequence, in tokens
    slots: int  # the token budget this batch was packed into (its length when one sequence exceeds it)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def layout(self) -> Layout:
        """The index tensors the models' layers share, built once for the batch on its device."""
        return Layout(self.cu_seqlens, self.max_len, self.n_tokens)

    def tensors(self, pin: bool = False) -> "PackedBatch":
        """Torch tensors of the numpy arrays, in page-locked memory when `pin` (for async copies)."""
        convert = (lambda a: torch.from_numpy(a).pin_memory()) if pin else torch.from_numpy
        return self._replace(rows=convert(self.rows), tokens=convert(self.tokens), cu_seqlens=convert(self.cu_seqlens))

    def halves(self) -> tuple["PackedBatch", "PackedBatch"]:
        """The batch (of tensors) split into two by sequence count (to retry after running out of memory)."""
        middle = len(self.rows) // 2
        cu = self.cu_seqlens.cpu()
        lengths = cu.diff()
        cut = int(cu[middle])
        first = PackedBatch(self.rows[:middle], self.tokens[:cut], cu[: middle + 1], int(lengths[:middle].max()), cut)
        rest = self.n_tokens - cut
        second = PackedBatch(
            self.rows[middle:], self.tokens[cut:], cu[middle:] - cut, int(lengths[middle:].max()), rest
        )
        return first, second


def greedy_batches(lengths: np.ndarray, token_budget: int) -> list[np.ndarray]:
    """Indices sorted longest first (an out-of-memory error shows at a block's start), cut into runs
    whose summed lengths stay within the budget; a longer sequence gets a batch of its own."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    ends = np.cumsum(np.asarray(lengths)[order])
    batches, start, base = [], 0, 0
    while start < len(order):
        # the first index whose running total passes the budget closes the batch (at least one sequence)
        stop = max(int(np.searchsorted(ends, base + token_budget, side="right")), start + 1)
        batches.append(order[start:stop])
        base, start = int(ends[stop - 1]), stop
    return batches


def pack(rows: np.ndarray, encoded: list[np.ndarray], token_budget: int) -> PackedBatch:
    """One packed row from token arrays; `rows` are their places in the shard."""
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    cu = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu[1:])
    tokens = np.concatenate(encoded).astype(np.int64, copy=False)
    return PackedBatch(np.asarray(rows, dtype=np.int64), tokens, cu, int(lengths.max()), max(token_budget, int(cu[-1])))


def first_copies(index: ShardIndex) -> np.ndarray:
    """Each frame's first frame of the same sequence in the shard, itself where it is that first
    one. Sequences are compared by 128-bit BLAKE2b digests, 16 bytes a frame in memory: a collision
    among 10^8 frames has odds below 10^-22."""
    digests = np.empty(len(index), dtype="V16")
    for b in range(index.n_blocks):
        sequences = index.read_block(b)
        first = b * index.block_size
        digests[first : first + len(sequences)] = np.frombuffer(
            b"".join(hashlib.blake2b(sequence, digest_size=16).digest() for sequence in sequences), dtype="V16"
        )
    _, first, inverse = np.unique(digests, return_index=True, return_inverse=True)  # first: first occurrences
    return first[inverse]


class ShardBatches(IterableDataset):
    """Packed batches of a shard; worker w of W takes blocks w, w + W, ... `encode` turns a block's
    sequences into token arrays, unless `stored` gives block b's arrays (stored_tokens.py). Rows that
    are `copies` (first_copies) are left out, and so are batches whose rows are all `done` (committed
    by an interrupted run); the others are the same batches as in a run from zero, so their results
    are the same to the bit."""

    def __init__(
        self,
        index: ShardIndex,
        encode: Callable[[list[bytes]], list[np.ndarray]],
        token_budget: int,
        done: np.ndarray | None = None,
        stored: Callable[[int], list[np.ndarray]] | None = None,
        copies: np.ndarray | None = None,
    ):
        self.index, self.encode, self.token_budget, self.stored = index, encode, token_budget, stored
        self.done = np.zeros(len(index), dtype=bool) if done is None else done
        self.copies = np.zeros(len(index), dtype=bool) if copies is None else copies

    def __iter__(self) -> Iterator[PackedBatch]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        for b in range(worker, self.index.n_blocks, workers):
            first = b * self.index.block_size
            done = self.done[first : first + self.index.block_size]
            embedded = np.flatnonzero(~self.copies[first : first + self.index.block_size])
            if done[embedded].all():
                continue
            if self.stored:
                stored = self.stored(b)
                encoded = [stored[i] for i in embedded.tolist()]
            else:
                sequences = self.index.read_block(b)
                encoded = self.encode([sequences[i] for i in embedded.tolist()])
            lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
            for batch in greedy_batches(lengths, self.token_budget):
                if not done[embedded[batch]].all():
                    yield pack(first + embedded[batch], [encoded[i] for i in batch.tolist()], self.token_budget)


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
