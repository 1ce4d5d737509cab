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
    (run,) = benchmark("scale", "--workdir", tmp_path, "--reads", 2000, "--embed-frames")["runs"]
    assert run["reads"] == 2000 and run["frames"] > 0
    for stage in ("prepare", "score", "predict", "call", "summarize", "plot_sample"):
        assert run[stage]["peak_rss_mb"] > 0, stage


def test_report_memory_and_prepare_throughput_run(tmp_path):
    figures = benchmark("report_memory", "--workdir", tmp_path, "--records", 2000)
    assert figures["plot_sample"]["peak_rss_mb"] > 0 and figures["summarize"]["peak_rss_mb"] > 0
    figures = benchmark("prepare_throughput", "--reads", 2000, "--repeats", 1, "--gzip")
    assert figures["input"] == "FASTA, gzip" and figures["reads_per_s"] > 0


def test_paired_prepare_runs(tmp_path):
    figures = benchmark("paired_prepare", "--workdir", tmp_path, "--pairs", 4000, "--repeats", 1)
    for size in (1000, 4000):
        measured = figures[f"at_{size}_pairs"]
        assert measured["paired_over_single_time"] > 0 and measured["paired_peak_rss_mb"] > 0


@pytest.mark.slow
def test_model_load_times_the_checkpoint_and_its_copy(tmp_path):
    figures = benchmark("model_load", "--workdir", tmp_path, "--shape", "tiny")
    assert figures["copy_gb"] is not None  # the first half-precision load wrote the copy
    for case in ("float32", "bfloat16 from .pt", "bfloat16 from copy"):
        for cache in ("cold", "warm"):
            assert figures[f"{case}, {cache}"]["weights_read_s"] >= figures[f"{case}, {cache}"]["seconds"] >= 0
