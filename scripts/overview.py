"""Write the report's overview of all samples (HTML) and their counts (TSV) from their run summaries."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.io.outputs import add_unwritten_option
from workflow_lib.report.figures import overview


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--summaries", nargs="+", required=True, help="run_summary.json of every sample")
    parser.add_argument("--page", required=True, help="the overview to write (HTML)")
    parser.add_argument("--table", required=True, help="the counts of every sample to write (TSV)")
    parser.add_argument("--recorded", required=True, help="the settings that made the results (JSON)")
    add_unwritten_option(parser)
    args = parser.parse_args()
    overview(args.summaries, args.page, args.table, args.recorded)


if __name__ == "__main__":
    run_cli(main)
