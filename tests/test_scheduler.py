"""Snakemake's scheduling mended (workflow_lib/workflow/snakemake_patches.py): one pending re-evaluation timer per
delay, passes that weigh a bounded number of jobs, group components merged once."""

import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

from helpers import ROOT
from snakemake.exceptions import WorkflowError

from workflow_lib.workflow.snakemake_patches import (
    DAG,
    JobScheduler,
    bound_passes,
    keep_one_timer,
    mend_job_groups,
    weighed_in_a_pass,
)


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


class Ready:
    def __init__(self, name, priority):
        self.name, self.priority = name, priority


def test_a_pass_weighs_the_first_ready_jobs_of_each_rule():
    """Many samples' prepare jobs ready at once: a pass weighs the first of them, and still the
    embed jobs of highest priority and the one plan job."""
    assert bound_passes() and bound_passes()
    prepare = [Ready("prepare", 0) for _ in range(50)]
    embed = [Ready("embed", 1_000_000 - shard) for shard in range(30)]
    plan = Ready("plan", 3_000_000)
    weighed = weighed_in_a_pass(prepare + embed + [plan], per_rule=20)
    assert len(weighed) == 41 and plan in weighed and set(embed[:20]) <= weighed
    assert sum(job.name == "prepare" for job in weighed) == 20
    assert weighed_in_a_pass(embed[:5], per_rule=20) == set(embed[:5])


MANY_READY = """
from workflow_lib.workflow.snakemake_patches import bound_passes, RULE_JOBS_A_PASS
bound_passes()
rule all:
    input: expand("done/{i}.txt", i=range(3 * RULE_JOBS_A_PASS)), "first.txt"
rule small:
    output: "done/{i}.txt"
    shell: "touch {output}"
rule first:
    output: "first.txt"
    priority: 10
    shell: "mkdir -p done && ls done | wc -l > {output}"
"""


def test_every_ready_job_runs_when_passes_are_bounded(tmp_path):
    """Three passes' worth of ready jobs of one rule: each runs, and the job of highest priority
    runs before them."""
    (tmp_path / "Snakefile").write_text(MANY_READY)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(tmp_path / "Snakefile")]
    result = subprocess.run(
        [*command, "--directory", str(tmp_path), "--cores", "1"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list((tmp_path / "done").iterdir())) == 60
    assert (tmp_path / "first.txt").read_text().strip() == "0"


class Factory:
    """Snakemake's GroupJobFactory: one group per id and set of jobs, cached."""

    def __init__(self):
        self.cache = {}

    def new(self, groupid, jobs, resources):
        jobs = frozenset(jobs)
        return self.cache.setdefault((groupid, jobs), Group(groupid, jobs))


class Job:
    def __init__(self, output):
        self.output = output


class Group:
    """A GroupJob as Snakemake's merge sees it: an id and jobs that merge() grows."""

    def __init__(self, groupid, jobs):
        self.groupid, self.jobs = groupid, jobs

    def merge(self, other):
        self.jobs = self.jobs | other.jobs

    def finalize(self):
        pass

    def __iter__(self):
        return iter(self.jobs)


def update_groups(dag, jobs) -> None:
    """DAG.update_groups before the components: each job's group from the factory (here no two
    jobs are connected), merged into a group found before that holds one of its jobs."""
    groups = {}
    for job in jobs:
        group = dag.group_job_factory.new("small_prepare", [job], {})
        for other in {groups[j] for j in group.jobs if j in groups}:
            other.merge(group)
            group = other
        groups |= dict.fromkeys(group.jobs, group)
    dag._group = groups


def test_group_components_are_merged_the_same_in_every_pass():
    """Six samples' prepare, three to a group: the DAG post-processed three times (start-up, a
    checkpoint, another) gives the same two groups of three each time, never one of six."""
    assert mend_job_groups() and mend_job_groups()
    jobs = [Job([f"results/s{i}/prepare/shards"]) for i in range(6)]
    settings = SimpleNamespace(group_components={"small_prepare": 3})
    workflow = SimpleNamespace(group_settings=settings, parent_groupids={}, global_resources={})
    dag = SimpleNamespace(workflow=workflow, group_job_factory=Factory())
    passes = []
    for _ in range(3):
        update_groups(dag, jobs)
        DAG._update_group_components(dag)
        passes.append(set(dag._group.values()))
    assert passes[0] == passes[1] == passes[2]
    assert sorted(len(group.jobs) for group in passes[0]) == [3, 3]


def test_a_group_that_leaves_and_enters_itself_again_is_refused():
    """predict and summarize in a group, call between them outside it: refused, once per group;
    with call in the group too, accepted."""
    predict, call, summarize = (Job([name]) for name in ("predict", "call", "summarize"))
    for job in (predict, call, summarize):
        job.rule = SimpleNamespace(name=job.output[0])
    dependencies = {predict: set(), call: {predict}, summarize: {call}}
    mend_job_groups()
    for members, refused in (({predict, summarize}, True), ({predict, call, summarize}, False)):
        group = Group("small_samples", frozenset(members))
        dag = SimpleNamespace(_group=dict.fromkeys(members, group), _dependencies=dependencies)
        try:
            DAG._check_groups(dag)
        except WorkflowError as error:
            assert refused and "enters it again at predict (through call)" in str(error)
        else:
            assert not refused


def test_another_snakemake_is_told_in_one_line_what_its_mends_are_tested_with(monkeypatch):
    """The mends are tested with the Snakemake that requirements.txt pins; on that one the start-up
    says nothing, on another it names both versions and how to install the tested one."""
    import snakemake

    from workflow_lib.workflow import snakemake_patches

    lines = (ROOT / "requirements.txt").read_text().splitlines()
    pinned = next(line for line in lines if line.startswith("snakemake=="))
    assert pinned == f"snakemake=={snakemake_patches.TESTED}" == f"snakemake=={snakemake.__version__}"
    assert snakemake_patches.mend_all() is None
    monkeypatch.setattr(snakemake, "__version__", "9.99.0")
    line = snakemake_patches.mend_all()
    assert line.startswith("Snakemake 9.99.0: ") and "\n" not in line
    assert "tested with 9.27.1 (all 3 applied" in line
    assert line.endswith("install snakemake==9.27.1 (requirements.txt) to be sure")


def test_the_snakemake_code_the_mends_rely_on_is_the_code_they_were_written_for():
    """An upgrade of the pinned Snakemake that changes a function the mends replace or rely on fails
    here, naming it: re-read it against the mend, then record its new fingerprint."""
    from workflow_lib.workflow import snakemake_patches

    changed = {
        target: snakemake_patches.source_fingerprint(target)
        for target, fingerprint in snakemake_patches.PATCHED.items()
        if snakemake_patches.source_fingerprint(target) != fingerprint
    }
    assert not changed, f"Snakemake's code under the mends changed (new fingerprints): {changed}"
