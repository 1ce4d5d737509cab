"""Batches onto the device and pooled embeddings back, overlapped: host-to-device copies on a side
stream, results through pinned memory waited for a few batches later, and a batch that runs out
of GPU memory halved and retried. On the CPU all of this reduces to plain calls."""

import logging
import resource
from collections import deque

import numpy as np
import torch

from workflow_lib.embed.packing import PackedBatch

log = logging.getLogger("workflow")
# Pooled results waited for only when this many newer batches are queued behind them.
RESULTS_IN_FLIGHT = 4


class DeviceFeed:
    """Batches onto the device: copies run on a side stream, overlapping the compute of the
    batch before; outputs come back through pinned memory, waited for RESULTS_IN_FLIGHT
    batches later. A CUDA out-of-memory error halves the batch and retries, and later batches
    are cut to the size that fitted. On the CPU all of this reduces to plain calls."""

    def __init__(self, embedder, device: torch.device):
        self.embedder, self.device = embedder, device
        self.cuda = device.type == "cuda"
        self.copy_stream = torch.cuda.Stream(device) if self.cuda else None
        self.max_tokens = None  # set after an out-of-memory error
        self.splits = 0
        self.pending = deque()  # (rows, host tensor, event)

    def send(self, batch: PackedBatch) -> tuple[PackedBatch, PackedBatch]:
        """(host batch, device batch); the copy is only enqueued."""
        if not self.cuda:
            return batch, batch
        with torch.cuda.stream(self.copy_stream):
            moved = batch._replace(
                tokens=batch.tokens.to(self.device, non_blocking=True),
                cu_seqlens=batch.cu_seqlens.to(self.device, non_blocking=True),
            )
        return batch, moved

    def compute(self, host: PackedBatch, moved: PackedBatch):
        """Embed one sent batch; yields (rows, pooled float32 numpy) as results arrive."""
        if self.cuda:
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.copy_stream)
            for tensor in (moved.tokens, moved.cu_seqlens):
                tensor.record_stream(current)  # the copy stream's memory is used on this one
        if self.max_tokens is not None and moved.n_tokens > self.max_tokens and len(host.rows) > 1:
            yield from self._halves(host)
            return
        pooled = self._forward(moved)
        if pooled is None:
            del moved  # this batch's device copies: nothing of the failed forward is left
            if len(host.rows) == 1:
                raise RuntimeError(
                    f"one sequence of {host.n_tokens} tokens does not fit in GPU memory; "
                    "use a larger GPU, or embedding.precision fp16 or bf16 if it is fp32"
                )
            if self.cuda:
                torch.cuda.empty_cache()
            self.max_tokens = host.n_tokens // 2
            log.warning(
                "out of GPU memory on %d tokens: batches are split to %d tokens", host.n_tokens, self.max_tokens
            )
            yield from self._halves(host)
            return
        yield from self._collect(host.rows.numpy(), pooled)

    def _forward(self, moved: PackedBatch) -> torch.Tensor | None:
        """Pooled embeddings, or None when the device ran out of memory. The retry must not run
        inside the `except` block: its traceback holds the failed forward's activations, which
        neither the retry nor empty_cache() could then use."""
        try:
            return self.embedder(moved.tokens, moved.layout())
        except torch.OutOfMemoryError:
            return None

    def _halves(self, host: PackedBatch):
        self.splits += 1
        for half in host.halves():
            yield from self.compute(*self.send(half))

    def _collect(self, rows: np.ndarray, pooled: torch.Tensor):
        if not self.cuda:
            yield rows, pooled.numpy()
            return
        host = torch.empty(pooled.shape, dtype=torch.float32, pin_memory=True)
        host.copy_(pooled, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self.pending.append((rows, host, event))
        while len(self.pending) > RESULTS_IN_FLIGHT:
            yield self._arrived()

    def _arrived(self) -> tuple[np.ndarray, np.ndarray]:
        rows, host, event = self.pending.popleft()
        event.synchronize()
        return rows, host.numpy()

    def flush(self):
        while self.pending:
            yield self._arrived()

    def peak_memory(self) -> int:
        """Peak bytes allocated on the GPU, or the peak resident size of this process on the CPU."""
        if self.cuda:
            return torch.cuda.max_memory_allocated(self.device)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
