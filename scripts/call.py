"""Call each input record of a sample from its scored chunks: sequences.tsv, viral.fasta, manifest.json."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workflow_lib.errors import run_cli
from workflow_lib.predict import call
from workflow_lib.progress import setup_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sequences", required=True, help="the sample's prepare sequences table")
    parser.add_argument("--chunks", required=True, help="chunks.tsv written by predict")
    parser.add_argument("--scoring", required=True, help="scoring.json written by predict")
    parser.add_argument("--input", required=True, help="the sample's input file (for viral.fasta)")
    parser.add_argument("--outdir", required=True)
    parser.add_argument("--min-viral-fraction", type=float, required=True)
    args = parser.parse_args()
    setup_logging()
    call(args.sequences, args.chunks, args.scoring, args.input, args.outdir, args.min_viral_fraction)


if __name__ == "__main__":
    run_cli(main)
