"""Peak memory and time of the plot_sample and summarize jobs on a large synthetic sample: the
tables that prepare, predict and call write for --records reads of 150-2,000 bp (random scores,
two kept frames a chunk), made once under --workdir and reused by later runs. Each job runs as
its CLI, the only child of a fresh process; the peak is its resident set (ru_maxrss). Prints JSON.

    python benchmarks/report_memory.py --workdir /tmp/report_memory --records 1000000
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from workflow_lib.classify.regions import REGIONS
from workflow_lib.harness.measure import header, measured, print_figures
from workflow_lib.harness.stages import ROOT
from workflow_lib.io.tables import write_json, write_tsv

CHUNK = 300


def write_sample(folder: Path, records: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    ids = np.char.add("read", np.arange(records).astype(str))
    length = rng.integers(150, 2000, records)
    status = np.where(rng.random(records) < 0.02, "too_short", "ok")
    chunks, frames = write_scored(folder, ids, length, status, rng)
    write_calls(folder, chunks, ids, length, status, rng)
    write_summaries(folder, records, int(length.sum()), len(chunks), len(frames))


def write_scored(folder: Path, ids, length, status, rng):
    """prepare's tables, and predict's chunks and frames tables, of records of these lengths."""
    n_chunks = -(-length // CHUNK)
    prepared = pd.DataFrame({"sequence_id": ids, "length": length, "n_chunks": n_chunks})
    prepared["n_frames"] = rng.integers(0, 7, len(ids)) * n_chunks
    prepared["ambiguous_fraction"] = np.round(rng.random(len(ids)) * 0.01, 6)
    prepared["status"] = status
    prepared.to_csv(folder / "prepared_sequences.tsv.gz", sep="\t", index=False)
    owner = np.repeat(np.arange(len(ids)), n_chunks)
    chunk = np.arange(len(owner)) - np.repeat(np.cumsum(n_chunks) - n_chunks, n_chunks) + 1
    score = rng.random(len(owner)).round(6)
    chunks = pd.DataFrame({"sequence_id": ids[owner], "chunk": chunk, "n_frames": 2})
    chunks = chunks.assign(max_score_other=(1 - score).round(6), max_score_virus=score, is_virus=score > 0.5)
    write_tsv(chunks, folder / "chunks.tsv")
    start = (chunk - 1) * CHUNK + 1
    frames = pd.DataFrame(
        {
            "frame_id": np.char.add("f", np.arange(2 * len(owner)).astype(str)),
            "sequence_id": np.repeat(ids[owner], 2),
            "chunk": np.repeat(chunk, 2),
            "chunk_start": np.repeat(start, 2),
            "chunk_end": np.repeat(np.minimum(start + CHUNK - 1, length[owner]), 2),
            "frame": np.tile([1, 2], len(owner)),
            "protein_length": 100,
            "shard": 0,
        }
    )
    frames.to_csv(folder / "prepared_frames.tsv.gz", sep="\t", index=False)
    scored = frames[["frame_id", "sequence_id", "chunk", "frame"]].assign(score_other=0.5)
    write_tsv(scored.assign(score_virus=rng.random(len(frames)).round(6), prediction="virus"), folder / "frames.tsv")
    return chunks, frames


def write_calls(folder: Path, chunks, ids, length, status, rng) -> None:
    """call's sequences table, and a regions table of one region in 1% of the records."""
    n_chunks = -(-length // CHUNK)
    best = chunks.groupby("sequence_id", sort=False)["max_score_virus"].max().reindex(ids).to_numpy().copy()
    best[rng.random(len(ids)) < 0.05] = np.nan
    call = np.where(np.isnan(best), "no_coding_frame", np.where(best > 0.7, "virus", "other"))
    sequences = pd.DataFrame({"sequence_id": ids, "length": length, "n_chunks": n_chunks})
    sequences["n_chunks_scored"] = np.where(np.isnan(best), 0, n_chunks)
    sequences = sequences.assign(n_viral_chunks=1, viral_fraction=np.where(np.isnan(best), np.nan, 0.5))
    sequences = sequences.assign(max_score_virus=best, mean_score_virus=best / 2, call=call, status=status)
    holding = np.flatnonzero(rng.random(len(ids)) < 0.01)
    n_regions = np.isin(np.arange(len(ids)), holding).astype(int)
    extent = np.select([call == "virus", n_regions > 0], ["whole", "regions"], "none")
    write_tsv(sequences.assign(n_regions=n_regions, viral_extent=extent), folder / "sequences.tsv")
    regions = pd.DataFrame({"sequence_id": ids[holding], "region": 1, "start": 1, "end": length[holding]})
    regions = regions.assign(length=length[holding], n_chunks=n_chunks[holding], n_viral_chunks=n_chunks[holding])
    regions = regions.assign(mean_score_virus=rng.random(len(holding)).round(6), max_score_virus=1.0)
    write_tsv(regions[list(REGIONS)], folder / "regions.tsv")


def write_summaries(folder: Path, records: int, bases: int, chunks: int, frames: int) -> None:
    """The run summary, manifest, benchmark and figures files that summarize and plot_sample read."""
    shards = [
        {"model": m, "shard": s, "tokens_per_s": 1000.0, "fill": 0.9, "precision": "fp16", "device": "cuda:0"}
        for m in ("esm", "dnabert")
        for s in (0, 1)
    ]
    counts = {"records": records, "bases": bases, "chunks": chunks, "frames": frames}
    counts |= {"frames_per_record": 2.0, "ambiguous_bases": 0, "ambiguous_fraction": 0.0, "status": {"ok": records}}
    write_json({"counts": counts, "embedding_shards": shards, "config": {"models": {}}}, folder / "run_summary.json")
    manifest = {"input": {}, "checkpoints": {}, "counts": {"frames": frames, "chunks": chunks}}
    manifest["counts"] |= {"chunks_scored": chunks, "viral_chunks": 0, "viral_bases": 0, "regions": 0}
    manifest["counts"] |= {"region_bases": 0, "calls": {}}
    write_json(manifest, folder / "manifest.json")
    for job in ("prepare", "predict", "esm", "dnabert"):
        (folder / f"benchmark_{job}.tsv").write_text("s\tmax_rss\n1.0\t100\n")
        write_json({"model": job, "frames": 1, "n_tokens": 1, "seconds": 1.0}, folder / f"figures_{job}.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    folder = args.workdir / f"records_{args.records}"
    if not (folder / "manifest.json").is_file():
        write_sample(folder, args.records)
    out = folder / "out"
    out.mkdir(exist_ok=True)
    python = [sys.executable]
    summarize = python + [str(ROOT / "scripts" / "summarize.py"), "--sample", "s", "--config", "{}"]
    summarize += ["--prepared-sequences", str(folder / "prepared_sequences.tsv.gz")]
    summarize += ["--manifest", str(folder / "manifest.json"), "--snakemake-version", "9"]
    for model in ("dnabert", "esm"):
        summarize += ["--embed-figures", model, str(folder / f"figures_{model}.json")]
        summarize += ["--embed-benchmarks", model, str(folder / f"benchmark_{model}.tsv")]
    summarize += ["--benchmark-prepare", str(folder / "benchmark_prepare.tsv")]
    summarize += ["--benchmark-score", str(folder / "benchmark_predict.tsv")]
    summarize += ["--benchmark-predict", str(folder / "benchmark_predict.tsv"), "--summary", str(out / "summary.json")]
    plot = python + [str(ROOT / "scripts" / "plot_sample.py"), "--sample", "s"]
    plot += ["--top-sequences", "12", "--top-regions", "6", "--table-rows", "500"]
    for name in ("frames", "chunks", "sequences", "regions", "prepared_frames", "prepared_sequences"):
        plot += [f"--{name.replace('_', '-')}", str(folder / f"{name}.{'tsv.gz' if 'prepared' in name else 'tsv'}")]
    plot += ["--summary", str(folder / "run_summary.json")]
    for name in ("scores", "calls", "top_sequences", "top_regions", "table", "input", "throughput"):
        plot += [f"--{name.replace('_', '-')}-page", str(out / f"{name}.{'html' if name == 'table' else 'png'}")]
    tables_mb = sum(f.stat().st_size for f in folder.glob("*.tsv*")) / 1e6
    result = header("report_memory") | {"records": args.records, "tables_mb": round(tables_mb, 1)}
    print_figures(result | {"summarize": measured(summarize), "plot_sample": measured(plot)})


if __name__ == "__main__":
    main()
