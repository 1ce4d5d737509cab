"""Download the configured models into the cache directory, verified, on a machine with internet;
jobs then load them from there with no network. FAIR_ESM_URL and HF_ENDPOINT choose other sources."""

import argparse
import logging
import re

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
    bad = [f"{name}={sha}" for name, sha in settings.checksums.items() if not re.fullmatch(r"[0-9a-f]{64}", sha)]
    if bad:
        parser.error(f"--checksums: expected NAME=<64 hex digits>, got {', '.join(bad)}")
    setup_logging()
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # huggingface_hub's client: a line per request
    fetch_models(
        [Embedder.parse(words) for words in args.embedders],
        settings.classifier,
        settings.cache_dir,
        settings.checksums,
        settings.progress_seconds,
    )


if __name__ == "__main__":
    run_cli(main)
