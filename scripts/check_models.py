"""Check the configured models before any embedding job: ESM-2 layer, sizes, classifier input size."""

import argparse

from workflow_lib.check_models import check_models
from workflow_lib.errors import run_cli
from workflow_lib.progress import setup_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--esm", required=True, help="fair-esm name or .pt path")
    parser.add_argument("--esm-layer", type=int, required=True)
    parser.add_argument("--dnabert", required=True, help="Hugging Face id or directory")
    parser.add_argument("--classifier", help="classifier file to check (left out when the workflow trains it)")
    parser.add_argument("--cache-dir", required=True, help="where fetch_models put the named models")
    parser.add_argument("--chunk-length", type=int, required=True, help="the run's chunk length in bp")
    parser.add_argument(
        "--classifier-chunk-length", type=int, help="what the classifier was made for, when the file does not say"
    )
    parser.add_argument("--output", required=True, help="JSON report")
    args = parser.parse_args()
    setup_logging()
    checkpoints = {"esm": args.esm, "dnabert": args.dnabert}
    check_models(
        checkpoints,
        args.esm_layer,
        args.classifier,
        args.cache_dir,
        args.output,
        args.chunk_length,
        args.classifier_chunk_length,
    )


if __name__ == "__main__":
    run_cli(main)
