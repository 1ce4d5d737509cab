"""One pending re-evaluation timer per delay in Snakemake's job scheduler.

Snakemake 9 (9.27.1 here) always has a job rate limiter (`--max-jobs-per-timespan`, 100/1s by
default), and at the end of every scheduling pass that saw ready jobs it starts a new
`threading.Timer(timespan)` whose only act is to start another pass
(`scheduling/job_scheduler.py`, `JobScheduler.schedule` and `_schedule_reevalutation`). That pass
arms another timer, and every finished job starts another such chain, so while jobs wait the
passes grow with the jobs finished, each pass sizing the inputs of every ready job: Snakemake's own
CPU grows with the square of the samples (67 s against 12 s at 30 samples of the real workflow,
docs/performance.md). The timers are not daemon threads either, so a long timespan keeps the
process alive after the run.

`keep_one_timer` makes a timer that is due while another of the same delay is pending a no-op.
Safe because a timer only starts a pass: every event that can make a job runnable (a job done or
failed, an executor error, a signal) releases the scheduler itself, and while a pass asks for a
re-evaluation one still comes within `delay` seconds (the pending timer fires no later than the new
one would, and its flag is cleared before it releases, so the pass it starts can arm the next).
SLURM jobs are polled by the executor's own thread and reported through the same release.
"""

import threading

try:
    from snakemake.scheduling.job_scheduler import JobScheduler
except ImportError:  # another Snakemake: nothing to mend
    JobScheduler = None


def keep_one_timer() -> bool:
    """Patch JobScheduler (once per process); whether this Snakemake has the timer to mend."""
    if JobScheduler is None or not hasattr(JobScheduler, "_schedule_reevalutation"):
        return False
    if getattr(JobScheduler, "_one_timer_per_delay", False):
        return True
    lock = threading.Lock()

    def schedule_reevaluation(self, delay) -> None:
        with lock:
            pending = self.__dict__.setdefault("_pending_delays", set())
            if delay in pending:
                return
            pending.add(delay)

        def fire() -> None:
            with lock:
                pending.discard(delay)
            self._open_jobs.release()

        timer = threading.Timer(delay, fire)
        timer.daemon = True  # nothing to wait for at exit: it would only start a pass
        timer.start()

    JobScheduler._schedule_reevalutation = schedule_reevaluation  # (sic: Snakemake's spelling)
    JobScheduler._one_timer_per_delay = True
    return True
