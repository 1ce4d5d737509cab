"""Fit a calibration for the classifier that scored labelled samples, from their chunks tables."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.training.calibrate import Labelled, calibrate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sample",
        nargs="+",
        action="append",
        required=True,
        metavar="NAME LABEL FRAMES SEQUENCES SCORES",
        help="one labelled sample: its name, virus|other, prepare's frames and sequences tables, its shards' "
        "(pooled) scores files",
    )
    parser.add_argument("--chunk-length", type=int, required=True, help="config chunk_length")
    parser.add_argument(
        "--method", choices=("auto", "platt", "isotonic"), default="auto", help="config calibration.method"
    )
    parser.add_argument("--output", required=True, help="the calibration JSON to write")
    parser.add_argument("--progress-seconds", type=float, default=30, help="config progress_seconds")
    args = parser.parse_args()
    if any(len(s) < 5 for s in args.sample):
        parser.error("--sample takes a name, a label, a frames table, a sequences table and at least one scores file")
    setup_logging()
    samples = [
        Labelled(name, label, frames, sequences, scores) for name, label, frames, sequences, *scores in args.sample
    ]
    calibrate(samples, args.chunk_length, args.method, args.output, args.progress_seconds)


if __name__ == "__main__":
    run_cli(main)
