"""Score one (pooled) shard's frames with the classifier, from its embeddings by each configured model."""

import argparse
from pathlib import Path

from workflow_lib.classify.score import score_shard
from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import ScoreSettings, add_arguments
from workflow_lib.cli.threads import use_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--embeddings", nargs="+", required=True, help="the shard's embeddings (HDF5) by each model, in input order"
    )
    parser.add_argument("--classifier", required=True)
    parser.add_argument("--scores", required=True, help="the shard's scores file to write (.npz)")
    parser.add_argument(
        "--piece",
        nargs=3,
        action="append",
        metavar=("SAMPLE", "SHARD", "FRAMES"),
        help="once per sample's shard that the pooled shard holds, in order",
    )
    parser.add_argument("--shard-fasta", nargs=2, metavar=("FNA", "FAA"), help="the shard's FASTA pair")
    add_arguments(parser, ScoreSettings)
    args = parser.parse_args()
    setup_logging()
    use_threads(args.threads)
    pieces = [(sample, int(shard), int(frames)) for sample, shard, frames in args.piece or ()]
    if args.remove_shard_fasta and not args.shard_fasta:
        parser.error("--remove-shard-fasta true needs --shard-fasta")
    score_shard(args.embeddings, args.classifier, args.scores, args.progress_seconds, pieces)
    if args.remove_shard_fasta:
        for path in args.shard_fasta:
            Path(path).unlink(missing_ok=True)


if __name__ == "__main__":
    run_cli(main)
