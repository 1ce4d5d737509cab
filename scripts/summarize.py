"""Write a sample's run summary (versions, checkpoints, config, timings per stage, counts, embedding
figures per shard) as JSON."""

import argparse
import json

from workflow_lib.cli.errors import run_cli
from workflow_lib.io.outputs import add_unwritten_option
from workflow_lib.io.tables import write_json
from workflow_lib.report.summary import summarize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", required=True)
    parser.add_argument("--prepared-sequences", required=True, help="the sample's sequences table from prepare")
    parser.add_argument("--manifest", required=True, help="the manifest written by call")
    parser.add_argument(
        "--embed-figures",
        nargs="+",
        action="append",
        required=True,
        metavar="MODEL FIGURES_JSON",
        help="per embedding model: its name, then its embed jobs' figures (JSON), in shard order",
    )
    parser.add_argument(
        "--embed-benchmarks",
        nargs="+",
        action="append",
        required=True,
        metavar="MODEL BENCHMARK_TSV",
        help="per embedding model: its name, then its embed jobs' Snakemake benchmark files, in shard order",
    )
    parser.add_argument("--benchmark-prepare", required=True, help="Snakemake benchmark file of the prepare job")
    parser.add_argument("--benchmark-score", nargs="+", required=True, help="of the score jobs, in shard order")
    parser.add_argument("--benchmark-predict", required=True)
    parser.add_argument("--config", required=True, help="the run's result settings as JSON")
    parser.add_argument("--snakemake-version", required=True, help="of the Snakemake that runs the workflow")
    parser.add_argument("--summary", required=True, help="the run summary to write (JSON)")
    add_unwritten_option(parser)
    args = parser.parse_args()
    figures = {model: files for model, *files in args.embed_figures}
    benchmarks = {model: files for model, *files in args.embed_benchmarks}
    for model, files in figures.items():
        if len(files) != len(benchmarks.get(model, ())) or not files:
            parser.error(f"--embed-figures and --embed-benchmarks need one file per shard each of {model}")
    result = summarize(
        args.sample,
        args.prepared_sequences,
        args.manifest,
        figures,
        {
            "prepare": args.benchmark_prepare,
            "embed": benchmarks,
            "score": args.benchmark_score,
            "predict": args.benchmark_predict,
        },
        json.loads(args.config),
        args.snakemake_version,
    )
    write_json(result, args.summary)


if __name__ == "__main__":
    run_cli(main)
