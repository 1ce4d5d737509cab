"""Three mends to Snakemake's scheduling, written against and tested with Snakemake 9.27.1 (TESTED),
each a no-op where its target is missing: `keep_one_timer`, `bound_passes` and `mend_job_groups`.
docs/development.md writes up each: what it changes, why, and the measurement. `mend_all` applies
them and says in one line what another Snakemake does without them."""

import ast
import hashlib
import heapq
import importlib.util
import threading
from collections import defaultdict
from pathlib import Path

import snakemake

TESTED = "9.27.1"

try:
    import snakemake.api  # noqa: F401 (first: snakemake.dag alone is a circular import)
    from snakemake.common import group_into_chunks
    from snakemake.dag import DAG
    from snakemake.exceptions import WorkflowError
    from snakemake.scheduling.job_scheduler import JobScheduler
except ImportError:  # another Snakemake: nothing to mend
    DAG = JobScheduler = None


def keep_one_timer() -> bool:
    """One pending re-evaluation timer per delay (a timer only starts a pass, and every event that
    makes a job runnable releases the scheduler itself); whether this Snakemake has the timer to mend."""
    if JobScheduler is None or not hasattr(JobScheduler, "_schedule_reevalutation"):
        return False
    if getattr(JobScheduler, "_one_timer_per_delay", False):  # once per process
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


RULE_JOBS_A_PASS = 20  # the ready jobs of a rule or group that one scheduling pass weighs


def bound_passes() -> bool:
    """Passes that weigh at most RULE_JOBS_A_PASS ready jobs of each rule or group, those of highest
    priority (not --scheduler-subsample's random sample, which can leave out the one job that could
    start); whether this Snakemake has the selector to mend."""
    if JobScheduler is None or not hasattr(JobScheduler, "job_selector"):
        return False
    if getattr(JobScheduler, "_passes_bounded", False):
        return True
    job_selector = JobScheduler.job_selector

    def bounded(self, jobs):
        return job_selector(self, weighed_in_a_pass(jobs))

    JobScheduler.job_selector = bounded
    JobScheduler._passes_bounded = True
    return True


def weighed_in_a_pass(jobs, per_rule: int = RULE_JOBS_A_PASS) -> set:
    """Of the ready `jobs`, the `per_rule` of highest priority of each rule or group."""
    by_rule = defaultdict(list)
    for job in jobs:
        by_rule[job.name].append(job)
    return {
        job
        for same in by_rule.values()
        for job in (heapq.nlargest(per_rule, same, key=lambda job: job.priority) if len(same) > per_rule else same)
    }


def mend_job_groups() -> bool:
    """Group components merged once per pass from the DAG's factory (snakemake#1217, #1628), groups
    checked for cycles once each; whether this Snakemake has the group code to mend."""
    if DAG is None or not all(hasattr(DAG, name) for name in ("_update_group_components", "_check_groups")):
        return False
    DAG._update_group_components = _update_group_components  # the same functions again: once per process
    DAG._check_groups = _check_groups
    return True


def _update_group_components(self) -> None:
    components = defaultdict(set)
    for group in self._group.values():
        components[group.groupid].add(group)
    for groupid, groups in components.items():
        n = self.workflow.group_settings.group_components.get(self.workflow.parent_groupids.get(groupid, groupid), 1)
        # the same chunks in every pass: components in the order of their jobs' outputs
        ordered = sorted(groups, key=lambda g: min(str(job.output) for job in g.jobs))
        for chunk in group_into_chunks(n, ordered) if n > 1 else ():
            if len(chunk) > 1:
                merged = self.group_job_factory.new(
                    groupid, (job for group in chunk for job in group.jobs), self.workflow.global_resources
                )
                for job in merged.jobs:
                    self._group[job] = merged
    for group in set(self._group.values()):
        group.finalize()


def _check_groups(self) -> None:
    for group in set(self._group.values()):
        outside = [dep for job in group.jobs for dep in self._dependencies[job] if dep not in group.jobs]
        seen = set(outside)
        while outside:
            job = outside.pop()
            for dep in self._dependencies[job]:
                if dep in group.jobs:
                    raise WorkflowError(
                        f"Group {group.groupid} depends on itself: a path of jobs leaves it and enters it "
                        f"again at {dep.rule.name} (through {job.rule.name}), so it could never be ready. "
                        f"Remove {dep.rule.name} from the group or add {job.rule.name} to it."
                    )
                if dep not in seen:
                    seen.add(dep)
                    outside.append(dep)


# Each mend, and what a run does without it.
MENDS = {
    keep_one_timer: "Snakemake's own CPU grows with the square of the samples",
    bound_passes: "each scheduling pass weighs every ready job",
    mend_job_groups: "grouped cluster jobs can hold far more samples than group-components asks",
}


# The Snakemake code that the mends replace or rely on, "module:Class.function", with the SHA-256 (first 16
# hex digits) of its source in TESTED: tests/test_scheduler.py fails when the pinned Snakemake's differ, so
# a Snakemake upgrade is a decision to re-read these functions, not a surprise.
PATCHED = {
    "snakemake.scheduling.job_scheduler:JobScheduler._schedule_reevalutation": "41ba084422e3e8b4",
    "snakemake.scheduling.job_scheduler:JobScheduler.schedule": "0bc9281c9eaf66d6",
    "snakemake.scheduling.job_scheduler:JobScheduler.job_selector": "80c6e52e3dabebdd",
    "snakemake.dag:DAG._update_group_components": "d6a0ea1266307cfe",
    "snakemake.dag:DAG._check_groups": "24f9376fd7119b09",
    "snakemake.common:group_into_chunks": "e74dae2a65735371",
}


def source_fingerprint(target: str) -> str | None:
    """The SHA-256 (16 hex digits) of a function's source as the installed Snakemake's file holds it,
    read without importing it (a class already mended would show the mend); None where it is gone."""
    module, _, qualname = target.partition(":")
    source = Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8")
    node = ast.parse(source)
    for name in qualname.split("."):
        # a property's getter comes first, under the same name as its setter
        node = next((child for child in node.body if getattr(child, "name", None) == name), None)
        if node is None:
            return None
    return hashlib.sha256(ast.get_source_segment(source, node).encode()).hexdigest()[:16]


def mend_all() -> str | None:
    """Apply every mend; None on the Snakemake they were tested with, else a one-line warning."""
    missing = [cost for mend, cost in MENDS.items() if not mend()]
    if snakemake.__version__ == TESTED:
        return None
    where = "workflow_lib/workflow/snakemake_patches.py"
    applied = f"all {len(MENDS)} applied, to internals they may not fit"
    found = f"not applied: {'; '.join(missing)}" if missing else applied
    return (
        f"Snakemake {snakemake.__version__}: this workflow's mends to its scheduling ({where}) are tested with "
        f"{TESTED} ({found}); install snakemake=={TESTED} (requirements.txt) to be sure"
    )
