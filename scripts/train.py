"""Train VirNucPro's classifier on the embeddings of samples labelled 'virus' or 'other'."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import TrainSettings, add_arguments, from_arguments
from workflow_lib.cli.threads import use_threads
from workflow_lib.training.train import train_classifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--shard",
        nargs="+",
        action="append",
        required=True,
        metavar="LABEL DNABERT_H5 ESM_H5 FRAMES_TSV [FIRST_ROW END_ROW]",
        help="one labelled shard: virus|other, its DNABERT-S and ESM-2 embeddings, its sample's prepare frames "
        "table, and the shard's rows of the embeddings where they pool several samples' shards",
    )
    parser.add_argument("--output", required=True, help="classifier checkpoint to write")
    parser.add_argument("--metrics", required=True, help="JSON: training and validation metrics, ROC curve, split")
    parser.add_argument(
        "--calibration",
        help="calibration JSON to write, fitted on cross-fitted scores (--calibration-folds) or the validation split",
    )
    add_arguments(parser, TrainSettings)
    args = parser.parse_args()
    setup_logging()
    use_threads(args.threads)
    if any(len(s) not in (4, 6) for s in args.shard):
        parser.error("--shard takes a label, two embeddings files, a frames table and, optionally, two row numbers")
    settings = from_arguments(TrainSettings, args)
    train_classifier([tuple(s) for s in args.shard], args.output, args.metrics, settings, args.calibration)


if __name__ == "__main__":
    run_cli(main)
