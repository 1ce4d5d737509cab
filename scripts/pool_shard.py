"""Pool samples' shards into one shard: their FASTA pairs one after the other (the run's plan)."""

import argparse
import logging

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.io.sharding import pool_shards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--piece",
        nargs=2,
        action="append",
        required=True,
        metavar=("SHARDS_DIR", "SHARD"),
        help="a sample's shard: prepare's shards directory and the shard's number; in the plan's order",
    )
    parser.add_argument("--fna", required=True, help="the pooled nucleotide FASTA to write")
    parser.add_argument("--faa", required=True, help="the pooled protein FASTA to write")
    args = parser.parse_args()
    setup_logging()
    written = pool_shards([(directory, int(shard)) for directory, shard in args.piece], args.fna, args.faa)
    logging.getLogger("workflow").info(
        "%d shards pooled into %s and %s (%d bytes)", len(args.piece), args.fna, args.faa, written
    )


if __name__ == "__main__":
    run_cli(main)
