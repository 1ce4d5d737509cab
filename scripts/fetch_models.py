"""Download the configured models into the cache directory, verified, on a machine with internet;
jobs then load them from there with no network. FAIR_ESM_URL and HF_ENDPOINT choose other sources."""

import argparse
import logging
import re

from workflow_lib.errors import run_cli
from workflow_lib.fetch_models import fetch_models
from workflow_lib.progress import add_progress_argument, setup_logging


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--esm", required=True, help="fair-esm name or .pt path")
    parser.add_argument("--dnabert", required=True, help="Hugging Face id or directory")
    parser.add_argument("--classifier", help="http(s) URL or path (left out when the workflow trains it)")
    parser.add_argument("--cache-dir", required=True, help="where to put the models and fetched.json")
    parser.add_argument(
        "--checksum", action="append", default=[], metavar="NAME=SHA256", help="SHA-256 a downloaded file must have"
    )
    add_progress_argument(parser)
    args = parser.parse_args()
    pinned = dict(item.partition("=")[::2] for item in args.checksum)
    bad = [f"{name}={sha}" for name, sha in pinned.items() if not re.fullmatch(r"[0-9a-f]{64}", sha)]
    if bad:
        parser.error(f"--checksum: expected NAME=<64 hex digits>, got {', '.join(bad)}")
    setup_logging()
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # huggingface_hub's client: a line per request
    fetch_models(args.esm, args.dnabert, args.classifier, args.cache_dir, pinned, args.progress_seconds)


if __name__ == "__main__":
    run_cli(main)
