"""The parsing behind what a cluster run tells its console (the real thing runs in test_slurm.py,
which needs root): failed jobs' reasons from Snakemake's log, jobs that SLURM killed for memory,
pending jobs that never start."""

from pathlib import Path

import pytest

from workflow_lib.workflow.cluster_watch import (
    FailedJob,
    failed_job_reasons,
    failed_jobs,
    job_name,
    memory_kill_line,
    never_runs,
    slurm_memory_kill,
)

# Snakemake's log and the SLURM logs of real runs of the SLURM test bed whose jobs SLURM killed for
# memory (tests/data/FIXTURES.md): by polling (OverMemoryKill, as the test bed does) or by task/cgroup
MEMORY_KILLS = Path(__file__).parent / "data" / "slurm_memory_kills"


def test_failed_jobs_reasons_are_their_logs_last_lines(tmp_path):
    (tmp_path / "a.log").write_text("INFO reading\nerror: in.fa: record 2 is empty; fix it\n\n")
    (tmp_path / "b.log").write_text("")
    snakemake_log = tmp_path / "run.snakemake.log"
    failed = f"    log: {tmp_path / 'a.log'}, {tmp_path / 'b.log'} (check log file(s) for error details)\n"
    snakemake_log.write_text(f"Error in rule prepare:\n    jobid: 3\n{failed}Error in rule prepare:\n{failed}")
    assert failed_job_reasons([str(snakemake_log), str(tmp_path / "gone.log")]) == [
        f"{tmp_path / 'a.log'}: error: in.fa: record 2 is empty; fix it"
    ]


def test_pending_jobs_that_never_start_are_this_runs_only(tmp_path):
    squeue = (
        f"11|{tmp_path}|rule_prepare_wildcards_s1|PartitionTimeLimit\n"
        f"12|{tmp_path}|rule_embed_wildcards_s1|Resources\n"  # waits for a free node: it will start
        f"13|/elsewhere|rule_embed_wildcards_s2|PartitionConfig\n"  # another run's
        f"14|{tmp_path}|group_sample_report|PartitionConfig\n"
    )
    assert never_runs(squeue, str(tmp_path)) == [
        ("11", "rule_prepare_wildcards_s1", "PartitionTimeLimit"),
        ("14", "group_sample_report", "PartitionConfig"),
    ]


def test_a_pending_job_is_named_by_its_rule_or_group():
    groups = ("small_prepare", "small_samples")
    assert job_name("rule_prepare_wildcards_s1", groups) == "rule prepare"
    assert job_name("rule_small_samples_call_plot_sample_predict", groups) == "group small_samples"
    assert job_name("rule_plot_sample_wildcards_s1") == "rule plot_sample"


def test_failed_jobs_are_rules_or_groups_with_their_logs():
    group, rule = failed_jobs((MEMORY_KILLS / "cgroup_group" / "snakemake.log").read_text())
    slurm_log = "logs/slurm/group_small_prepare_prepare/9.log"
    assert group == FailedJob("small_prepare", ("prepare",), (slurm_log, "logs/prepare/phix.log"))
    assert rule == FailedJob(None, ("prepare",), ("logs/prepare/phix.log",))
    # five SLURM jobs of two embed jobs (retried), Snakemake's reports of other jobs between them
    embeds = failed_jobs((MEMORY_KILLS / "polled_rule" / "snakemake.log").read_text())
    assert [(job.name, job.rules, Path(job.logs[1]).name) for job in embeds] == [
        ("rule embed", ("embed",), f"{slurm_job}.log") for slurm_job in range(22, 27)
    ]


@pytest.mark.parametrize("case", ["polled_rule", "cgroup_rule", "cgroup_group"])
def test_a_memory_kill_is_read_from_slurms_line_in_the_jobs_log(case):
    """SLURM's line names the job, whichever step it killed (the batch step, with Snakemake in it,
    or the rule's), polled or by the cgroup."""
    logs = sorted((MEMORY_KILLS / case / "logs" / "slurm").rglob("*.log"))
    assert logs and [slurm_memory_kill(log.read_text()) for log in logs] == [log.stem for log in logs]


def test_a_job_that_failed_otherwise_was_not_memory_kill_line():
    assert slurm_memory_kill("Error in rule prepare:\n    message: None\nerror: in.fa: record 2 is empty\n") is None


def test_the_memory_kill_line_says_what_to_raise():
    embed = FailedJob(None, ("embed",), ())
    assert memory_kill_line(embed, "22", 250) == (
        "rule embed (SLURM job 22) was killed for memory by SLURM; it asked for mem_mb=250: raise its mem_mb "
        "in the profile (set-resources: embed: mem_mb: ...) and run again"
    )
    assert memory_kill_line(embed, "22", None) == (
        "rule embed (SLURM job 22) was killed for memory by SLURM: raise its mem_mb "
        "in the profile (set-resources: embed: mem_mb: ...) and run again"
    )
    samples = FailedJob("small_samples", ("predict", "call"), ())
    assert memory_kill_line(samples, "31", 4000) == (
        "group small_samples (SLURM job 31, rules predict, call) was killed for memory by SLURM; it asked for "
        "mem_mb=4000, what its jobs that run side by side ask together: raise its rules' mem_mb in the profile "
        "(set-resources: RULE: mem_mb: ..., RULE one of predict, call) and run again"
    )
