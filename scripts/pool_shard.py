"""Pool samples' shards into one shard: of each shard, its frames of the pool's bins, one shard
after the other (the run's plan)."""

import argparse
import logging

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.io.sharding import pool_shards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--piece",
        nargs=5,
        action="append",
        required=True,
        metavar=("SHARDS_DIR", "BINS", "SHARD", "FIRST_BIN", "END_BIN"),
        help="a sample's shard's frames of bins FIRST_BIN to END_BIN (excluded): prepare's shards directory and "
        "bins file, and the shard's number; in the plan's order",
    )
    parser.add_argument("--fna", required=True, help="the pooled nucleotide FASTA to write")
    parser.add_argument("--faa", required=True, help="the pooled protein FASTA to write")
    args = parser.parse_args()
    setup_logging()
    pieces = [(directory, bins, int(shard), int(first), int(end)) for directory, bins, shard, first, end in args.piece]
    written = pool_shards(pieces, args.fna, args.faa)
    logging.getLogger("workflow").info(
        "%d pieces of shards pooled into %s and %s (%d bytes)", len(pieces), args.fna, args.faa, written
    )


if __name__ == "__main__":
    run_cli(main)
