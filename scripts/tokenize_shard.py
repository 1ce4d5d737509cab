"""Tokenise one shard for a model whose tokens are stored (DNABERT-S), for its embed job to read."""

import argparse

from workflow_lib.cli.errors import run_cli
from workflow_lib.cli.progress import setup_logging
from workflow_lib.cli.settings import TokenizeSettings, add_arguments, from_arguments
from workflow_lib.embed.stored_tokens import tokenize_shard
from workflow_lib.models.check_models import known_checksums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--model-check", required=True, help="the run's model check (JSON): model file checksums to reuse"
    )
    parser.add_argument("--input", required=True, help="the shard's FASTA from prepare that the model reads")
    parser.add_argument("--tokens", required=True, help="the tokens file to write (HDF5)")
    add_arguments(parser, TokenizeSettings)
    args = parser.parse_args()
    setup_logging()
    settings = from_arguments(TokenizeSettings, args)
    known = known_checksums(args.model_check, settings.model)
    tokenize_shard(settings.architecture, settings.checkpoint, settings.cache_dir, known, args.input, args.tokens)


if __name__ == "__main__":
    run_cli(main)
