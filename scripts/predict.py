"""Score a sample's frames from its two sets of shard embeddings: frames.tsv, chunks.tsv, scoring.json."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workflow_lib.errors import run_cli
from workflow_lib.predict import score
from workflow_lib.progress import add_progress_argument, setup_logging
from workflow_lib.threads import add_threads_argument, use_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--prepare-dir", required=True, help="the sample's prepare output (frames and sequences tables)"
    )
    parser.add_argument("--dnabert", nargs="+", required=True, help="DNABERT-S HDF5 per shard, in shard order")
    parser.add_argument("--esm", nargs="+", required=True, help="ESM-2 HDF5 per shard, in shard order")
    parser.add_argument("--classifier", required=True)
    parser.add_argument("--outdir", required=True)
    parser.add_argument("--no-virnucpro-tables", action="store_true")
    add_progress_argument(parser)
    add_threads_argument(parser)
    args = parser.parse_args()
    setup_logging()
    use_threads(args.threads)
    if len(args.dnabert) != len(args.esm):
        parser.error("--dnabert and --esm need one file per shard each")
    score(
        args.prepare_dir,
        args.dnabert,
        args.esm,
        args.classifier,
        args.outdir,
        not args.no_virnucpro_tables,
        args.progress_seconds,
    )


if __name__ == "__main__":
    run_cli(main)
