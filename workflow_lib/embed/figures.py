"""An embed job's figures, read back from its figures file (JSON, workflow_lib/embed/job.py), and
over a sample's pooled shards the copies they did not embed: for its run summary and manifest."""

import json
from pathlib import Path

from workflow_lib.io.tables import read_json

# Figures of an embed job that the run summary reports
SHARD_FIGURES = (
    "seconds",
    "tokens_per_s",
    "startup_s",
    "fill",
    "precision",
    "device",
    "attention",
    "batches",
    "loader_wait_s",
    "peak_memory_bytes",
    "resumed_frames",
    "distinct_frames",
    "distinct_tokens",
)


def shard_figures(path: str | Path, shard: int) -> dict:
    """An embed job's throughput figures and package versions, from its figures file (JSON)."""
    job = read_json(path)
    figures = {"model": job["model"], "shard": shard, "frames": job["frames"], "tokens": job["n_tokens"]}
    figures |= {key: job[key] for key in SHARD_FIGURES if key in job}
    figures["versions"] = json.loads(job["versions"]) if "versions" in job else None
    return figures


def copies_not_embedded(shards: list[dict]) -> dict[str, dict]:
    """Per model, over the pooled shards: their frames and tokens, those embedded (each distinct
    sequence of a shard once: embedding.embed_copies), the shares, and the seconds the copies would
    have taken at each job's rate. A figures file without these counts, written before them, had
    every frame embedded."""
    found: dict[str, dict] = {}
    for shard in shards:
        counts = {"frames": shard["frames"], "tokens": shard["tokens"]}
        counts |= {f"distinct_{key}": shard.get(f"distinct_{key}", value) for key, value in counts.items()}
        rate = shard.get("tokens_per_s") or 0
        counts["seconds_saved"] = (counts["tokens"] - counts["distinct_tokens"]) / rate if rate else 0.0
        model = found.setdefault(shard["model"], dict.fromkeys(counts, 0))
        for key, value in counts.items():
            model[key] += value
    for model in found.values():
        model["seconds_saved"] = round(model["seconds_saved"], 1)
        for key in ("frames", "tokens"):
            model[f"{key}_embedded_share"] = round(model[f"distinct_{key}"] / max(model[key], 1), 4)
    return found
