"""The parsing behind what a cluster run tells its console (the real thing runs in test_slurm.py,
which needs root): failed jobs' reasons from Snakemake's log, pending jobs that never start."""

from workflow_lib.workflow.cluster_watch import failed_job_reasons, job_name, never_runs


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
