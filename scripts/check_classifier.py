"""Check the classifier against the configured embedding models: its input size and chunk length."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import CheckClassifierSettings, add_arguments, from_arguments
from workflow_lib.models.check_models import check_classifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-check", required=True, help="the model check (JSON) of the embedding models")
    parser.add_argument("--classifier", required=True, help="the classifier file to check")
    parser.add_argument("--classifier-check", required=True, help="the check to write (JSON)")
    add_arguments(parser, CheckClassifierSettings)
    args = parser.parse_args()
    setup_logging()
    settings = from_arguments(CheckClassifierSettings, args)
    check_classifier(
        args.model_check,
        args.classifier,
        settings.cache_dir,
        args.classifier_check,
        settings.chunk_length,
        settings.classifier_chunk_length,
    )


if __name__ == "__main__":
    run_cli(main)
