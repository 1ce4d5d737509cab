"""The whole workflow at scale, its work sized by the job: one sample of N 500 bp reads (sampled
from the bundled genomes) run by Snakemake with the local profile on this machine's cores, with
tiny models (one-layer ESM-2 and DNABERT-S, so that 10^6 reads take minutes: the figures are the
workflow's, not the models'), a random classifier, shards of --shard-tokens ESM-2 tokens and the
config's default outputs.keep_embeddings (false). Prints JSON per read count: shards, jobs per
rule, the embeddings on disk at their peak against all that were written (polled every 0.2 s),
each rule's peak RSS and summed time (Snakemake's benchmark files), Snakemake's own CPU (its
process alone) and the wall time.

    python benchmarks/workflow_scale.py --workdir /tmp/workflow_scale --reads 250000 1000000 --shard-tokens 3000000
    python benchmarks/workflow_scale.py --workdir /tmp/ws --reads 250000 --shard-tokens 1000000 --scheduler ilp
"""

import argparse
import os
import re
import shutil
import threading
from pathlib import Path

import pandas as pd
import torch
import yaml

from workflow_lib.harness.measure import header, print_figures, print_progress, snakemake
from workflow_lib.harness.stages import GENOMES, ROOT, write_reads
from workflow_lib.models import classifier, demo_models
from workflow_lib.prepare.plan import read_plans

ESM = {**demo_models.ESM_CONFIG, "encoder_layers": 1, "encoder_embed_dim": 16, "encoder_attention_heads": 1}
DNABERT = {**demo_models.DNABERT_CONFIG, "num_hidden_layers": 1, "hidden_size": 24, "intermediate_size": 48}


def models(workdir: Path) -> dict:
    """The tiny models and a random classifier of their width, built once in `workdir`."""
    folder = workdir / "models"
    if not (folder / "classifier.pt").exists():
        esm = demo_models.build_esm(folder / "esm2_t1_small.pt", 0, ESM)
        dnabert = demo_models.build_dnabert(folder / "dnabert_small", sorted(GENOMES.glob("*.fasta"))[:1], 0, DNABERT)
        torch.manual_seed(0)
        width = DNABERT["hidden_size"] + ESM["encoder_embed_dim"]
        classifier.save(classifier.MLPClassifier(width).eval(), folder / "classifier.pt", chunk_length=500)
        assert esm.exists() and dnabert.exists()
    return {
        "esm": {"checkpoint": str(folder / "esm2_t1_small.pt"), "layer": 1, "token_budget": 16384},
        "dnabert": {"checkpoint": str(folder / "dnabert_small"), "token_budget": 16384},
        "classifier": str(folder / "classifier.pt"),
        "cache_dir": str(folder / "cache"),
    }


class Watch:
    """Polls the run: the embeddings on disk (every file under results/*/embeddings, in progress
    or finished) and the largest size each finished file reached."""

    def __init__(self, run: Path):
        self.run = run
        self.peak_bytes, self.peak_files, self.written = 0, 0, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def poll(self) -> None:
        while not self.stop.wait(0.2):
            sizes = {}
            for path in self.run.glob("results/shards/embeddings/**/*"):
                try:
                    if path.is_file() and not path.name.endswith(".json"):
                        sizes[path] = path.stat().st_size
                except FileNotFoundError:  # removed between the listing and the stat
                    pass
            total = sum(sizes.values())
            if total > self.peak_bytes:
                self.peak_bytes = total
            self.peak_files = max(self.peak_files, sum(p.suffix == ".h5" for p in sizes))
            for path, size in sizes.items():
                if re.fullmatch(r"shard_[\d-]+\.h5", path.name):  # shard_{pool}.h5, as rules/embed.smk names it
                    self.written[path] = max(size, self.written.get(path, 0))

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def size_mb(paths) -> float:
    return round(sum(p.stat().st_size for p in paths if p.is_file()) / 1e6, 1)


def rule_figures(run: Path) -> dict:
    """Per rule with a benchmark: jobs, summed seconds and the largest peak RSS (MB)."""
    figures = {}
    for rule in sorted(p.name for p in (run / "results" / "benchmarks").iterdir() if p.is_dir()):
        rows = [pd.read_csv(f, sep="\t").iloc[-1] for f in (run / "results" / "benchmarks" / rule).rglob("*.tsv")]
        rss = [float(r["max_rss"]) for r in rows if r["max_rss"] != "-"]
        figures[rule] = {
            "jobs": len(rows),
            "seconds": round(sum(float(r["s"]) for r in rows), 1),
            "peak_rss_mb": round(max(rss, default=0)),
        }
    return figures


def run(workdir: Path, reads: int, shard_tokens: int, cores: int, scheduler: str | None) -> dict:
    """The workflow on `reads` reads, its embeddings on disk watched: jobs, disk, time; under
    Snakemake's `scheduler` where given, else the profile's."""
    folder = workdir / f"reads_{reads}"
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "reads.fa").exists():
        write_reads(folder / "reads.fa", reads, 500, seed=1)
    (folder / "samples.tsv").write_text(f"sample\tpath\nreads\t{folder / 'reads.fa'}\n")
    config = {
        "samples": str(folder / "samples.tsv"),
        "chunk_length": 500,
        "shard_tokens": shard_tokens,
        "models": models(workdir),
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    run_dir = folder / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    options = ("--configfile", folder / "config.yaml", "--profile", ROOT / "profiles" / "local", "--cores", cores)
    options += ("--scheduler", scheduler) if scheduler else ()
    watch = Watch(run_dir)
    try:
        snakemake_run, _ = snakemake(run_dir, *options, log=folder / "snakemake.log")
    finally:
        watch.close()
    samples, pools = read_plans(run_dir / "results" / "plan")
    figures = {"reads": reads, "frames": sum(shard["frames"] for shard in samples["reads"]), "shards": len(pools)}
    figures |= {
        "scheduler": scheduler or "the profile's",
        "shard_tokens": shard_tokens,
        "jobs": snakemake_run["jobs_by_rule"],
    } | disk_figures(run_dir, watch)
    figures["rules"] = rule_figures(run_dir)
    return figures | {"snakemake_own_cpu_s": snakemake_run["own_cpu_s"], "seconds": snakemake_run["seconds"]}


def disk_figures(run_dir: Path, watch: Watch) -> dict:
    """The embeddings written and on disk at the peak, and what the run left."""
    written = sum(watch.written.values())
    largest = max(watch.written.values(), default=0)
    sample = run_dir / "results" / "reads"
    return {
        "embeddings": {
            "written_mb": round(written / 1e6, 1),
            "peak_on_disk_mb": round(watch.peak_bytes / 1e6, 1),
            "peak_files_on_disk": watch.peak_files,
            "peak_in_largest_shard_files": round(watch.peak_bytes / max(largest, 1), 2),
            "left_after_run": len(list(run_dir.glob("results/shards/embeddings/*/*.h5"))),
        },
        "disk_after_run_mb": {
            "tables_and_fasta": size_mb(p for p in sample.iterdir() if p.is_file()),
            "prepare": size_mb(sample.joinpath("prepare").rglob("*")),
            "scores": size_mb(run_dir.joinpath("results", "shards", "scores").rglob("*")),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--reads", type=int, nargs="+", default=[250_000, 1_000_000])
    parser.add_argument("--shard-tokens", type=int, default=3_000_000)
    parser.add_argument("--cores", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--scheduler", choices=("greedy", "ilp"), help="Snakemake's (default: the profile's, greedy)")
    args = parser.parse_args()
    result = header("workflow_scale") | {"runs": []}
    for reads in args.reads:
        result["runs"].append(run(args.workdir, reads, args.shard_tokens, args.cores, args.scheduler))
        print_progress(result["runs"][-1])
    print_figures(result)


if __name__ == "__main__":
    main()
