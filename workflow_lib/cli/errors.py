"""User-facing errors: one line that names the file, the record and what to do; no traceback."""

import contextlib
import errno
import logging
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

_FULL = (errno.ENOSPC, errno.EDQUOT)
# HDF5 reports a failed write inside h5py's RuntimeError or OSError text, not in its errno
_FULL_TEXT = re.compile(rf"No space left on device|Disk quota exceeded|errno = ({'|'.join(map(str, _FULL))})\b")


class InputError(Exception):
    """Bad input or configuration that the user must fix; printed as one line."""


def first_line(error: BaseException) -> str:
    """An error's first line (its type where it says nothing), for a one-line message."""
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def disk_full(error: BaseException) -> bool:
    """Whether `error` says that a file system refused a write for want of space (or quota)."""
    return getattr(error, "errno", None) in _FULL or bool(_FULL_TEXT.search(str(error)))


def full_disk(directory: str | os.PathLike) -> str:
    """The one line for a full file system under `directory` (it may not exist yet)."""
    directory = Path(directory)
    mount = next(p for p in (directory, *directory.parents) if p.exists()).resolve()
    while not mount.is_mount() and mount != mount.parent:
        mount = mount.parent
    return (
        f"{directory}: cannot write the outputs: no space left on device (the file system mounted at "
        f"{mount} is full); free space there or write the outputs elsewhere, then run the same command again"
    )


def full_disk_here(directory: str | os.PathLike = ".") -> str | None:
    """full_disk's line when the file system of `directory` has less than 1 MiB free (a job, or
    Snakemake's own log and metadata, may have met it without saying so), else None."""
    if shutil.disk_usage(directory).free < 1 << 20:
        return full_disk(Path(directory).resolve())
    return None


def _say(line: str) -> None:
    """The line to stderr (the job's log, which may be on the full disk) and, under
    scripts/run_logged.sh, to the console through the descriptor it names."""
    with contextlib.suppress(OSError):  # the log on a full disk: the console still gets the line
        print(line, file=sys.stderr, flush=True)
    if fd := os.environ.get("WORKFLOW_REASON_FD"):
        with contextlib.suppress(OSError):
            os.write(int(fd), f"{line}\n".encode())


def run_cli(main: Callable[[], None]) -> None:
    """Run a script's main(); an InputError or a full disk is one line on stderr and exit status 2,
    Ctrl-C one line and status 130 (an embed job has logged what it committed)."""
    try:
        main()
    except KeyboardInterrupt:
        _say("error: interrupted (Ctrl-C)")
        _exit(130)
    except Exception as error:
        if isinstance(error, InputError):
            line = f"error: {error}"
        elif disk_full(error):  # met outside atomic_path: the file's directory, else the run's
            filename = getattr(error, "filename", None)
            line = f"error: {full_disk(Path(filename).parent if filename else Path.cwd())}"
        else:
            raise
        _say(line)
        _exit(2)


def _exit(status: int) -> None:
    with contextlib.suppress(OSError):
        sys.stdout.flush()
        logging.shutdown()
    # Not sys.exit: an HDF5 file whose write failed is still open (the error holds its frame),
    # and h5py's clean-up would flush it at exit, fail again and crash the process (SIGSEGV).
    os._exit(status)
