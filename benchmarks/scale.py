"""Peak memory, time and disk of every stage at scale. Prints JSON.

For each read count: 500 bp reads sampled from the bundled genomes go through prepare; each shard
gets synthetic embeddings of the production width (DNABERT-S 768 + ESM-2 3B 2560 floats per frame,
written by the project's own HDF5 writer: what an embed job would leave); then score (each shard),
predict, call, summarize and plot_sample run as the workflow runs them, each as the only child of a fresh
process, so that its peak resident set (ru_maxrss) is its own.

    python benchmarks/scale.py --workdir /tmp/scale --reads 1000000 5000000

With --copies, that share of the reads are exact copies of the others: the figures add the plan's pooled
shards (by bin, at --shard-tokens), and over them the frames and tokens (ESM-2's; DNABERT-S's bases) of the
distinct sequences, which their embed jobs embed, and the seconds of finding them (packing.first_copies).
"""

import argparse
import json
import random
import time
from pathlib import Path

import numpy as np

from harness.measure import header, measured, print_figures, print_progress
from harness.stages import (
    DEFAULTS,
    prepare_command,
    prepared_files,
    script_command,
    shard_fastas,
    write_reads,
)
from workflow_lib.cli.settings import CallSettings, PlotSampleSettings, PredictSettings, ScoreSettings
from workflow_lib.embed.packing import first_copies
from workflow_lib.io import h5store
from workflow_lib.io.sharding import ShardIndex, pool_shards, read_bins
from workflow_lib.io.tables import write_json
from workflow_lib.prepare.plan import cut, distinct_tokens, pack
from workflow_lib.report.figures import SampleFigures

WIDTH = {"dnabert": 768, "esm": 2560}  # the production models'
SUFFIX = {"dnabert": "fna", "esm": "faa"}
BLOCK = 65_536  # synthetic rows made and written at a time
ERRORS = 10  # changed bases a read with --copies: enough for each of its frames to differ from other reads'


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
    with h5store.create(output, index, width, storage) as writer:
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


def with_copies(path: Path, share: float) -> None:
    """The reads of `path` with the last `share` of them replaced by copies of the others, each under
    an ID of its own, the records shuffled. The others are made distinct first: a million reads of
    the bundled genomes overlap a lot, so each gets ERRORS bases changed at random (read errors)."""
    sequences = path.read_text().splitlines()[1::2]
    rng = random.Random(0)
    kept = []
    for read in sequences[: round(len(sequences) * (1 - share))]:
        bases = list(read)
        for at in rng.sample(range(len(bases)), ERRORS):
            bases[at] = rng.choice("ACGT".replace(bases[at], ""))
        kept.append("".join(bases))
    drawn = kept + [rng.choice(kept) for _ in range(len(sequences) - len(kept))]
    rng.shuffle(drawn)
    path.write_text("".join(f">read_{i}\n{sequence}\n" for i, sequence in enumerate(drawn)))


def distinct_stage(prepared: Path, shard_tokens: int) -> dict:
    """The plan's pooled shards of the prepared shards; per model their frames, tokens (ESM-2's: residues
    + 2; DNABERT-S's: bases) and seconds of finding the copies, with those of the distinct sequences."""
    files = prepared_files(prepared)
    rows = pack([("scale", read_bins(files.bins))], cut(distinct_tokens([files.bins]), shard_tokens))
    pools: dict[str, list] = {}
    for row in rows:
        piece = (files.shards, files.bins, row["shard"], row["first_bin"], row["end_bin"])
        pools.setdefault(row["pool"], []).append(piece)
    counted = ("frames", "distinct_frames", "tokens", "distinct_tokens", "seconds")
    found = {model: dict.fromkeys(counted, 0) for model in SUFFIX}
    for pieces in pools.values():
        pooled = {s: prepared / f"pooled.{s}" for s in ("fna", "faa")}
        pool_shards(pieces, pooled["fna"], pooled["faa"])
        for model, suffix in SUFFIX.items():
            start = time.perf_counter()
            first = first_copies(index := ShardIndex.read(pooled[suffix]))
            found[model]["seconds"] += time.perf_counter() - start
            ends = 2 if model == "esm" else 0  # ESM-2's BOS and EOS
            tokens = np.array([len(s) for b in range(index.n_blocks) for s in index.read_block(b)]) + ends
            distinct = first == np.arange(len(index))
            for key, values in (("frames", np.ones(len(index), np.int64)), ("tokens", tokens)):
                found[model][key] += int(values.sum())
                found[model][f"distinct_{key}"] += int(values[distinct].sum())
    figures = {"pools": len(pools)}
    for model, counted in found.items():
        share = round(counted["distinct_tokens"] / max(counted["tokens"], 1), 4)
        figures[model] = counted | {"seconds": round(counted["seconds"], 2), "distinct_token_share": share}
    return figures


def run(workdir: Path, reads: int, shard_tokens: int, storage: str, copies: float | None) -> dict:
    """Every stage but embed on `reads` reads, the embeddings synthetic: each stage's figures."""
    root = workdir / (f"{reads}" if copies is None else f"{reads}_copies_{copies}")
    root.mkdir(parents=True, exist_ok=True)
    fasta = root / "reads.fa"
    if not fasta.exists():
        write_reads(fasta, reads, 500, seed=1)
        if copies is not None:
            with_copies(fasta, copies)
    prepared, out = root / "prepare", root / "out"
    out.mkdir(exist_ok=True)
    figures = {"reads": reads, "input_mb": size_mb(fasta)} | prepare_stage(fasta, prepared, shard_tokens)
    if copies is not None:
        figures |= {"copies_share": copies, "distinct": distinct_stage(prepared, shard_tokens)}
    embeddings = {model: [root / f"{model}_{i}.h5" for i in range(figures["shards"])] for model in WIDTH}
    figures["embeddings"] = synthetic_stage(prepared, embeddings, storage, figures["frames"])
    scores = [out / f"scores_{i}.npz" for i in range(figures["shards"])]
    figures["score"] = score_stage(root / "classifier.pt", embeddings, scores)
    return figures | table_stages(fasta, prepared, out, scores, embeddings)


def prepare_stage(fasta: Path, prepared: Path, shard_tokens: int) -> dict:
    figures = {"prepare": measured(prepare_command(fasta, prepared, "--shard-tokens", shard_tokens))}
    figures["prepare"]["disk_mb"] = size_mb(*(p for p in prepared.rglob("*") if p.is_file()))
    shards = shard_fastas(prepared, SUFFIX["esm"])
    return figures | {"frames": sum(len(ShardIndex.read(f)) for f in shards), "shards": len(shards)}


def synthetic_stage(prepared: Path, embeddings: dict, storage: str, frames: int) -> dict:
    """What the embed jobs would leave, written by the project's HDF5 writer."""
    start = time.perf_counter()
    for seed, model in enumerate(WIDTH):
        for shard, output in zip(shard_fastas(prepared, SUFFIX[model]), embeddings[model]):
            synthetic_embeddings(shard, output, model, storage, seed)
    disk = size_mb(*(p for files in embeddings.values() for p in files))
    seconds = round(time.perf_counter() - start, 1)
    return {"seconds_to_write": seconds, "disk_mb": disk, "bytes_per_frame": round(disk * 1e6 / frames)}


def score_stage(classifier_path: Path, embeddings: dict, scores: list[Path]) -> dict:
    import torch

    from workflow_lib.models import classifier

    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(sum(WIDTH.values())), classifier_path)
    jobs = [
        measured(
            script_command(
                "score", ScoreSettings, embeddings=(dna, esm), classifier=classifier_path, scores=path, threads=1
            )
        )
        for dna, esm, path in zip(embeddings["dnabert"], embeddings["esm"], scores)
    ]
    return {
        "jobs": len(jobs),
        "seconds": round(sum(j["seconds"] for j in jobs), 1),
        "peak_rss_mb": max(j["peak_rss_mb"] for j in jobs),
        "disk_mb": size_mb(*scores),
    }


def table_stages(fasta: Path, prepared: Path, out: Path, scores: list[Path], embeddings: dict) -> dict:
    """predict, call, summarize and plot_sample, each as the rules run it."""
    tables = {name: out / name for name in ("frames.tsv", "chunks.tsv", "sequences.tsv", "regions.tsv")}
    made = {"prepared_frames": prepared / "frames.tsv.gz", "prepared_sequences": prepared / "sequences.tsv.gz"}
    predict = script_command(
        "predict",
        PredictSettings,
        **made,
        bins=prepared / "bins.npz",
        scores=tuple(scores),
        frames=tables["frames.tsv"],
        chunks=tables["chunks.tsv"],
        scoring=out / "scoring.json",
    )
    figures = {"predict": measured(predict) | {"disk_mb": size_mb(tables["frames.tsv"], tables["chunks.tsv"])}}
    call = script_command(
        "call",
        CallSettings,
        prepared_sequences=made["prepared_sequences"],
        chunks=tables["chunks.tsv"],
        scoring=out / "scoring.json",
        input=fasta,
        sequences=tables["sequences.tsv"],
        viral=out / "viral.fasta",
        regions=tables["regions.tsv"],
        regions_fasta=out / "regions.fasta",
        manifest=out / "manifest.json",
    )
    figures["call"] = measured(call) | {"disk_mb": size_mb(tables["sequences.tsv"], out / "viral.fasta")}
    benchmark = out / "benchmark.tsv"  # a Snakemake benchmark file, for the summary's timings
    benchmark.write_text("s\tmax_rss\n1.0\t100\n")
    shards = [benchmark] * len(scores)
    summarize = script_command(
        "summarize",
        sample="scale",
        prepared_sequences=made["prepared_sequences"],
        manifest=out / "manifest.json",
        embed_figures=[(model, *(p.with_suffix(".json") for p in embeddings[model])) for model in WIDTH],
        embed_benchmarks=[(model, *shards) for model in WIDTH],
        benchmark_prepare=benchmark,
        benchmark_score=tuple(shards),
        benchmark_predict=benchmark,
        config=json.dumps(DEFAULTS),
        snakemake_version="benchmark",
        summary=out / "summary.json",
    )
    figures["summarize"] = measured(summarize)
    drawn = {f"{name}_page": out / f"{name}.{'html' if name == 'table' else 'png'}" for name in SampleFigures._fields}
    plot = script_command(
        "plot_sample",
        PlotSampleSettings,
        sample="scale",
        prepared_sequences=made["prepared_sequences"],
        **drawn,
        summary=out / "summary.json",
        **{name.removesuffix(".tsv"): path for name, path in tables.items()},
    )
    figures["plot_sample"] = measured(plot)
    return figures


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
    parser.add_argument("--copies", type=float, help="the share of the reads that are copies (0: none, counted)")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    result = header("scale") | {"storage": args.storage, "runs": []}
    for n in args.reads:
        result["runs"].append(run(workdir, n, args.shard_tokens, args.storage, args.copies))
        print_progress(result["runs"][-1])
    print_figures(result)


if __name__ == "__main__":
    main()
