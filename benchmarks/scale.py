"""Peak memory, time and disk of every stage at scale. Prints JSON.

For each read count: 500 bp reads sampled from the bundled genomes go through prepare; each shard
gets synthetic embeddings of the production width (DNABERT-S 768 + ESM-2 3B 2560 floats per frame,
written by the project's own HDF5 writer: what an embed job would leave); then score (each shard),
predict, call, summarize and plot_sample run as the workflow runs them, each as the only child of a fresh
process, so that its peak resident set (ru_maxrss) is its own. Apart from that, the embed job runs
on the first --embed-frames frames of a shard prepared from such reads (made if the workdir has
none large enough), with a tiny random ESM-2 (--embed-model): its memory, not its speed.

    python benchmarks/scale.py --workdir /tmp/scale --reads 1000000 5000000
    python benchmarks/scale.py --workdir /tmp/scale --reads --embed-frames 100000 1000000 --embed-model small
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from workflow_lib import h5store
from workflow_lib.demo_models import ESM_CONFIG, build_esm
from workflow_lib.loader import ShardIndex
from workflow_lib.stages import DEFAULTS, ROOT, embed_command, prepare_command, shard_fastas, write_reads
from workflow_lib.tables import write_json

WIDTH = {"dnabert": 768, "esm": 2560}  # the production models'
SUFFIX = {"dnabert": "fna", "esm": "faa"}
BLOCK = 65_536  # synthetic rows made and written at a time
# ESM-2 shapes for the embed job, in fair-esm's format: the demo model (about 550 frames/s on one
# core), or one layer of 16 features (about 4,000 frames/s: 10^6 frames in minutes)
EMBED_MODELS = {
    "demo": ESM_CONFIG,
    "small": {**ESM_CONFIG, "encoder_layers": 1, "encoder_embed_dim": 16, "encoder_attention_heads": 1},
}
READS_PER_FRAME = 2.6  # 500 bp reads through prepare's defaults gave 0.40 frames a read
MEASURE = (
    "import resource, subprocess, sys, time; start = time.perf_counter(); "
    "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
    "print(time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def measured(command: list) -> dict:
    """Seconds and peak RSS (MB) of `command`, the only child of a fresh process."""
    out = subprocess.run([sys.executable, "-c", MEASURE, *map(str, command)], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{command[1]} failed:\n{out.stderr[-3000:]}")
    seconds, kib = out.stdout.split()
    return {"seconds": round(float(seconds), 1), "peak_rss_mb": round(int(kib) / 1024)}


def size_mb(*paths: Path, digits: int = 1) -> float:
    return round(sum(p.stat().st_size for p in paths) / 1e6, digits)


def synthetic_embeddings(
    shard: Path, output: Path, model: str, storage: str, seed: int, width: int | None = None
) -> None:
    """Embeddings of the production width (or `width`) for every frame of a shard FASTA, written
    block by block through h5store's writer, as an embed job writes them."""
    index = ShardIndex.read(shard)
    rng = np.random.default_rng(seed)
    width = width or WIDTH[model]
    attrs = {
        "model": model,
        "checkpoint": f"synthetic {model}",
        "layer": -1,
        "dim": width,
        "precision": "fp32",
        "pooling": "synthetic",
        "n_tokens": 0,
        "workflow_version": "benchmark",
    }
    with h5store.create(output, index.ids, width, storage) as writer:
        for start in range(0, len(index), BLOCK):
            rows = np.arange(start, min(start + BLOCK, len(index)))
            writer.write(rows, rng.standard_normal((rows.size, width), dtype=np.float32).astype(writer.dtype))
        writer.attrs = attrs
    figures = {
        "frames": len(index),
        "seconds": 1.0,
        "device": "cpu",
        "attention": "synthetic",
        "tokens_per_s": 0,
        "fill": 1.0,
    }
    write_json({**attrs, **figures}, output.with_suffix(".json"))


def run(workdir: Path, reads: int, shard_tokens: int, storage: str) -> dict:
    root = workdir / f"{reads}"
    root.mkdir(parents=True, exist_ok=True)
    fasta = root / "reads.fa"
    if not fasta.exists():
        write_reads(fasta, reads, 500, seed=1)
    prepared, out = root / "prepare", root / "out"
    figures = {"reads": reads, "input_mb": size_mb(fasta)}
    figures["prepare"] = measured(prepare_command(fasta, prepared, "--shard-tokens", shard_tokens))
    shard_files = {model: shard_fastas(prepared, SUFFIX[model]) for model in WIDTH}
    shards = len(shard_files["esm"])
    figures["prepare"]["disk_mb"] = size_mb(*(p for p in prepared.rglob("*") if p.is_file()))
    figures["frames"], figures["shards"] = sum(len(ShardIndex.read(f)) for f in shard_files["esm"]), shards

    embeddings = {model: [root / f"{model}_{i}.h5" for i in range(shards)] for model in WIDTH}
    start = time.perf_counter()
    for seed, model in enumerate(WIDTH):
        for shard, output in zip(shard_files[model], embeddings[model]):
            synthetic_embeddings(shard, output, model, storage, seed)
    disk = size_mb(*(p for files in embeddings.values() for p in files))
    figures["embeddings"] = {"seconds_to_write": round(time.perf_counter() - start, 1), "disk_mb": disk}
    figures["embeddings"]["bytes_per_frame"] = round(disk * 1e6 / figures["frames"])

    import torch

    from workflow_lib.models import classifier

    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(sum(WIDTH.values())), root / "classifier.pt")
    script = ROOT / "scripts"
    out.mkdir(exist_ok=True)
    scores, jobs = [out / f"scores_{i}.npz" for i in range(shards)], []
    for dnabert, esm, path in zip(embeddings["dnabert"], embeddings["esm"], scores):
        score = [sys.executable, script / "score.py", "--dnabert", dnabert, "--esm", esm, "--output", path]
        score += ["--classifier", root / "classifier.pt", "--progress-seconds", DEFAULTS["progress_seconds"]]
        jobs.append(measured(score + ["--threads", 1]))
    figures["score"] = {
        "jobs": shards,
        "seconds": round(sum(j["seconds"] for j in jobs), 1),
        "peak_rss_mb": max(j["peak_rss_mb"] for j in jobs),
        "disk_mb": size_mb(*scores),
    }
    predict = [sys.executable, script / "predict.py", "--prepared-frames", prepared / "frames.tsv.gz"]
    predict += ["--prepared-sequences", prepared / "sequences.tsv.gz", "--scores", *scores]
    predict += ["--frames", out / "frames.tsv", "--chunks", out / "chunks.tsv", "--scoring", out / "scoring.json"]
    predict += ["--progress-seconds", DEFAULTS["progress_seconds"]]
    figures["predict"] = measured(predict) | {"disk_mb": size_mb(out / "frames.tsv", out / "chunks.tsv")}

    call = [sys.executable, script / "call.py", "--prepared-sequences", prepared / "sequences.tsv.gz"]
    call += ["--chunks", out / "chunks.tsv", "--scoring", out / "scoring.json", "--input", fasta]
    call += ["--sequences", out / "sequences.tsv", "--viral", out / "viral.fasta", "--manifest", out / "manifest.json"]
    call += ["--min-viral-fraction", DEFAULTS["predict"]["min_viral_fraction"]]
    figures["call"] = measured(call) | {"disk_mb": size_mb(out / "sequences.tsv", out / "viral.fasta")}

    benchmark = root / "benchmark.tsv"  # a Snakemake benchmark file, for the summary's timings
    benchmark.write_text("s\tmax_rss\n1.0\t100\n")
    summarize = [sys.executable, script / "summarize.py", "--sample", "scale"]
    summarize += ["--prepared-sequences", prepared / "sequences.tsv.gz", "--manifest", out / "manifest.json"]
    for model in WIDTH:
        summarize += [f"--{model}", *(p.with_suffix(".json") for p in embeddings[model])]
        summarize += [f"--benchmark-{model}", *[benchmark] * shards]
    summarize += ["--benchmark-prepare", benchmark, "--benchmark-predict", benchmark]
    summarize += ["--benchmark-score", *[benchmark] * shards]
    summarize += [
        "--config",
        json.dumps(DEFAULTS),
        "--snakemake-version",
        "benchmark",
        "--output",
        out / "summary.json",
    ]
    figures["summarize"] = measured(summarize)

    plot = [sys.executable, script / "plot_sample.py", "--sample", "scale", "--frames", out / "frames.tsv"]
    plot += ["--chunks", out / "chunks.tsv", "--sequences", out / "sequences.tsv", "--summary", out / "summary.json"]
    plot += ["--prepared-frames", prepared / "frames.tsv.gz", "--prepared-sequences", prepared / "sequences.tsv.gz"]
    for name in ("scores", "calls", "top_sequences", "input", "throughput"):
        plot += [f"--{name.replace('_', '-')}-out", out / f"{name}.png"]
    plot += ["--table-out", out / "table.html", "--top-sequences", DEFAULTS["report"]["top_sequences"]]
    plot += ["--table-rows", DEFAULTS["report"]["table_rows"]]
    figures["plot_sample"] = measured(plot)
    return figures


def frames_shard(workdir: Path, frames: int) -> Path:
    """A protein shard in `workdir` of at least `frames` frames: one that run() prepared, or one
    prepared here from 500 bp reads as run() prepares them."""
    for shard in sorted(workdir.glob("*/prepare/shards/shard_0.faa")):
        if len(ShardIndex.read(shard)) >= frames:
            return shard
    reads = round(frames * READS_PER_FRAME)
    root = workdir / f"{reads}"
    root.mkdir(parents=True, exist_ok=True)
    write_reads(root / "reads.fa", reads, 500, seed=1)
    prepare = prepare_command(root / "reads.fa", root / "prepare", "--shard-tokens", 10**12)  # one shard
    subprocess.run(prepare, check=True, stdout=subprocess.DEVNULL)
    shard = shard_fastas(root / "prepare", "faa")[0]
    if len(ShardIndex.read(shard)) < frames:
        raise SystemExit(f"{reads} reads gave fewer than {frames} frames: raise READS_PER_FRAME")
    return shard


def embed_job(workdir: Path, source: Path, frames: int, model: str) -> dict:
    """The embed job on the first `frames` frames of `source` with a tiny ESM-2: its peak memory."""
    checkpoint = build_esm(workdir / "models" / f"esm2_{model}.pt", 0, EMBED_MODELS[model])
    shard = workdir / f"embed_{frames}.faa"
    with open(source, "rb") as handle, open(shard, "wb") as out:
        for _ in range(frames):
            out.write(handle.readline() + handle.readline())
    output = workdir / f"embed_{frames}.h5"
    command = embed_command("esm", checkpoint, shard, output, num_workers=0, threads=1)
    return {"frames": frames, "model": model, **measured(command), "disk_mb": size_mb(output)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, help="where the inputs and outputs are kept")
    parser.add_argument("--reads", type=int, nargs="*", default=[1_000_000, 5_000_000])
    parser.add_argument(
        "--shard-tokens",
        type=int,
        default=10**12,
        help="per shard: the default, one shard, is the hardest case for memory",
    )
    parser.add_argument("--storage", choices=("float32", "float16"), default=DEFAULTS["embedding"]["storage"])
    parser.add_argument("--embed-frames", type=int, nargs="*", default=[100_000, 250_000])
    parser.add_argument("--embed-model", choices=tuple(EMBED_MODELS), default="demo", help="the embed job's ESM-2")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    result = {"benchmark": "scale", "machine": f"{platform.machine()}, {os.cpu_count()} cpus", "storage": args.storage}
    result["runs"] = []
    for n in args.reads:
        result["runs"].append(run(workdir, n, args.shard_tokens, args.storage))
        print(json.dumps(result["runs"][-1]), file=sys.stderr, flush=True)  # as each finishes
    if args.embed_frames:
        source = frames_shard(workdir, max(args.embed_frames))
        result["embed"] = []
        for n in args.embed_frames:
            result["embed"].append(embed_job(workdir, source, n, args.embed_model))
            print(json.dumps(result["embed"][-1]), file=sys.stderr, flush=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
