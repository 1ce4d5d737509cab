"""Writing outputs so that no partial file ever looks finished, and gzip that is byte-reproducible."""

import argparse
import contextlib
import errno
import gzip
import io
import os
import shutil
from pathlib import Path

from workflow_lib.cli.errors import InputError, disk_full, full_disk


def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp{os.getpid()}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, tmp: str | os.PathLike | None = None):
    """Yield a temporary path beside `path` (or `tmp`, on the same file system); rename it to
    `path` only if the block succeeds, its data flushed to the disk first (`_flushed`).
    A full disk or an unwritable directory is an InputError that says so."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(
            f"{path.parent}: cannot create the output directory ({error.strerror.lower()}); write the outputs elsewhere"
        ) from None
    tmp = Path(tmp) if tmp is not None else _temporary_name(path)
    try:
        yield tmp
        _flushed(tmp, *(tmp.rglob("*") if tmp.is_dir() else ()))
        os.replace(tmp, path)
        _flushed(path.parent)
    except (OSError, RuntimeError) as error:  # h5py reports a failed write as either
        if disk_full(error):  # this file's disk, or that of another file written in the block
            other = getattr(error, "filename", None)
            mine = not other or os.fspath(other) == os.fspath(tmp)
            raise InputError(full_disk(path.parent if mine else Path(other).parent)) from None
        if not (isinstance(error, OSError) and _refused(error, tmp)):
            raise
        raise InputError(
            f"{path.parent}: cannot write the outputs: {os.strerror(error.errno).lower()}; make it writable or write "
            "them elsewhere"
        ) from None
    finally:
        with contextlib.suppress(OSError):  # a read-only file system refuses even a missing file
            tmp.unlink()


def _flushed(*paths: Path) -> None:
    """fsync files and directories (a directory: its entries). Without it a crash (a lost node)
    can leave a renamed output with its data missing: zero bytes or a length of zeros (ext4
    without auto_da_alloc, XFS, network file systems), which Snakemake takes as finished."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        except OSError as error:  # a directory that its file system cannot flush (EINVAL)
            if error.errno != errno.EINVAL:
                raise
        finally:
            os.close(fd)


def _refused(error: OSError, tmp: Path) -> bool:
    """Whether the directory refused `tmp` itself (h5py names it only in its message)."""
    ours = os.fspath(error.filename) == os.fspath(tmp) if error.filename else str(tmp) in str(error)
    return error.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and ours


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike):
    """Yield a new temporary directory beside `path`; it replaces `path` only if the block succeeds."""
    path = Path(path)
    tmp = _temporary_name(path)
    try:
        with atomic_path(path, tmp):
            tmp.mkdir()
            yield tmp
            shutil.rmtree(path, ignore_errors=True)  # a directory is replaced only while empty
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w"):
    """Open a temporary file beside `path` ('.gz' compresses); rename it into place on success."""
    binary = "b" in mode
    with atomic_path(path) as tmp:
        if str(path).endswith(".gz"):
            # mtime=0 and no file name in the header: the same content gives the same bytes.
            # Level 1: these are intermediate tables, written at hundreds of thousands of rows/s.
            with open(tmp, "wb") as raw:
                stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=1)
                handle = stream if binary else io.TextIOWrapper(stream, encoding="utf-8", newline="")
                try:
                    yield handle
                finally:
                    handle.close()
        else:
            with open(tmp, "wb" if binary else "w", encoding=None if binary else "utf-8") as handle:
                yield handle


class _RemoveUnwritten(argparse.Action):
    def __call__(self, parser, namespace, paths, option_string=None):
        for path in paths:  # they would disagree with the tables the job writes
            Path(path).unlink(missing_ok=True)


def add_unwritten_option(parser: argparse.ArgumentParser) -> None:
    """--unwritten PATH...: an earlier run's optional outputs that this run does not make
    (rule_outputs.unwritten_files), removed as the job's options are read."""
    parser.add_argument(
        "--unwritten", nargs="+", action=_RemoveUnwritten, help="an earlier run's outputs this job does not make"
    )
