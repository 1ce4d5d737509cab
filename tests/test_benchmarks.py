"""The benchmarks whose figures the docs give run on tiny inputs: a change to a stage's options or
tables that they did not follow fails here, not the next time someone measures."""

import json
import subprocess
import sys

import pytest
from helpers import ENV, ROOT


def benchmark(name: str, *options) -> dict:
    command = [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), *map(str, options)]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout[result.stdout.index("{") :])


@pytest.mark.slow
def test_every_stage_at_scale_runs(tmp_path):
    """Half the reads copies of the others: about half the frames and tokens are distinct (each a copy's
    first sequence), the reads' own repeats aside."""
    (run,) = benchmark("scale", "--workdir", tmp_path, "--reads", 2000, "--copies", 0.5)["runs"]
    assert run["reads"] == 2000 and run["frames"] > 0
    for stage in ("prepare", "score", "predict", "call", "summarize", "plot_sample"):
        assert run[stage]["peak_rss_mb"] > 0, stage
    for model in ("esm", "dnabert"):
        distinct = run["distinct"][model]
        assert distinct["frames"] == run["frames"] and 0.4 < distinct["distinct_token_share"] < 0.6, distinct


def test_prepare_throughput_runs():
    figures = benchmark("prepare_throughput", "--reads", 2000, "--repeats", 1, "--gzip")
    assert figures["input"] == "FASTA, gzip" and figures["reads_per_s"] > 0


@pytest.mark.slow
def test_train_memory_and_weighing_run(tmp_path):
    figures = benchmark("train_memory", "--workdir", tmp_path / "train", "--reads", 500, "--epochs", 1)
    assert figures["frames"] > 0 and figures["train"]["peak_rss_mb"] > 0
    options = ["--reads", 2000, "--fit-chunks", 2000, "--repeats", 1]
    figures = benchmark("weighing", "--workdir", tmp_path / "weighing", *options)
    assert figures["with_over_without"]["predict"] > 0 and figures["with_over_without"]["call"] > 0


@pytest.mark.slow
def test_many_samples_counts_snakemakes_work_and_the_slurm_submissions(tmp_path):
    """The swapped rules (the plan and the model check real) run to the end; 2 small samples share one
    pooled shard: 3 submissions before the plan, 5 for the pooled shard."""
    options = ["--mode", "swapped", "--samples", 2, "--slurm-dry-run"]
    (run,) = benchmark("many_samples", "--workdir", tmp_path, *options)["runs"]
    assert run["checkpoint"]["jobs_by_rule"]["embed"] == 2 and run["checkpoint"]["own_cpu_s"] > 0
    assert run["slurm_dry_run"]["submissions"] == 8
