"""The run's plan: every sample's shards, from the bins files that prepare wrote, cut into pools."""

import argparse
import logging

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import PlanSettings, add_arguments, from_arguments
from workflow_lib.prepare.plan import write_plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", action="append", required=True, help="a sample's name, once per sample")
    parser.add_argument("--bins-files", nargs="+", required=True, help="prepare's bins file of each sample")
    parser.add_argument("--generation", type=int, default=0, help="the samples' generation (names the pools)")
    parser.add_argument("--plan", required=True, help="the plan to write (TSV)")
    add_arguments(parser, PlanSettings)
    args = parser.parse_args()
    if len(args.sample) != len(args.bins_files):
        parser.error("--sample (once per sample) and --bins-files name as many samples")
    setup_logging()
    settings = from_arguments(PlanSettings, args)
    counts = write_plan(list(zip(args.sample, args.bins_files)), settings.shard_tokens, args.plan, args.generation)
    logging.getLogger("workflow").info(
        "%d pieces of shards of %d samples in %d pools, planned in %s",
        counts["pieces"],
        len(args.sample),
        counts["pools"],
        args.plan,
    )


if __name__ == "__main__":
    run_cli(main)
