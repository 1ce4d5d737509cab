"""Write the configuration reference generated from config/schema.yaml into config/README.md (between its
config-reference markers), or print it."""

import argparse
from pathlib import Path

from harness.config_reference import markdown, update_readme

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--schema", default=ROOT / "config" / "schema.yaml")
    parser.add_argument(
        "--readme",
        default=ROOT / "config" / "README.md",
        help="rewrite the reference between this file's config-reference markers (default: %(default)s)",
    )
    parser.add_argument("--print", action="store_true", help="print the reference instead of writing it")
    args = parser.parse_args()
    if args.print:
        print(markdown(args.schema), end="")
    else:
        changed = update_readme(args.readme, args.schema)
        print(f"{args.readme}: {'updated' if changed else 'already up to date'}")


if __name__ == "__main__":
    main()
