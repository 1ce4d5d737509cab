"""The embed job: one shard FASTA through one model (ESM-2 or DNABERT-S) into the HDF5 contract.

Loader workers read, tokenize and pack the shard; the main process copies each batch to the
device on a side stream while the previous one computes, and brings pooled embeddings back
without waiting on every batch. Every frame comes out exactly once (checked before anything is
written), in the shard's order.
"""

import contextlib
import importlib.metadata
import json
import logging
import os
import platform
import resource
import signal
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import __version__, checksums, h5store, locks
from .errors import InputError
from .loader import ShardBatches, ShardIndex, default_num_workers, open_loader, queue_depth
from .models import varlen
from .outputs import atomic_open
from .packing import PackedBatch
from .progress import Progress
from .resume import Commits

log = logging.getLogger("workflow")
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Pooled results waited for only when this many newer batches are queued behind them.
RESULTS_IN_FLIGHT = 4


@dataclass(frozen=True)
class EmbedSettings:
    model: str  # "esm" or "dnabert"
    checkpoint: str
    layer: int | None = None  # ESM-2 only
    device: str = "auto"
    precision: str = "fp16"
    token_budget: int = 16384
    cache_dir: str | None = None
    num_workers: int | None = None  # None: one per CPU of the job beyond the main process, at most 8
    prefetch_factor: int = 2
    expandable_segments: bool = True
    commit_seconds: float = 60.0  # how often finished results are committed, for a killed job to resume
    known_checksums: dict | None = None  # checksums.describe() of model files by the run's model check
    progress_seconds: float = 30.0  # between progress lines


def allocator_conf_variable() -> str:
    """The variable this torch reads its allocator settings from: PYTORCH_ALLOC_CONF since the
    allocator config became device-generic (torch 2.9, which warns on the old CUDA name)."""
    return "PYTORCH_ALLOC_CONF" if hasattr(torch._C, "_accelerator_setAllocatorSettings") else "PYTORCH_CUDA_ALLOC_CONF"


def set_allocator_conf(value: str) -> None:
    """Allocator settings for this process, unless the user gave their own under either name."""
    if not {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"} & os.environ.keys():
        os.environ[allocator_conf_variable()] = value


def select_device(name: str) -> torch.device:
    """The device to embed on. With several GPUs visible, this job claims one that no concurrent
    job holds (SLURM gives each job its own; a local run on a multi-GPU node does not)."""
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError(
            "embedding.device is 'cuda' but no CUDA device is visible to this job; "
            "request a GPU or set embedding.device to 'auto' or 'cpu'"
        )
    if name == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    count = torch.cuda.device_count()
    index = locks.claim_gpu([str(torch.cuda.get_device_properties(i).uuid) for i in range(count)]) if count > 1 else 0
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def select_precision(precision: str, device: torch.device) -> str:
    """Half precision is for GPUs; on the CPU embeddings are always computed in float32."""
    return precision if device.type == "cuda" else "fp32"


def build_embedder(settings: EmbedSettings, device: torch.device, dtype: torch.dtype):
    if settings.model == "esm":
        from .models import esm

        model, alphabet = esm.load(settings.checkpoint, settings.cache_dir)
        layer = model.num_layers if settings.layer is None else settings.layer
        return esm.ESMEmbedder(model, alphabet, layer, device, dtype)
    from .models import dnabert

    model, tokens = dnabert.load(settings.checkpoint, settings.cache_dir)
    return dnabert.DNABERTEmbedder(model, tokens, device, dtype)


def checkpoint_digests(settings: EmbedSettings) -> dict[str, str]:
    """{file name: SHA-256} of the model files the job loaded."""
    if settings.model == "esm":
        from .models import esm

        files = esm.checkpoint_files(settings.checkpoint, settings.cache_dir)
    else:
        from .models import dnabert

        files = dnabert.checkpoint_files(dnabert.resolve(settings.checkpoint, settings.cache_dir))
    return checksums.digests(checksums.describe(files, settings.known_checksums))


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
            return self.embedder(moved)
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


@contextlib.contextmanager
def sigterm_exits():
    """SLURM preemption sends SIGTERM: leave through the normal exits, so loader workers are
    shut down and no partial output is left."""

    def handler(signum, _frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Meter:
    """Throughput figures of a job: tokens, packing fill, and time waiting for the loader."""

    def __init__(self):
        self.start = time.monotonic()
        self.tokens = self.slots = self.batches = 0
        self.loader_wait = 0.0

    def add(self, batch: PackedBatch) -> None:
        self.tokens += batch.n_tokens
        self.slots += batch.slots
        self.batches += 1

    @property
    def elapsed(self) -> float:
        return max(time.monotonic() - self.start, 1e-9)

    def summary(self, feed: DeviceFeed, depth: int | None = None) -> str:
        text = (
            f"{self.tokens / self.elapsed:,.0f} tokens/s, fill {self.tokens / max(self.slots, 1):.1%}, "
            f"loader wait {self.loader_wait:.1f} s of {self.elapsed:.1f} s, "
            f"peak memory {feed.peak_memory() / 2**30:.2f} GiB"
        )
        return text + (f", {depth} batches queued" if depth is not None else "")


def embed_shard(
    input_path: str | Path, output_path: str | Path, settings: EmbedSettings, figures_path: str | Path | None = None
) -> dict:
    """Embed one shard into `output_path` (HDF5); its figures (the HDF5 attributes and the frame
    count) also go to `figures_path` (JSON), for the run summary to read without the embeddings."""
    if settings.expandable_segments:  # read when CUDA first allocates: before anything touches the GPU
        set_allocator_conf("expandable_segments:True")
    index = ShardIndex.read(input_path)
    # a shard with no frames is given no GPU (rules/embed.smk): it only writes the empty file
    device = select_device(settings.device) if len(index) else torch.device("cpu")
    precision = select_precision(settings.precision, device)
    dtype = PRECISIONS[precision]
    loading = time.monotonic()
    embedder = build_embedder(settings, device, dtype)
    asked = default_num_workers() if settings.num_workers is None else settings.num_workers
    # Workers take whole blocks; with a single block one would only add its start-up (seconds).
    workers = min(asked, index.n_blocks) if index.n_blocks > 1 else 0
    log.info(
        "%s on %s (%s): %d frames from %s, token budget %d, %d loader workers (%d asked, %d blocks); "
        "CUDA_VISIBLE_DEVICES=%s",
        settings.model,
        device,
        precision,
        len(index),
        input_path,
        settings.token_budget,
        workers,
        asked,
        index.n_blocks,
        os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"),  # SLURM names the GPUs it gave the job here
    )

    digests = checkpoint_digests(settings)
    load_seconds = time.monotonic() - loading
    out = np.zeros((len(index), embedder.dim), dtype=np.float32)
    row_tokens = np.zeros(len(index), dtype=np.int64)
    commits = Commits(output_path, _fingerprint(settings, index, digests, precision, device), settings.commit_seconds)
    committed = commits.restore(out, row_tokens)
    written = committed.astype(np.int64)
    done = int(committed.sum())
    if done:
        log.info("resuming: %d of %d frames were committed by an interrupted run", done, len(index))
    progress = Progress(log, "frames", total=len(index), interval=settings.progress_seconds, done_before=done)
    feed = DeviceFeed(embedder, device)
    meter = Meter()  # embedding only: loading the model is load_seconds
    dataset = ShardBatches(index, embedder.tokens, settings.token_budget, committed)
    with sigterm_exits(), open_loader(dataset, workers, settings.prefetch_factor) as batches:

        def next_batch():
            waited = time.monotonic()
            batch = next(batches, None)
            meter.loader_wait += time.monotonic() - waited
            if batch is None:
                return None
            row_tokens[batch.rows] = np.diff(batch.cu_seqlens)
            return batch.tensors(pin=feed.cuda)

        def store(results):
            nonlocal done
            for rows, pooled in results:
                fresh = ~committed[rows]  # a batch split after running out of memory may be partly committed
                rows = rows[fresh]
                out[rows] = pooled[fresh]
                written[rows] += 1
                commits.add(rows)
                done += len(rows)  # a running count: a scan of `written` per batch would be quadratic

        try:
            batch = next_batch()
            sent = feed.send(batch) if batch is not None else None
            while sent is not None:
                meter.add(sent[0])
                results = feed.compute(*sent)
                # the GPU runs this batch's kernels while the host fetches and sends the next one
                first = next(results, None)
                batch = next_batch()
                sent = feed.send(batch) if batch is not None else None
                store([first] if first is not None else [])
                store(results)
                if commits.due():
                    commits.commit(out, row_tokens)
                if progress.due():
                    log.info(progress.line(done, meter.summary(feed, queue_depth(batches))))
            store(feed.flush())
        except (SystemExit, KeyboardInterrupt):  # SIGTERM (preemption) or Ctrl-C: keep what is done
            commits.commit(out, row_tokens)
            log.warning(
                "stopped after %d of %d frames; they are committed: run the job again to resume", done, len(index)
            )
            raise

    if not (written == 1).all():
        lost, repeated = np.flatnonzero(written == 0), np.flatnonzero(written > 1)
        raise RuntimeError(
            f"{input_path}: {lost.size} frames not embedded (e.g. {[index.ids[i] for i in lost[:3]]}), "
            f"{repeated.size} embedded more than once (e.g. {[index.ids[i] for i in repeated[:3]]})"
        )
    if not np.isfinite(out).all():
        bad = np.flatnonzero(~np.isfinite(out).all(axis=1))
        raise RuntimeError(
            f"{input_path}: non-finite embeddings for {[index.ids[i] for i in bad[:3]]}; "
            "set embedding.precision to fp32 or bf16"
        )
    seconds = meter.elapsed
    stats = {
        "model": settings.model,
        "checkpoint": settings.checkpoint,
        "layer": int(embedder.layer),
        "dim": int(embedder.dim),
        "precision": precision,
        "pooling": embedder.pooling,
        "n_tokens": int(row_tokens.sum()),
        "workflow_version": __version__,
        "checkpoint_sha256": json.dumps(digests, sort_keys=True),
        "device": str(device),
        "attention": varlen.kernel_name(device, dtype, embedder.alibi),
        "load_seconds": round(load_seconds, 3),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(meter.tokens / seconds),
        "fill": round(meter.tokens / max(meter.slots, 1), 4),
        "token_budget": settings.token_budget,
        "batches": meter.batches,
        "oom_splits": feed.splits,
        "num_workers": workers,
        "prefetch_factor": settings.prefetch_factor,
        "loader_wait_s": round(meter.loader_wait, 3),
        "peak_memory_bytes": int(feed.peak_memory()),
        "resumed_frames": int(committed.sum()),
        "versions": json.dumps(versions(device)),
    }
    h5store.write(output_path, index.ids, out, stats)
    if figures_path:
        with atomic_open(figures_path) as handle:
            json.dump({**stats, "frames": len(index)}, handle, indent=2)
    commits.remove()
    log.info(progress.line(len(index), f"{meter.summary(feed)}, wrote {output_path}"))
    return stats


def versions(device: torch.device) -> dict:
    """The software and the device that made the embeddings, for the run summary."""
    packages = {}
    for name in ("torch", "fair-esm", "numpy", "h5py", "tokenizers"):
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    return {
        "python": platform.python_version(),
        **packages,
        "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
    }


def _fingerprint(settings: EmbedSettings, index: ShardIndex, digests: dict, precision: str, device) -> dict:
    """What committed results depend on: the shard, the model files and the batches."""
    return {
        "shard_sha256": index.sha256,
        "block_size": index.block_size,
        "model": settings.model,
        "checkpoint_sha256": digests,
        "layer": settings.layer,
        "precision": precision,
        "device": device.type,
        "token_budget": settings.token_budget,
        "workflow_version": __version__,
    }
