"""The run's plan: every sample's shards, from the shards tables that prepare wrote, packed into pools."""

import argparse
import logging

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.prepare.plan import write_plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sample", nargs=2, action="append", required=True, metavar=("NAME", "SHARDS_TABLE"), help="once per sample"
    )
    parser.add_argument("--shard-tokens", type=int, required=True, help="ESM-2 tokens a pool holds at most")
    parser.add_argument("--generation", type=int, default=0, help="the samples' generation (names the pools)")
    parser.add_argument("--output", required=True, help="the plan to write (TSV)")
    args = parser.parse_args()
    setup_logging()
    counts = write_plan([tuple(pair) for pair in args.sample], args.shard_tokens, args.output, args.generation)
    logging.getLogger("workflow").info(
        "%d shards of %d samples in %d pools, planned in %s",
        counts["shards"],
        len(args.sample),
        counts["pools"],
        args.output,
    )


if __name__ == "__main__":
    run_cli(main)
