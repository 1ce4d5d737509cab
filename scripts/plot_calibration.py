"""Draw the weighing figure (PNG) for the report: the calibration's reliability diagram, each
sample's estimated viral fraction, and the records called viral within each q-value cutoff."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.report.figures import calibration_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calibration", required=True, help="the calibration JSON (models.calibration)")
    parser.add_argument("--sample", action="append", required=True, help="a weighed sample's name, once per sample")
    parser.add_argument("--sequences", nargs="+", required=True, help="call's sequences table of each sample")
    parser.add_argument("--manifests", nargs="+", required=True, help="call's manifest of each sample")
    parser.add_argument("--figure", required=True, help="the figure to write (PNG)")
    args = parser.parse_args()
    if not len(args.sample) == len(args.sequences) == len(args.manifests):
        parser.error("--sample (once per sample), --sequences and --manifests name as many samples")
    calibration_report(args.calibration, list(zip(args.sample, args.sequences, args.manifests)), args.figure)


if __name__ == "__main__":
    run_cli(main)
