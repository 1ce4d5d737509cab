"""Fit a calibration for the classifier that scored labelled samples, from their chunks tables."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import CalibrateSettings, add_arguments, from_arguments
from workflow_lib.training.calibrate import Labelled, calibrate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sample",
        nargs="+",
        action="append",
        required=True,
        metavar="NAME LABEL FRAMES SEQUENCES BINS SCORES",
        help="one labelled sample: its name, virus|other, prepare's frames and sequences tables and bins file, "
        "its shards' (pooled) scores files",
    )
    parser.add_argument("--calibration", required=True, help="the calibration JSON to write")
    add_arguments(parser, CalibrateSettings)
    args = parser.parse_args()
    if any(len(s) < 6 for s in args.sample):
        parser.error(
            "--sample takes a name, a label, the frames and sequences tables, a bins file and at least one scores file"
        )
    setup_logging()
    samples = [
        Labelled(name, label, frames, sequences, bins, scores)
        for name, label, frames, sequences, bins, *scores in args.sample
    ]
    settings = from_arguments(CalibrateSettings, args)
    calibrate(samples, settings.chunk_length, settings.method, args.calibration, settings.progress_seconds)


if __name__ == "__main__":
    run_cli(main)
