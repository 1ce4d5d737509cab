"""Compare this workflow's results for a sample with VirNucPro's tables for the same input (JSON on stdout)."""

import argparse
import json

from workflow_lib.cli.errors import run_cli
from workflow_lib.report.compare import compare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ours", required=True, help="results/{sample}: frames.tsv of this workflow")
    parser.add_argument(
        "--virnucpro",
        required=True,
        help="VirNucPro's output: prediction_results.txt, prediction_results_highestscore.csv",
    )
    args = parser.parse_args()
    print(json.dumps(compare(args.ours, args.virnucpro), indent=2))


if __name__ == "__main__":
    run_cli(main)
