"""Build the tiny seeded demo models (ESM-2 checkpoint, DNABERT-S directory) in their real formats."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workflow_lib.demo_models import build
from workflow_lib.errors import run_cli


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--outdir", required=True)
    parser.add_argument("--genome", action="append", required=True, help="FASTA to train the BPE tokenizer on")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for kind, path in build(args.outdir, [Path(g) for g in args.genome], args.seed).items():
        print(f"{kind}: {path}")


if __name__ == "__main__":
    run_cli(main)
