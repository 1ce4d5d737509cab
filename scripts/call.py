"""Call each input record of a sample from its scored chunks: sequences table, viral FASTA, viral regions
(table and FASTA), manifest."""

import argparse
from pathlib import Path

from workflow_lib.classify.calibration import Calibration
from workflow_lib.classify.call import CallFiles, call
from workflow_lib.classify.regions import RegionSettings
from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import CallSettings, add_arguments, from_arguments
from workflow_lib.io.outputs import add_unwritten_option
from workflow_lib.io.reads import SampleReads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prepared-sequences", required=True, help="the sample's sequences table from prepare")
    parser.add_argument("--chunks", required=True, help="the chunks table written by predict")
    parser.add_argument("--scoring", required=True, help="the scoring JSON written by predict")
    SampleReads.add_arguments(parser)  # the sample's reads, for the viral FASTA
    parser.add_argument("--sequences", required=True, help="the sequences table to write (a call per record)")
    parser.add_argument("--viral", required=True, help="the FASTA of viral records to write")
    parser.add_argument("--regions", required=True, help="the table of viral regions inside records to write")
    parser.add_argument("--regions-fasta", required=True, help="the FASTA of those regions to write")
    parser.add_argument("--manifest", required=True, help="the JSON to write: checkpoints and counts")
    parser.add_argument("--calibration", help="calibration JSON (models.calibration): weighs records and regions")
    parser.add_argument(
        "--embed-figures", nargs="+", default=[], help="the embed jobs' figures (JSON) of the sample's pooled shards"
    )
    parser.add_argument(
        "--passing",
        nargs=2,
        metavar=("VIRAL_FASTA", "REGIONS_FASTA"),
        help="with --calibration and --max-qvalue: FASTA of the records and regions within that q-value",
    )
    add_unwritten_option(parser)
    add_arguments(parser, CallSettings)
    args = parser.parse_args()
    setup_logging()
    settings = from_arguments(CallSettings, args)
    if settings.max_qvalue is not None and not (args.calibration and args.passing):
        parser.error("--max-qvalue needs --calibration and --passing")
    outputs = CallFiles(
        *map(Path, (args.sequences, args.viral, args.regions, args.regions_fasta, args.manifest)),
        passing=tuple(map(Path, args.passing)) if args.passing else None,
    )
    regions = RegionSettings(settings.region_max_gap, settings.region_min_length, settings.min_viral_fraction)
    calibration = Calibration.load(args.calibration) if args.calibration else None
    call(
        args.prepared_sequences,
        args.chunks,
        args.scoring,
        SampleReads.from_arguments(args),
        outputs,
        settings.min_viral_fraction,
        regions,
        calibration,
        settings.max_qvalue,
        args.embed_figures,
    )


if __name__ == "__main__":
    run_cli(main)
