"""A sample's frames and chunks tables and scoring JSON, from its shards' scores files."""

import argparse
from pathlib import Path

from workflow_lib.classify.calibration import Calibration
from workflow_lib.classify.predict import ScoreFiles, write_tables
from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import PredictSettings, add_arguments
from workflow_lib.io.outputs import add_unwritten_option


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prepared-frames", required=True, help="the sample's frames table from prepare")
    parser.add_argument("--prepared-sequences", required=True, help="the sample's sequences table from prepare")
    parser.add_argument("--sample", default="", help="the sample's name, as the pooled scores files list it")
    parser.add_argument(
        "--scores",
        nargs="+",
        required=True,
        help="the (pooled) scores files of the sample's shards, in the plan's order",
    )
    parser.add_argument("--bins", required=True, help="the sample's bins file from prepare")
    parser.add_argument("--frames", required=True, help="the frames table to write (a score per frame)")
    parser.add_argument("--chunks", required=True, help="the chunks table to write (a call per chunk)")
    parser.add_argument("--scoring", required=True, help="the JSON to write: checkpoints and their SHA-256")
    parser.add_argument(
        "--virnucpro",
        nargs="*",
        default=(),
        metavar="PATH",
        help="VirNucPro's prediction_results.txt and prediction_results_highestscore.csv to write (none: not written)",
    )
    parser.add_argument("--calibration", help="calibration JSON (models.calibration): adds each chunk's probability")
    add_unwritten_option(parser)
    add_arguments(parser, PredictSettings)
    args = parser.parse_args()
    if len(args.virnucpro) not in (0, 2):
        parser.error("--virnucpro takes two paths (its per-frame and per-chunk tables) or none")
    setup_logging()
    outputs = ScoreFiles(
        Path(args.frames), Path(args.chunks), Path(args.scoring), tuple(map(Path, args.virnucpro)) or None
    )
    calibration = Calibration.load(args.calibration) if args.calibration else None
    write_tables(
        args.prepared_frames,
        args.prepared_sequences,
        args.scores,
        args.bins,
        outputs,
        args.progress_seconds,
        calibration,
        args.sample,
    )


if __name__ == "__main__":
    run_cli(main)
