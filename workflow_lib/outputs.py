"""Writing outputs so that no partial file ever looks finished, and gzip that is byte-reproducible."""

import contextlib
import gzip
import io
import os
from pathlib import Path

from .errors import InputError


def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside `path`; rename it to `path` only if the block succeeds."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(f"{path.parent}: cannot create the output directory ({error.strerror})") from None
    tmp = _temporary_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w"):
    """Open a temporary file beside `path` ('.gz' compresses); rename it into place on success."""
    binary = "b" in mode
    with atomic_path(path) as tmp:
        if str(path).endswith(".gz"):
            # mtime=0 and no file name in the header: the same content gives the same bytes.
            # Level 1: these are intermediate tables, written at hundreds of thousands of rows/s.
            raw = open(tmp, "wb")
            stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=1)
            handle = stream if binary else io.TextIOWrapper(stream, encoding="utf-8", newline="")
            try:
                yield handle
            finally:
                handle.close()
                raw.close()
        else:
            with open(tmp, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
                yield handle
