"""The embed job: one shard FASTA through one configured model (ESM-2, DNABERT-S) into the HDF5 contract.

Loader workers read, tokenize and pack the shard; the main process submits each batch to the device
and stores the results that are ready (device_feed.py), into the HDF5 output as they come (resume.py);
every frame comes out exactly once, checked before the output is renamed into place.
"""

import contextlib
import importlib.metadata
import json
import logging
import os
import platform
import re
import resource
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from workflow_lib import __version__
from workflow_lib.cli.errors import InputError
from workflow_lib.cli.progress import Progress
from workflow_lib.cli.settings import EmbedSettings
from workflow_lib.embed import rates, stored_tokens
from workflow_lib.embed.device_feed import DeviceFeed
from workflow_lib.embed.packing import PackedBatch, ShardBatches, first_copies, open_loader
from workflow_lib.embed.resume import ShardRows, sigterm_held
from workflow_lib.io import checksums, h5store, locks
from workflow_lib.io.sharding import ShardIndex
from workflow_lib.io.tables import write_json
from workflow_lib.models import ARCHITECTURES, loading_module, varlen

log = logging.getLogger("workflow")
# fp8: ESM-2's feed-forward GEMMs in FP8 (models/esm.py), the rest of the model in fp16
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp8": torch.float16}
GPUS_VARIABLE = "VIRNUCPRO_GPUS"
PACKAGES = ("torch", "fair-esm", "numpy", "h5py", "tokenizers")  # all pinned in requirements.txt
_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)[a-z]?$")  # sm_86, sm_90a, sm_100, compute_120


def set_allocator_conf(value: str) -> None:
    """Allocator settings for this process (the pinned torch reads PYTORCH_ALLOC_CONF and warns on the
    old CUDA name), unless the user gave their own under either name."""
    if not {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"} & os.environ.keys():
        os.environ["PYTORCH_ALLOC_CONF"] = value


@contextlib.contextmanager
def claimed_device(name: str, gpu_mem_mb: int | None = None, until_exit: bool = False) -> Iterator[torch.device]:
    """The device to embed on, while in the context. On a GPU, the job claims `gpu_mem_mb` of one
    (None: a whole GPU; locks.claim_gpu): a local run gives its jobs no GPU of their own. Where CUDA
    shows none, GPUS_VARIABLE may name stand-ins ("UUID=MB,UUID=MB") for tests of the claims."""
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError(
            "embedding.device is 'cuda' but no CUDA device is visible to this job; "
            "request a GPU or set embedding.device to 'auto' or 'cpu'"
        )
    if name == "cpu":
        gpus = []
    elif torch.cuda.is_available():
        properties = map(torch.cuda.get_device_properties, range(torch.cuda.device_count()))
        gpus = [locks.Gpu(str(p.uuid), p.total_memory // 2**20) for p in properties]
    else:
        named = (item.split("=") for item in os.environ.get(GPUS_VARIABLE, "").split(",") if item)
        gpus = [locks.Gpu(uuid, int(mb)) for uuid, mb in named]
    if not gpus:
        yield torch.device("cpu")
        return
    with locks.claim_gpu(gpus, gpu_mem_mb, until_exit=until_exit) as index:
        share = f"{gpu_mem_mb} MB" if gpu_mem_mb else "all"
        log.info(f"claimed {share} of GPU {index} ({gpus[index].uuid}, {gpus[index].memory_mb} MB)")
        if not torch.cuda.is_available():  # GPUS_VARIABLE's stand-ins
            yield torch.device("cpu")
            return
        torch.cuda.set_device(index)
        yield torch.device("cuda", index)


def select_precision(precision: str, device: torch.device, architecture: str) -> str:
    """float32 on the CPU. A GPU this torch has no kernels for, or bf16 on a GPU without it, stops the
    job with what to do; fp8 for an architecture without it computes in fp16."""
    if device.type != "cuda":
        return "fp32"
    major, minor = torch.cuda.get_device_capability(device)
    check_gpu(torch.cuda.get_device_name(device), (major, minor), torch.cuda.get_arch_list(), torch.version.cuda)
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        raise InputError(
            f"{torch.cuda.get_device_name(device)} does not compute in bf16; set embedding.precision to fp16"
        )
    return "fp16" if precision == "fp8" and not ARCHITECTURES[architecture].fp8_weights_per_layer else precision


def check_gpu(name: str, capability: tuple[int, int], arch_list: list[str], cuda: str | None) -> None:
    """This torch build runs on a GPU of `capability` when it holds a binary for the same major
    version and a minor one no newer (sm_80 runs on 8.6), or PTX for an older capability."""
    major, minor = capability
    built = [(match[1], int(match[2]), int(match[3])) for match in map(_ARCH.match, arch_list) if match]
    binaries = [(m, n) for kind, m, n in built if kind == "sm"]
    ptx = [(m, n) for kind, m, n in built if kind == "compute"]
    if any(m == major and n <= minor for m, n in binaries) or any((m, n) <= capability for m, n in ptx):
        return
    raise InputError(
        f"{name} (compute capability {major}.{minor}) is not supported by this torch build (CUDA {cuda}, kernels "
        f"for {', '.join(arch_list) or 'none'}); run the embed jobs on newer GPUs (slurm_extra --constraint or "
        "gpu_model in the profile), install a torch build for this GPU, or set embedding.device to cpu"
    )


def build_embedder(settings: EmbedSettings, device: torch.device, precision: str, digests: dict | None = None):
    model = loading_module(settings.architecture)
    dtype, fp8 = PRECISIONS[precision], precision == "fp8"
    return model.embedder(settings.checkpoint, settings.cache_dir, settings.layer, device, dtype, fp8, digests)


@contextlib.contextmanager
def sigterm_exits() -> Iterator[Callable[[], None]]:
    """A SIGTERM (SLURM's at a time limit or preemption, Snakemake's when stopped) raises SystemExit(143)
    in the main process, which leaves through its normal exits. Yields `finishing`: once called (every
    frame committed), a SIGTERM is only noted: stopped after its output was renamed, the job would exit
    143 and Snakemake would delete that output, its commits perhaps gone already."""

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    def noted(signum, _frame):
        log.warning("a SIGTERM came after the last batch: the job finishes first")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield lambda: signal.signal(signal.SIGTERM, noted)
    finally:
        if signal.getsignal(signal.SIGTERM) is stop:  # not finishing: the handler of before again
            signal.signal(signal.SIGTERM, previous)


class Meter:
    """Throughput figures of a job. The rate is from the end of the first batch on: the loader's
    start-up and the first forward (a compile) are `startup_s`, apart."""

    def __init__(self, device: torch.device):
        self.device, self.start = device, time.monotonic()
        self.steady_from, self.tokens_before = None, 0
        self.tokens = self.slots = self.batches = 0
        self.loader_wait = 0.0

    def timed(self, loader: Iterator[PackedBatch]) -> Iterator[PackedBatch]:
        while True:
            waited = time.monotonic()
            batch = next(loader, None)
            self.loader_wait += time.monotonic() - waited
            if batch is None:
                return
            if self.batches == 1:  # the first batch is done
                self.steady_from, self.tokens_before = time.monotonic(), self.tokens
            self.tokens += batch.n_tokens
            self.slots += batch.slots
            self.batches += 1
            yield batch

    def rate(self) -> float:
        """Tokens/s (of the whole job when it had one batch)."""
        if self.steady_from is None:
            return self.tokens / max(time.monotonic() - self.start, 1e-9)
        return (self.tokens - self.tokens_before) / max(time.monotonic() - self.steady_from, 1e-9)

    def peak_memory(self) -> int:
        """Peak bytes allocated on the GPU, or the peak resident size of this process on the CPU."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def summary(self) -> str:
        return (
            f"{self.rate():,.0f} tokens/s, fill {self.tokens / max(self.slots, 1):.1%}, "
            f"loader wait {self.loader_wait:.1f} s of {time.monotonic() - self.start:.1f} s, "
            f"peak memory {self.peak_memory() / 2**30:.2f} GiB"
        )


def embed_shard(
    input_path: str | Path,
    output_path: str | Path,
    figures_path: str | Path,
    settings: EmbedSettings,
    tokens_path: str | Path | None = None,
    planned_frames: int | None = None,
    gpu_mem_mb: int | None = None,
    claim_until_exit: bool = False,
    rate_key: str | None = None,
    planned_tokens: int | None = None,
) -> dict:
    """Embed one shard into `output_path` (HDF5), its figures also into `figures_path` (JSON).
    `tokens_path`: its stored tokens (stored_tokens.py). `rate_key` (rates.model_key) and
    `planned_tokens` (the shard's ESM-2 tokens): its steady rate is recorded (rates.py)."""
    with sigterm_exits() as finishing, contextlib.ExitStack() as claim:
        if settings.expandable_segments:  # read when CUDA first allocates: before anything touches the GPU
            set_allocator_conf("expandable_segments:True")
        index = ShardIndex.read(input_path, planned=planned_frames)
        # each distinct sequence is embedded once, its copies given its embedding (embedding.embed_copies);
        # found before a GPU is claimed, which would wait idle meanwhile
        source = np.arange(len(index)) if settings.embed_copies else first_copies(index)
        # a shard with no frames is given no GPU (rules/embed.smk): it only writes the empty file
        name = settings.device if len(index) else "cpu"
        device = claim.enter_context(claimed_device(name, gpu_mem_mb, claim_until_exit))
        precision = select_precision(settings.precision, device, settings.architecture)
        loading = time.monotonic()
        files = loading_module(settings.architecture).checkpoint_files(settings.checkpoint, settings.cache_dir)
        digests = checksums.digests(checksums.describe(files, settings.known_checksums))
        embedder = build_embedder(settings, device, precision, digests)
        # embedding.num_workers auto: one worker per CPU of the job beyond the main process, at most 8;
        # none for a single block, which one would only delay
        asked = max(0, min(settings.threads - 1, 8)) if settings.num_workers == "auto" else settings.num_workers
        workers = min(asked, index.n_blocks) if index.n_blocks > 1 else 0
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)")  # SLURM names the GPUs it gave the job here
        log.info(
            f"{settings.model} on {device} ({precision}): {len(index)} frames from {input_path}, token budget "
            f"{settings.token_budget}, {workers} loader workers ({asked} asked, {index.n_blocks} blocks); "
            f"CUDA_VISIBLE_DEVICES={visible}"
        )
        stored = stored_tokens.checked(tokens_path, index, digests["tokenizer.json"]) if tokens_path else None
        load_seconds = time.monotonic() - loading

        gpu_name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
        made_by = {  # what committed results depend on: the shard, the model files and the batches
            "shard_sha256": index.sha256,
            "block_size": index.block_size,
            "model": settings.model,
            "checkpoint_sha256": digests,
            "layer": settings.layer,
            "precision": precision,
            "storage": settings.storage,
            "device": device.type,
            # a retry on another GPU model computes other last bits: it must not append to these rows
            "device_name": gpu_name or "cpu",
            "token_budget": settings.token_budget,
            "workflow_version": __version__,
        }
        rows = ShardRows(output_path, made_by, settings.commit_seconds)
        with h5store.create(output_path, index, embedder.dim, settings.storage, tmp=rows.scratch) as writer:
            rows.replay(index, writer, source)
            resumed = rows.done
            batches = ShardBatches(index, embedder.tokens, settings.token_budget, rows.committed, stored, rows.copies)
            feed = DeviceFeed(embedder, device)
            meter = run_batches(batches, feed, rows, workers, settings)
            finishing()
            rows.copy_rows()
            rows.check_complete()
            stats = {  # what made the embeddings, and the job's figures
                "model": settings.model,
                "checkpoint": settings.checkpoint,
                "layer": int(embedder.layer),
                "dim": int(embedder.dim),
                "precision": precision,
                "pooling": embedder.pooling,
                "workflow_version": __version__,
                "checkpoint_sha256": json.dumps(digests, sort_keys=True),
                "device": str(device),
                "attention": varlen.kernel_name(device, PRECISIONS[precision], embedder.alibi),
                "token_budget": settings.token_budget,
                "prefetch_factor": settings.prefetch_factor,
                "versions": json.dumps(  # the software and the device that made the embeddings
                    {
                        "python": platform.python_version(),
                        **{name: importlib.metadata.version(name) for name in PACKAGES},
                        "cuda": torch.version.cuda,
                        "device_name": gpu_name or platform.processor() or "cpu",
                    }
                ),
                "n_tokens": int(rows.tokens.sum()),
                "distinct_frames": int(len(index) - rows.copies.sum()),
                "distinct_tokens": int(rows.tokens[~rows.copies].sum()),
                "load_seconds": round(load_seconds, 3),
                "seconds": round(time.monotonic() - meter.start, 3),
                "startup_s": round((meter.steady_from or time.monotonic()) - meter.start, 3),
                "tokens_per_s": round(meter.rate()),
                "fill": round(meter.tokens / max(meter.slots, 1), 4),
                "batches": meter.batches,
                "oom_splits": feed.splits,
                "loader_wait_s": round(meter.loader_wait, 3),
                "peak_memory_bytes": int(meter.peak_memory()),
                "num_workers": workers,
                "resumed_frames": resumed,
            }
            writer.attrs = stats
        write_json({**stats, "storage": settings.storage, "frames": len(index)}, figures_path)
        rows.remove()
    log.info("wrote %s and %s", output_path, figures_path)
    if rate_key and planned_tokens and meter.steady_from is not None:  # a shard of one batch has no steady rate
        rate = stats["tokens_per_s"] * planned_tokens / stats["n_tokens"]
        rates.record(settings.cache_dir, rate_key, gpu_name or "cpu", rate)
    return {**stats, "storage": settings.storage}


def run_batches(batches: ShardBatches, feed: DeviceFeed, rows: ShardRows, workers: int, settings: EmbedSettings):
    """Embed every batch into `rows` (its copies are left to rows.copy_rows); a SIGTERM or Ctrl-C
    commits what is done and leaves."""
    total = len(rows.written) - int((rows.copies & ~rows.committed).sum())
    progress = Progress(log, "frames", total=total, interval=settings.progress_seconds, done_before=rows.done)
    meter = Meter(feed.device)  # embedding only: loading the model is load_seconds
    with open_loader(batches, workers, settings.prefetch_factor) as loader:
        try:
            for batch in meter.timed(loader):
                feed.submit(batch.tensors(pin=feed.cuda))
                rows.store(feed.ready())
                if progress.due():
                    log.info(progress.line(rows.done, meter.summary()))
            rows.store(feed.drain())
            rows.commit()
        except (SystemExit, KeyboardInterrupt):  # SIGTERM (preemption) or Ctrl-C: keep what is done
            with sigterm_held():  # a second SIGTERM would cut the commit, or the line saying so, short
                rows.store(feed.drain())  # the batches in flight too: on a GPU, a fraction of a second
                rows.commit()
                log.warning(
                    "stopped after %d of %d frames; they are committed: run the job again to resume", rows.done, total
                )
            raise
    log.info(progress.line(rows.done, meter.summary()))
    return meter
