"""Download the classifier that models.classifier gives by URL into the cache directory, verified,
and check it against the configured models and the calibration."""

import argparse
import os

from workflow_lib.classify.calibration import Calibration
from workflow_lib.cli.errors import InputError, run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import FetchClassifierSettings, add_arguments, from_arguments
from workflow_lib.io.checksums import sha256
from workflow_lib.models import Embedder, add_embedders_argument
from workflow_lib.models.fetch_models import fetch_classifier


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    # what the download is checked against, the rule's params.checks
    add_embedders_argument(parser)
    parser.add_argument("--chunk-length", type=int, required=True, help="config chunk_length")
    parser.add_argument("--classifier-chunk-length", type=int, help="config models.classifier_chunk_length")
    parser.add_argument("--calibration", help="config models.calibration")
    add_arguments(parser, FetchClassifierSettings)
    args = parser.parse_args()
    setup_logging()
    settings = from_arguments(FetchClassifierSettings, args)
    path = fetch_classifier(
        settings.classifier,
        [Embedder.parse(words) for words in args.embedders],
        settings.cache_dir,
        settings.checksums,
        settings.progress_seconds,
        args.chunk_length,
        args.classifier_chunk_length,
    )
    if args.calibration and os.path.isfile(args.calibration):  # not when the calibrate target makes it
        calibration = Calibration.load(args.calibration)
        if refusal := calibration.refusal(sha256(path), args.chunk_length, args.calibration):
            raise InputError(f"models.calibration: {refusal}")


if __name__ == "__main__":
    run_cli(main)
