"""A sample's run summary, results/{sample}/run_summary.json: what ran (package versions, checkpoints
with their SHA-256, the config), how long each stage took, how many records, bases, chunks and
frames went through, and the figures of every embedding shard."""

import platform
from collections import Counter
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import pandas as pd

from workflow_lib import __version__
from workflow_lib.embed.figures import copies_not_embedded, shard_figures
from workflow_lib.io.tables import read_chunks, read_json

PACKAGES = ("snakemake", "torch", "fair-esm", "numpy", "pandas", "h5py", "huggingface-hub", "tokenizers", "matplotlib")


def package_versions() -> dict[str, str | None]:
    """Python and the packages of this environment; None for one that is not installed."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def benchmark(path: str | Path) -> dict:
    """Wall-clock seconds and peak resident memory (MB) from a Snakemake benchmark file."""
    row = pd.read_csv(path, sep="\t").iloc[-1]  # a repeated benchmark has one row per run: the last
    rss = pd.to_numeric(row["max_rss"], errors="coerce")  # "-" where it was not measured
    return {"seconds": float(row["s"]), "max_rss_mb": None if pd.isna(rss) else float(rss)}


def shard_jobs(files: list[str | Path]) -> dict:
    """The benchmark files of one job per shard, in shard order: their seconds summed, the peak
    memory, and each shard's."""
    per_shard = [{"shard": i} | benchmark(path) for i, path in enumerate(files)]
    rss = [s["max_rss_mb"] for s in per_shard if s["max_rss_mb"] is not None]
    return {
        "seconds": round(sum(s["seconds"] for s in per_shard), 4),
        "max_rss_mb": max(rss, default=None),
        "shards": per_shard,
    }


def embed_versions(shards: list[dict]) -> dict[str, dict]:
    """Per model, the versions its jobs reported; a package whose version differed between shards
    lists every version."""
    found: dict[str, dict[str, set]] = {}
    for shard in shards:
        for package, version in (shard["versions"] or {}).items():
            found.setdefault(shard["model"], {}).setdefault(package, set()).add(version)
    return {
        model: {p: v.pop() if len(v) == 1 else sorted(v) for p, v in packages.items()}
        for model, packages in found.items()
    }


PREPARED_COLUMNS = ["length", "ambiguous_fraction", "status"]
CALL_COUNTS = ("chunks", "chunks_scored", "viral_chunks", "viral_bases", "regions", "region_bases")  # the manifest's


def counts(prepared: Iterable[pd.DataFrame], manifest: dict) -> dict:
    """Totals of prepare's sequences table, given block by block (tables.read_chunks, PREPARED_COLUMNS),
    and of the calls."""
    records = bases = ambiguous = 0
    status: Counter = Counter()
    for block in prepared:
        records += len(block)
        bases += int(block["length"].sum())
        # the fraction is written with 6 significant digits: exact for fewer than 10^6 ambiguous bases a record
        ambiguous += int((block["ambiguous_fraction"] * block["length"]).round().sum())
        status.update(block["status"].value_counts().to_dict())
    frames = manifest["counts"]["frames"]
    return {
        "records": records,
        "bases": bases,
        **{key: manifest["counts"][key] for key in CALL_COUNTS},
        "frames": frames,
        "frames_per_record": round(frames / records, 4) if records else 0.0,
        "ambiguous_bases": ambiguous,
        "ambiguous_fraction": round(ambiguous / bases, 6) if bases else 0.0,
        "status": {s: int(n) for s, n in sorted(status.items())},
        "calls": manifest["counts"]["calls"],
    }


def summarize(
    sample: str,
    prepared: str | Path,
    manifest: str | Path,
    embeddings: dict[str, list[str]],
    benchmarks: dict[str, str | list[str]],
    config: dict,
    snakemake_version: str,
) -> dict:
    """The summary of one sample from prepare's sequences table, the manifest.json of its calls,
    the embed jobs' figures files and the Snakemake benchmark files of its jobs. `embeddings` (the
    figures files) and benchmarks["embed"] are per model, in shard order, benchmarks["score"] in
    shard order; benchmarks["prepare"|"predict"] one file each."""
    manifest = read_json(manifest)
    shards = [shard_figures(path, i) for model in embeddings for i, path in enumerate(embeddings[model])]
    versions = package_versions() | {"snakemake": snakemake_version}  # of the Snakemake running the workflow
    return {
        "sample": sample,
        "workflow_version": __version__,
        "versions": {"summarize": versions, "embed": embed_versions(shards)},
        "input": manifest["input"],
        "config": config,
        "checkpoints": manifest["checkpoints"],
        "counts": counts(read_chunks(prepared, PREPARED_COLUMNS), manifest),
        "timings": {
            "prepare": benchmark(benchmarks["prepare"]),
            "embed": {model: shard_jobs(files) for model, files in benchmarks["embed"].items()},
            "score": shard_jobs(benchmarks["score"]),
            "predict": benchmark(benchmarks["predict"]),
        },
        "embedding_shards": [{k: v for k, v in s.items() if k != "versions"} for s in shards],
        "embedded": copies_not_embedded(shards),
        **({"weighing": manifest["weighing"]} if "weighing" in manifest else {}),
    }
