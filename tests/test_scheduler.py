"""Snakemake's job scheduler with one pending re-evaluation timer per delay (workflow_lib/scheduler.py)."""

import threading
from types import SimpleNamespace

from snakemake.scheduling.job_scheduler import JobScheduler

from workflow_lib.scheduler import keep_one_timer


def timers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if isinstance(t, threading.Timer)]


def test_a_due_timer_of_a_pending_delay_is_not_armed_again():
    assert keep_one_timer() and keep_one_timer()  # once per process, however often the Snakefile is read
    scheduler = SimpleNamespace(_open_jobs=threading.Semaphore(0))
    before = set(timers())
    for _ in range(5):  # five passes that each ask for a pass an hour from now
        JobScheduler._schedule_reevalutation(scheduler, 3600)
    armed = set(timers()) - before
    assert len(armed) == 1 and armed.pop().daemon
    JobScheduler._schedule_reevalutation(scheduler, 0.01)  # another delay: a timer of its own
    assert scheduler._open_jobs.acquire(timeout=60)
    JobScheduler._schedule_reevalutation(scheduler, 0.01)  # fired, so it can be armed again
    assert scheduler._open_jobs.acquire(timeout=60)
    assert not scheduler._open_jobs.acquire(blocking=False)  # one pass per timer, no more
