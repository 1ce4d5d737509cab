"""User-facing errors: one line that names the file, the record and what to do; no traceback."""

import sys
from collections.abc import Callable


class InputError(Exception):
    """Bad input or configuration that the user must fix; printed as one line."""


def run_cli(main: Callable[[], None]) -> None:
    """Run a script's main(); turn an InputError into one line on stderr and exit status 2."""
    try:
        main()
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
