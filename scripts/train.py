"""Train VirNucPro's classifier on the embeddings of samples labelled 'virus' or 'other'."""

import argparse

from workflow_lib.errors import run_cli
from workflow_lib.progress import add_progress_argument, setup_logging
from workflow_lib.threads import add_threads_argument, use_threads
from workflow_lib.train import TrainSettings, train_classifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--shard",
        nargs=4,
        action="append",
        required=True,
        metavar=("LABEL", "DNABERT_H5", "ESM_H5", "FRAMES_TSV"),
        help="one labelled shard: virus|other, its DNABERT-S and ESM-2 embeddings, its sample's prepare frames table",
    )
    parser.add_argument("--output", required=True, help="classifier checkpoint to write")
    parser.add_argument("--metrics", required=True, help="JSON: training and validation metrics, ROC curve, split")
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--learning-rate", type=float, required=True)
    parser.add_argument("--momentum", type=float, required=True)
    parser.add_argument("--patience", type=int, required=True)
    parser.add_argument("--validation-fraction", type=float, required=True)
    parser.add_argument("--balance-classes", choices=("true", "false"), required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--chunk-length", type=int, required=True, help="recorded in the checkpoint")
    add_progress_argument(parser)
    add_threads_argument(parser)
    args = parser.parse_args()
    setup_logging()
    use_threads(args.threads)
    settings = TrainSettings(
        args.epochs,
        args.batch_size,
        args.learning_rate,
        args.momentum,
        args.patience,
        args.validation_fraction,
        args.balance_classes == "true",
        args.seed,
    )
    train_classifier(
        [tuple(s) for s in args.shard],
        args.output,
        args.metrics,
        settings,
        args.progress_seconds,
        chunk_length=args.chunk_length,
    )


if __name__ == "__main__":
    run_cli(main)
