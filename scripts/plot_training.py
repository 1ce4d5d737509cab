"""Draw the trained classifier's validation ROC curve (PNG) and its metrics table (HTML)."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.report.figures import training_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--metrics", required=True, help="the train target's metrics.json")
    parser.add_argument("--roc", required=True, help="the ROC curve to write (PNG)")
    parser.add_argument("--table", required=True, help="the metrics table to write (HTML)")
    args = parser.parse_args()
    training_report(args.metrics, args.roc, args.table)


if __name__ == "__main__":
    run_cli(main)
