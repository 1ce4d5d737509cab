"""Validate, chunk and six-frame translate a sample's reads (its files in turn; a paired sample's
mates in lockstep) into shards of at most --shard-tokens ESM-2 tokens, each in bin order."""

import argparse
from pathlib import Path

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import PrepareSettings, add_arguments, from_arguments
from workflow_lib.io.reads import SampleReads
from workflow_lib.prepare.job import PreparedFiles, prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    SampleReads.add_arguments(parser)
    parser.add_argument("--shards", required=True, help="the directory to write each shard's FASTA pair into")
    parser.add_argument("--shard-table", required=True, help="the shards table to write (frames and tokens per shard)")
    parser.add_argument("--bins", required=True, help="the bins file to write (each shard's counts per bin, .npz)")
    parser.add_argument("--frames", required=True, help="the frames table to write (.gz compresses)")
    parser.add_argument("--sequences", required=True, help="the sequences table to write (.gz compresses)")
    add_arguments(parser, PrepareSettings)
    args = parser.parse_args()
    setup_logging()
    files = PreparedFiles(*map(Path, (args.shards, args.shard_table, args.bins, args.frames, args.sequences)))
    prepare(SampleReads.from_arguments(args), files, from_arguments(PrepareSettings, args))


if __name__ == "__main__":
    run_cli(main)
