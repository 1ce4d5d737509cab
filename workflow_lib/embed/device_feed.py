"""Batches onto the device and pooled embeddings back, overlapped: host-to-device copies on a side
stream, results through pinned memory waited for a few batches later, and a batch that runs out
of GPU memory halved and retried. On the CPU all of this reduces to plain calls."""

import logging
from collections import deque

import numpy as np
import torch

from workflow_lib.embed.packing import PackedBatch

log = logging.getLogger("workflow")
# Pooled results waited for only when this many newer batches are queued behind them.
RESULTS_IN_FLIGHT = 4


class DeviceFeed:
    """`submit` starts a batch (copied on a side stream, its forward queued behind the copy); `ready`
    gives the (rows in the shard, token counts, pooled embeddings) of batches RESULTS_IN_FLIGHT newer
    ones were submitted behind (on the CPU: all), `drain` every one pending. Out of memory, a batch
    is halved and retried, and later batches are cut to the size that fitted."""

    def __init__(self, embedder, device: torch.device):
        self.embedder, self.device = embedder, device
        self.cuda = device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(device) if self.cuda else None
        self.max_tokens = None  # set after an out-of-memory error
        self.splits = 0
        self.pending = deque()  # (rows, tokens, pooled on the host, CUDA event or None)

    def submit(self, batch: PackedBatch) -> None:
        """Start embedding `batch` (torch tensors on the host, page-locked for CUDA)."""
        if self.max_tokens is not None and batch.n_tokens > self.max_tokens and len(batch.rows) > 1:
            return self._submit_halves(batch)
        moved = self._to_device(batch)
        pooled = self._forward(moved)
        if pooled is None:
            del moved  # this batch's device copies: nothing of the failed forward is left
            if len(batch.rows) == 1:
                raise RuntimeError(
                    f"one sequence of {batch.n_tokens} tokens does not fit in GPU memory; "
                    "use a larger GPU, or embedding.precision fp16 or bf16 if it is fp32"
                )
            if self.cuda:
                torch.cuda.empty_cache()
            self.max_tokens = batch.n_tokens // 2
            log.warning(f"out of GPU memory on {batch.n_tokens} tokens: batches are split to {self.max_tokens} tokens")
            return self._submit_halves(batch)
        rows, tokens, event = batch.rows.numpy(), np.diff(batch.cu_seqlens.numpy()), None
        if self.cuda:
            host = torch.empty(pooled.shape, dtype=torch.float32, pin_memory=True)
            host.copy_(pooled, non_blocking=True)
            pooled, event = host, torch.cuda.Event()
            event.record()
        self.pending.append((rows, tokens, pooled, event))

    def ready(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        keep = RESULTS_IN_FLIGHT if self.cuda else 0
        return [self._arrived() for _ in range(len(self.pending) - keep)]

    def drain(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        return [self._arrived() for _ in range(len(self.pending))]

    def _to_device(self, batch: PackedBatch) -> PackedBatch:
        """The batch's tensors on the device, copied on the side stream that compute waits for."""
        if not self.cuda:
            return batch
        with torch.cuda.stream(self.copy_stream):
            moved = batch._replace(
                tokens=batch.tokens.to(self.device, non_blocking=True),
                cu_seqlens=batch.cu_seqlens.to(self.device, non_blocking=True),
            )
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.copy_stream)
        for tensor in (moved.tokens, moved.cu_seqlens):
            tensor.record_stream(current)  # the copy stream's memory is used on this one
        return moved

    def _forward(self, moved: PackedBatch) -> torch.Tensor | None:
        """Pooled embeddings, or None when the device ran out of memory. The retry must not run
        inside the `except` block: its traceback holds the failed forward's activations, which
        neither the retry nor empty_cache() could then use."""
        try:
            return self.embedder(moved.tokens, moved.layout())
        except torch.OutOfMemoryError:
            return None

    def _submit_halves(self, batch: PackedBatch) -> None:
        self.splits += 1
        for half in batch.halves():
            self.submit(half)

    def _arrived(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows, tokens, pooled, event = self.pending.popleft()
        if event is not None:
            event.synchronize()
        return rows, tokens, pooled.numpy()
