"""SIGTERM in the embed job. SLURM sends it to every process of a job at its time limit or on
preemption, Snakemake to its jobs when it is stopped: the main process leaves through its normal
exits (loader workers shut down, what was embedded committed, no partial output left), a commit
being written is finished first, and loader workers leave the signal to the main process."""

import contextlib
import logging
import signal
from collections.abc import Callable, Iterator

log = logging.getLogger("workflow")


@contextlib.contextmanager
def sigterm_exits() -> Iterator[Callable[[], None]]:
    """A SIGTERM raises SystemExit(143) in the main process. Yields `finishing`: once called (every
    frame committed), a SIGTERM is only noted: stopped after its output was renamed, the job would
    exit 143 and Snakemake would delete that output, its commits perhaps gone already."""

    def stop(signum, _frame):
        raise SystemExit(128 + signum)

    def noted(signum, _frame):
        log.warning("a SIGTERM came after the last batch: the job finishes first")

    previous = signal.signal(signal.SIGTERM, stop)
    finished = []

    def finishing() -> None:
        signal.signal(signal.SIGTERM, noted)
        finished.append(True)

    try:
        yield finishing
    finally:
        if not finished:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigterm_held() -> Iterator[None]:
    """SIGTERM held back until the block ends: raised inside a commit, rows taken from the writer
    would reach neither the commit log nor the final commit. Nested, the outer block keeps it held."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def ignore_sigterm() -> None:
    """For loader workers: the main process shuts them down once it has committed."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
