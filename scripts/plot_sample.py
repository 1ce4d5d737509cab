"""Draw a sample's report figures (PNG) and its table of top-scoring sequences (HTML)."""

import argparse
from pathlib import Path

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.settings import PlotSampleSettings, add_arguments, from_arguments
from workflow_lib.report.data import SampleTables
from workflow_lib.report.figures import SampleFigures, sample_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sample", required=True)
    for name in SampleTables._fields:
        parser.add_argument(f"--{name.replace('_', '-')}", required=True, help=f"the sample's {name} (read)")
    for name in SampleFigures._fields:
        parser.add_argument(f"--{name.replace('_', '-')}-page", required=True, help=f"the {name} figure (written)")
    add_arguments(parser, PlotSampleSettings)
    parsed = parser.parse_args()
    settings, args = from_arguments(PlotSampleSettings, parsed), vars(parsed)
    tables = SampleTables(*(Path(args[name]) for name in SampleTables._fields))
    figures = SampleFigures(*(Path(args[f"{name}_page"]) for name in SampleFigures._fields))
    sample_report(args["sample"], tables, figures, settings)


if __name__ == "__main__":
    run_cli(main)
