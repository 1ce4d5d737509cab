"""Validate, chunk and six-frame translate one input file into shards of at most --shard-tokens ESM-2 tokens."""

import argparse
from pathlib import Path

from workflow_lib.errors import run_cli
from workflow_lib.prepare import Policy, PreparedFiles, prepare
from workflow_lib.progress import add_progress_argument, setup_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", required=True, help="FASTA or FASTQ, plain or .gz/.bz2/.xz")
    parser.add_argument("--shards", required=True, help="the directory to write each shard's FASTA pair into")
    parser.add_argument("--shard-table", required=True, help="the shards table to write (frames and tokens per shard)")
    parser.add_argument("--frames", required=True, help="the frames table to write (.gz compresses)")
    parser.add_argument("--sequences", required=True, help="the sequences table to write (.gz compresses)")
    parser.add_argument("--chunk-length", type=int, required=True)
    parser.add_argument("--ambiguous-codons", choices=("drop", "X"), required=True)
    parser.add_argument("--min-length", type=int, required=True)
    parser.add_argument("--max-ambiguous-fraction", type=float, required=True)
    parser.add_argument("--shard-tokens", type=int, required=True, help="ESM-2 tokens per shard, at most")
    add_progress_argument(parser)
    args = parser.parse_args()
    setup_logging()
    files = PreparedFiles(Path(args.shards), Path(args.shard_table), Path(args.frames), Path(args.sequences))
    policy = Policy(args.chunk_length, args.ambiguous_codons, args.min_length, args.max_ambiguous_fraction)
    prepare(args.input, files, policy, args.shard_tokens, args.progress_seconds)


if __name__ == "__main__":
    run_cli(main)
