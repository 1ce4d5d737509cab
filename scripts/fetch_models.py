"""Download the configured embedding models into the cache directory, verified, on a machine with internet;
jobs then load them from there with no network. FAIR_ESM_URL and HF_ENDPOINT choose other sources."""

import argparse
import logging

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import FetchSettings, add_arguments, from_arguments
from workflow_lib.models import Embedder, add_embedders_argument
from workflow_lib.models.fetch_models import fetch_models


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    add_embedders_argument(parser)
    add_arguments(parser, FetchSettings)
    args = parser.parse_args()
    settings = from_arguments(FetchSettings, args)
    setup_logging()
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # huggingface_hub's client: a line per request
    embedders = [Embedder.parse(words) for words in args.embedders]
    fetch_models(embedders, settings.cache_dir, settings.checksums, settings.progress_seconds)


if __name__ == "__main__":
    run_cli(main)
