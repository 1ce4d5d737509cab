"""The embed job: one shard FASTA through one model (ESM-2 or DNABERT-S) into the HDF5 contract.

Rows come out in the shard's order, every frame exactly once (checked before anything is written).
"""

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from . import __version__, h5store
from .errors import InputError
from .packing import padded_batches
from .progress import Progress

log = logging.getLogger("workflow")
PRECISIONS = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Sequences are tokenized and sorted a block at a time: memory stays bounded on any shard size.
BLOCK = 16384


@dataclass(frozen=True)
class EmbedSettings:
    model: str  # "esm" or "dnabert"
    checkpoint: str
    layer: int | None = None  # ESM-2 only
    device: str = "auto"
    precision: str = "fp16"
    token_budget: int = 16384
    cache_dir: str | None = None


def select_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError(
            "embedding.device is 'cuda' but no CUDA device is visible to this job; "
            "request a GPU or set embedding.device to 'auto' or 'cpu'"
        )
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def select_precision(precision: str, device: torch.device) -> str:
    """Half precision is for GPUs; on the CPU embeddings are always computed in float32."""
    return precision if device.type == "cuda" else "fp32"


def read_shard(path: str | Path) -> tuple[list[str], list[str]]:
    """IDs and sequences of a shard FASTA written by prepare (one header line, one sequence line)."""
    lines = Path(path).read_bytes().decode("utf-8").split("\n")[:-1]  # IDs may hold any other character
    if len(lines) % 2 or any(not h.startswith(">") for h in lines[0::2]):
        raise InputError(f"{path}: not a shard written by prepare; delete the sample's prepare directory and run again")
    return [h[1:] for h in lines[0::2]], lines[1::2]


def build_embedder(settings: EmbedSettings, device: torch.device, dtype: torch.dtype):
    if settings.model == "esm":
        from .models import esm

        model, alphabet = esm.load(settings.checkpoint, settings.cache_dir)
        layer = model.num_layers if settings.layer is None else settings.layer
        return esm.ESMEmbedder(model, alphabet, layer, device, dtype)
    from .models import dnabert

    model, tokenizer = dnabert.load(settings.checkpoint, settings.cache_dir)
    return dnabert.DNABERTEmbedder(model, tokenizer, device, dtype)


def embed_shard(input_path: str | Path, output_path: str | Path, settings: EmbedSettings) -> dict:
    device = select_device(settings.device)
    precision = select_precision(settings.precision, device)
    ids, sequences = read_shard(input_path)
    started = time.monotonic()
    embedder = build_embedder(settings, device, PRECISIONS[precision])
    log.info(
        "%s on %s (%s): %d frames from %s, token budget %d",
        settings.model,
        device,
        precision,
        len(ids),
        input_path,
        settings.token_budget,
    )

    out = np.zeros((len(ids), embedder.dim), dtype=np.float32)
    written = np.zeros(len(ids), dtype=np.int64)
    real_tokens = padded_slots = done = 0
    progress = Progress(log, "frames", total=len(ids))
    for block_start in range(0, len(sequences), BLOCK):
        items = embedder.encode(sequences[block_start : block_start + BLOCK])
        lengths = np.array([embedder.n_tokens(item) for item in items])
        for batch in padded_batches(lengths, settings.token_budget):
            rows = block_start + batch
            out[rows] = embedder([items[i] for i in batch.tolist()]).cpu().numpy()
            written[rows] += 1
            real_tokens += int(lengths[batch].sum())
            padded_slots += int(lengths[batch].max()) * len(batch)
            done += len(batch)  # a running count: a scan of `written` per batch would be quadratic
            elapsed = max(time.monotonic() - started, 1e-9)
            progress.update(done, f"{real_tokens / elapsed:,.0f} tokens/s, fill {real_tokens / padded_slots:.1%}")

    if not (written == 1).all():
        lost, repeated = np.flatnonzero(written == 0), np.flatnonzero(written > 1)
        raise RuntimeError(
            f"{input_path}: {lost.size} frames not embedded (e.g. {[ids[i] for i in lost[:3]]}), "
            f"{repeated.size} embedded twice (e.g. {[ids[i] for i in repeated[:3]]})"
        )
    if not np.isfinite(out).all():
        bad = np.flatnonzero(~np.isfinite(out).all(axis=1))
        raise RuntimeError(f"{input_path}: non-finite embeddings for {[ids[i] for i in bad[:3]]}; try --precision fp32")
    seconds = time.monotonic() - started
    stats = {
        "model": settings.model,
        "checkpoint": settings.checkpoint,
        "layer": int(embedder.layer),
        "dim": int(embedder.dim),
        "precision": precision,
        "pooling": embedder.pooling,
        "n_tokens": real_tokens,
        "workflow_version": __version__,
        "device": str(device),
        "seconds": round(seconds, 3),
        "tokens_per_s": round(real_tokens / max(seconds, 1e-9)),
        "fill": round(real_tokens / max(padded_slots, 1), 4),
        "token_budget": settings.token_budget,
    }
    h5store.write(output_path, ids, out, stats)
    log.info(
        progress.line(len(ids), f"{stats['tokens_per_s']:,} tokens/s, fill {stats['fill']:.1%}, wrote {output_path}")
    )
    return stats
