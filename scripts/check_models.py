"""Check the configured models before any embedding job: ESM-2 layer, sizes, classifier input size."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import CheckModelsSettings, add_arguments, from_arguments
from workflow_lib.models.check_models import check_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output", required=True, help="JSON report")
    add_arguments(parser, CheckModelsSettings)
    args = parser.parse_args()
    setup_logging()
    settings = from_arguments(CheckModelsSettings, args)
    check_models(
        {"esm": settings.esm, "dnabert": settings.dnabert},
        settings.esm_layer,
        settings.classifier,
        settings.cache_dir,
        args.output,
        settings.chunk_length,
        settings.classifier_chunk_length,
    )


if __name__ == "__main__":
    run_cli(main)
