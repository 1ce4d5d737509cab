"""What weighing the calls costs: predict and call with and without a calibration, and the
calibrate fit on many chunks. Prints JSON.

Reads (500 bp, or --length) sampled from the bundled genomes go through prepare; each shard gets a scores file
with synthetic scores and atypicality (what a score job writes); then predict and call run as the
workflow runs them, each as the only child of a fresh process, `--repeats` times alternately
without and with a calibration (medians of wall and of CPU seconds reported, and the load average at
the end: CPU seconds move less where other jobs share the machine). The fit runs on --fit-chunks synthetic labelled
chunks in records of 1 to 20 chunks, timed as CPU time of this process.

    python benchmarks/weighing.py --workdir /tmp/weighing --reads 1000000 --fit-chunks 1000000
    python benchmarks/weighing.py --workdir /tmp/weighing --reads 150000 --length 3000
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from harness.measure import header, measured, print_figures
from harness.stages import prepare_command, script_command, shard_fastas, write_reads
from workflow_lib.classify import calibration
from workflow_lib.cli.settings import CallSettings, PredictSettings
from workflow_lib.io.checksums import sha256
from workflow_lib.io.sharding import ShardIndex
from workflow_lib.prepare.reconcile import IDDigest


def synthetic_scores(shard: Path, output: Path, rng: np.random.Generator) -> None:
    """A score job's file for a shard FASTA: random softmax pairs and atypicality, its IDs' digest."""
    ids = ShardIndex.read(shard)
    virus = rng.beta(0.5, 0.5, len(ids)).astype(np.float32)
    digest = IDDigest()
    digest.update([i.encode() for i in ids])
    checkpoints = {"classifier": {"path": "synthetic", "sha256": "0" * 64}}
    np.savez(
        output,
        scores=np.column_stack([1 - virus, virus]),
        atypicality=rng.gamma(4, 0.25, len(ids)).astype(np.float32),
        pieces=np.array([len(ids)], dtype=np.int64),  # one sample's shard, as a score job writes it
        ids_blake2b=np.array([digest.hash.hexdigest()]),
        checkpoints=json.dumps(checkpoints),
    )


def synthetic_calibration(path: Path, chunks: int, seed: int) -> float:
    """Fit a calibration on `chunks` synthetic labelled chunks and write it; its CPU seconds."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 21, chunks // 10)
    record = np.repeat(np.arange(sizes.size), sizes)[:chunks]
    label = (rng.random(sizes.size) < 0.3).astype(int)[record]
    evidence = rng.normal(np.where(label == 1, 1.0, -1.0), 0.8)[record] + rng.normal(0, 1, record.size)
    score = calibration.expit(3 * evidence)
    start = time.process_time()
    fitted = calibration.fit(score, label, record, "0" * 64, 500, atypicality=rng.gamma(4, 0.25, record.size))
    seconds = time.process_time() - start
    fitted.save(path)
    return seconds


def tables(root: Path, fasta: Path, scores: list[Path], calibration_path: Path | None) -> dict:
    """predict then call, as the rules run them, into root/with or root/without."""
    out = root / ("with" if calibration_path else "without")
    out.mkdir(exist_ok=True)
    prepared = {"prepared_frames": root / "prepare" / "frames.tsv.gz"}
    prepared["prepared_sequences"] = root / "prepare" / "sequences.tsv.gz"
    weighed = {"calibration": calibration_path}
    predict = script_command(
        "predict",
        PredictSettings,
        **prepared,
        bins=root / "prepare" / "bins.npz",
        scores=tuple(scores),
        frames=out / "frames.tsv",
        chunks=out / "chunks.tsv",
        scoring=out / "scoring.json",
        **weighed,
    )
    call = script_command(
        "call",
        CallSettings,
        prepared_sequences=prepared["prepared_sequences"],
        chunks=out / "chunks.tsv",
        scoring=out / "scoring.json",
        input=fasta,
        sequences=out / "sequences.tsv",
        viral=out / "viral.fasta",
        regions=out / "regions.tsv",
        regions_fasta=out / "regions.fasta",
        manifest=out / "manifest.json",
        **weighed,
    )
    return {"predict": measured(predict), "call": measured(call)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--reads", type=int, default=1_000_000)
    parser.add_argument("--length", type=int, default=500, help="bp a read (3000: contig pieces of 6 chunks)")
    parser.add_argument("--fit-chunks", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = args.workdir / (str(args.reads) + ("" if args.length == 500 else f"x{args.length}"))
    root.mkdir(parents=True, exist_ok=True)
    fasta = root / "reads.fa"
    if not fasta.exists():
        write_reads(fasta, args.reads, args.length, seed=1)
        measured(prepare_command(fasta, root / "prepare"))
    rng = np.random.default_rng(0)
    shards = shard_fastas(root / "prepare", "faa")
    scores = [root / f"scores_{i}.npz" for i in range(len(shards))]
    for shard, path in zip(shards, scores):
        synthetic_scores(shard, path, rng)
    calibration_path = root / "calibration.json"
    fit_seconds = synthetic_calibration(calibration_path, args.fit_chunks, seed=1)
    runs = {"without": [], "with": []}
    for _ in range(args.repeats):
        runs["without"].append(tables(root, fasta, scores, None))
        runs["with"].append(tables(root, fasta, scores, calibration_path))
    median = {
        kind: {stage: statistics.median(r[stage]["seconds"] for r in runs[kind]) for stage in ("predict", "call")}
        for kind in runs
    }
    # CPU seconds move less than wall seconds where other jobs share the machine
    cpu = {
        kind: {stage: statistics.median(r[stage]["cpu_seconds"] for r in runs[kind]) for stage in ("predict", "call")}
        for kind in runs
    }
    peak = {
        kind: {stage: max(r[stage]["peak_rss_mb"] for r in runs[kind]) for stage in ("predict", "call")}
        for kind in runs
    }
    result = header("weighing") | {"reads": args.reads, "read_length": args.length}
    result |= {"frames": sum(len(ShardIndex.read(s)) for s in shards), "median_seconds": median, "peak_rss_mb": peak}
    result["with_over_without"] = {s: round(median["with"][s] / median["without"][s], 3) for s in ("predict", "call")}
    result["median_cpu_seconds"] = cpu
    result["cpu_with_over_without"] = {s: round(cpu["with"][s] / cpu["without"][s], 3) for s in ("predict", "call")}
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    result["calibrate_fit"] = {"chunks": args.fit_chunks, "cpu_seconds": round(fit_seconds, 1)}
    print_figures(result | {"calibration_sha256": sha256(calibration_path)})


if __name__ == "__main__":
    main()
