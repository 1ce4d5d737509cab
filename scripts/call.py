"""Call each input record of a sample from its scored chunks: sequences table, viral FASTA, manifest."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workflow_lib.call import CallFiles, call
from workflow_lib.errors import run_cli
from workflow_lib.progress import setup_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prepared-sequences", required=True, help="the sample's sequences table from prepare")
    parser.add_argument("--chunks", required=True, help="the chunks table written by predict")
    parser.add_argument("--scoring", required=True, help="the scoring JSON written by predict")
    parser.add_argument("--input", required=True, help="the sample's input file (for the viral FASTA)")
    parser.add_argument("--sequences", required=True, help="the sequences table to write (a call per record)")
    parser.add_argument("--viral", required=True, help="the FASTA of viral records to write")
    parser.add_argument("--manifest", required=True, help="the JSON to write: checkpoints and counts")
    parser.add_argument("--min-viral-fraction", type=float, required=True)
    args = parser.parse_args()
    setup_logging()
    outputs = CallFiles(Path(args.sequences), Path(args.viral), Path(args.manifest))
    call(args.prepared_sequences, args.chunks, args.scoring, args.input, outputs, args.min_viral_fraction)


if __name__ == "__main__":
    run_cli(main)
