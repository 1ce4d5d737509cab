"""The embed job's DataLoader: spawn workers read, tokenize and pack disjoint blocks of a shard.

Workers never touch CUDA (their init hides the GPUs before anything could initialise it), so the
main process only moves ready batches to the device. Each block of the shard belongs to exactly
one worker; the embed job still counts every row at the end, because a loader that loses or
repeats sequences fails silently otherwise.
"""

import contextlib
import os
import signal
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from workflow_lib.embed.packing import PackedBatch, greedy_batches, pack
from workflow_lib.io.sharding import ShardIndex

# A worker that sends nothing for this long is stuck: fail the job instead of hanging it.
WORKER_TIMEOUT_S = 600


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
