"""Check the configured models before any embedding job: their layers and sizes, the classifier's input size."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import CheckModelsSettings, add_arguments, from_arguments
from workflow_lib.models import Embedder, add_embedders_argument
from workflow_lib.models.check_models import check_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-check", required=True, help="the check to write (JSON)")
    add_embedders_argument(parser)
    add_arguments(parser, CheckModelsSettings)
    args = parser.parse_args()
    setup_logging()
    settings = from_arguments(CheckModelsSettings, args)
    check_models(
        [Embedder.parse(words) for words in args.embedders],
        settings.classifier,
        settings.cache_dir,
        args.model_check,
        settings.chunk_length,
        settings.classifier_chunk_length,
    )


if __name__ == "__main__":
    run_cli(main)
