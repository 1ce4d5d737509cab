"""Download the classifier that models.classifier gives by URL into the cache directory, verified,
and check it against the models the model check found."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import FetchClassifierSettings, add_arguments, from_arguments
from workflow_lib.io.tables import read_json
from workflow_lib.models.check_models import check_classifier
from workflow_lib.models.fetch_models import fetch_classifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model-check", required=True, help="the model check's report (JSON)")
    add_arguments(parser, FetchClassifierSettings)
    args = parser.parse_args()
    setup_logging()
    settings = from_arguments(FetchClassifierSettings, args)
    path = fetch_classifier(settings.classifier, settings.cache_dir, settings.checksums, settings.progress_seconds)
    check_classifier(read_json(args.model_check), path, settings.chunk_length, settings.classifier_chunk_length)


if __name__ == "__main__":
    run_cli(main)
