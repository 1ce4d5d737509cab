"""Build the tiny seeded demo models (ESM-2 checkpoint, DNABERT-S directory) in their real formats."""

import argparse
from pathlib import Path

from workflow_lib.cli.errors import run_cli
from workflow_lib.models.demo_models import build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--esm", required=True, help="the ESM-2 checkpoint to write (.pt; its contact regression beside it)"
    )
    parser.add_argument("--dnabert", required=True, help="the DNABERT-S directory to write")
    parser.add_argument("--genome", action="append", required=True, help="FASTA to train the BPE tokenizer on")
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    for kind, path in build(args.esm, args.dnabert, [Path(g) for g in args.genome], args.seed).items():
        print(f"{kind}: {path}")


if __name__ == "__main__":
    run_cli(main)
