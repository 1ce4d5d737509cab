"""Draw the weighing figure (PNG) for the report: the calibration's reliability diagram, each
sample's estimated viral fraction, and the records called viral within each q-value cutoff."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.report.figures import calibration_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calibration", required=True, help="the calibration JSON (models.calibration)")
    parser.add_argument(
        "--sample",
        nargs=3,
        action="append",
        default=[],
        metavar=("NAME", "SEQUENCES", "MANIFEST"),
        help="a weighed sample: its name, sequences table and manifest (call's)",
    )
    parser.add_argument("--output", required=True, help="the figure to write (PNG)")
    args = parser.parse_args()
    calibration_report(args.calibration, [tuple(s) for s in args.sample], args.output)


if __name__ == "__main__":
    run_cli(main)
