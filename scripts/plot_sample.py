"""Draw a sample's report figures (PNG) and its table of top-scoring sequences (HTML)."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workflow_lib.errors import run_cli
from workflow_lib.report import SAMPLE_FILES, sample_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", required=True)
    parser.add_argument("--results", required=True, help="the sample's results directory (tables and prepare/)")
    parser.add_argument("--summary", required=True, help="the sample's run_summary.json")
    parser.add_argument("--outdir", required=True, help=f"where to write {', '.join(SAMPLE_FILES.values())}")
    parser.add_argument("--top-sequences", type=int, default=12, help="sequences plotted chunk by chunk")
    parser.add_argument("--table-rows", type=int, default=500, help="rows of the HTML table of sequences")
    args = parser.parse_args()
    sample_report(args.sample, args.results, args.summary, args.outdir, args.top_sequences, args.table_rows)


if __name__ == "__main__":
    run_cli(main)
