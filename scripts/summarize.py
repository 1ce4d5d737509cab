"""Write a sample's run summary (versions, checkpoints, config, timings per stage, counts, embedding
figures per shard) as JSON."""

import argparse
import json

from workflow_lib.cli.errors import run_cli
from workflow_lib.io.tables import write_json
from workflow_lib.report.summary import summarize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", required=True)
    parser.add_argument("--prepared-sequences", required=True, help="the sample's sequences table from prepare")
    parser.add_argument("--manifest", required=True, help="the manifest written by call")
    parser.add_argument("--esm", nargs="+", required=True, help="ESM-2 embed jobs' figures (JSON), in shard order")
    parser.add_argument(
        "--dnabert", nargs="+", required=True, help="DNABERT-S embed jobs' figures (JSON), in shard order"
    )
    parser.add_argument("--benchmark-prepare", required=True, help="Snakemake benchmark file of the prepare job")
    parser.add_argument("--benchmark-esm", nargs="+", required=True, help="of the ESM-2 embed jobs, in shard order")
    parser.add_argument("--benchmark-dnabert", nargs="+", required=True, help="of the DNABERT-S embed jobs")
    parser.add_argument("--benchmark-score", nargs="+", required=True, help="of the score jobs, in shard order")
    parser.add_argument("--benchmark-predict", required=True)
    parser.add_argument("--config", required=True, help="the run's result settings as JSON")
    parser.add_argument("--snakemake-version", required=True, help="of the Snakemake that runs the workflow")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    models = {"esm": (args.esm, args.benchmark_esm), "dnabert": (args.dnabert, args.benchmark_dnabert)}
    for model, (files, benchmarks) in models.items():
        if len(files) != len(benchmarks):
            parser.error(f"--{model} and --benchmark-{model} need one file per shard each")
    result = summarize(
        args.sample,
        args.prepared_sequences,
        args.manifest,
        {model: files for model, (files, _) in models.items()},
        {
            "prepare": args.benchmark_prepare,
            "embed": {model: benchmarks for model, (_, benchmarks) in models.items()},
            "score": args.benchmark_score,
            "predict": args.benchmark_predict,
        },
        json.loads(args.config),
        args.snakemake_version,
    )
    write_json(result, args.output)


if __name__ == "__main__":
    run_cli(main)
