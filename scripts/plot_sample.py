"""Draw a sample's report figures (PNG) and its table of top-scoring sequences (HTML)."""

import argparse
from pathlib import Path

from workflow_lib.errors import run_cli
from workflow_lib.report import SampleFigures, SampleTables, sample_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", required=True)
    for name in SampleTables._fields:
        parser.add_argument(f"--{name.replace('_', '-')}", required=True, help=f"the sample's {name} (read)")
    for name in SampleFigures._fields:
        parser.add_argument(f"--{name.replace('_', '-')}-out", required=True, help=f"the {name} figure (written)")
    parser.add_argument("--top", type=int, required=True, help="sequences plotted chunk by chunk")
    parser.add_argument("--table-rows", type=int, required=True, help="rows of the HTML table of sequences")
    args = vars(parser.parse_args())
    tables = SampleTables(*(Path(args[name]) for name in SampleTables._fields))
    figures = SampleFigures(*(Path(args[f"{name}_out"]) for name in SampleFigures._fields))
    sample_report(args["sample"], tables, figures, args["top"], args["table_rows"])


if __name__ == "__main__":
    run_cli(main)
