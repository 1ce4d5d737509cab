"""Print the configuration reference (markdown) generated from config/schema.yaml, or write it into the README."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from workflow_lib.config_reference import markdown, update_readme

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schema", default=ROOT / "config" / "schema.yaml")
    parser.add_argument("--readme", help="rewrite the reference between this file's config-reference markers")
    args = parser.parse_args()
    if args.readme:
        changed = update_readme(args.readme, args.schema)
        print(f"{args.readme}: {'updated' if changed else 'already up to date'}")
    else:
        print(markdown(args.schema), end="")


if __name__ == "__main__":
    main()
