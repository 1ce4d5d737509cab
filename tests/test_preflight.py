"""The preflight target and the rates it and the embed jobs record: a real Snakemake run of the
preflight on the CPU with the demo models, then dry runs whose embed jobs ask for runtimes at the
recorded rates; the rate store under several writers; the choice of a rate."""

import json
import logging
import multiprocessing
import re
import subprocess
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
import yaml
from helpers import ENV, ROOT, SNAKEMAKE, seed_demo_models, write_config, write_inputs

from workflow_lib.embed import rates
from workflow_lib.workflow import job_resources

CONFIG = {"embedding": {"device": "cpu"}, "shard_tokens": 4000}


@pytest.fixture(scope="module")
def preflighted(tmp_path_factory, demo_models) -> Path:
    """A work directory where `snakemake preflight` ran, on the CPU, with the demo models built
    (helpers.seed_demo_models)."""
    workdir = tmp_path_factory.mktemp("preflight")
    write_inputs(workdir)
    seed_demo_models(demo_models["esm"].parent, workdir)
    config = write_config(workdir, **CONFIG)
    command = SNAKEMAKE + ["--directory", str(workdir), f"--configfile={config}", "preflight"]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "the preflight runs on the CPU" in result.stderr  # its warning, on the console
    for model in ("esm", "dnabert"):  # and its figures, at the run's end
        assert re.search(
            rf"^preflight: {model}: [0-9,]+ shard tokens/s on cpu; .* asks for \d+ min", result.stderr, re.M
        )
    return workdir


def recorded_rates(workdir: Path) -> dict[str, dict]:
    """Per model, its key and its rate file, from the preflight's report."""
    report = json.loads((workdir / "results" / "preflight.json").read_text())["models"]
    cache = workdir / "models" / "cache" / "rates"
    return {model: found | {"file": cache / found["model_key"] / "cpu.json"} for model, found in report.items()}


def test_the_preflight_reports_each_models_rate_and_records_it(preflighted):
    found = recorded_rates(preflighted)
    assert sorted(found) == ["dnabert", "esm"]
    for model in found.values():
        assert model["device"] == "cpu" and model["memory"] == "not applicable on the CPU"
        assert model["batches"] > 1 and model["tokens_per_s"] > 0
        assert model["shard_tokens"] == 4000
        assert model["shard_runtime_request_minutes"] == job_resources.embed_minutes(4000, model["tokens_per_s"])
        stored = json.loads(model["file"].read_text())
        assert stored == {"model": model["model_key"], "device": "cpu", "rates": [model["tokens_per_s"]]}


def embed_requests(workdir: Path, config: Path, *options: str) -> dict[str, list[tuple[int, int]]]:
    """Per model, (planned tokens, runtime) of each embed job of a dry run under the SLURM profile."""
    command = [*SNAKEMAKE[:5], "--directory", str(workdir), "--configfile", str(config), "-n", *options]
    dry = subprocess.run(command + ["--profile", str(ROOT / "profiles" / "slurm")], capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr[-3000:]
    found = {}
    for job in re.split(r"\n(?:local)?rule ", dry.stdout + dry.stderr):
        if job.startswith("embed:"):
            model = re.search(r"wildcards: model=(\w+)", job)[1]
            tokens, runtime = (int(re.search(rf"\b{name}=(\d+)", job)[1]) for name in ("planned_tokens", "runtime"))
            found.setdefault(model, []).append((tokens, runtime))
    return found


def assert_asked_at(requests: dict, rates_by_model: dict) -> None:
    assert sorted(requests) == sorted(rates_by_model)
    for model, jobs in requests.items():
        assert [runtime for _, runtime in jobs] == [
            job_resources.embed_minutes(tokens, rates_by_model[model]) for tokens, _ in jobs
        ]


@pytest.mark.slow
def test_embed_jobs_ask_for_runtimes_at_the_recorded_rate(preflighted):
    """After the preflight, the plan's embed jobs ask for runtimes at its rates; a slower rate
    recorded, longer ones; with embedding.device auto, at the slowest GPU's, or at the one the
    profile's gpu_model names."""
    config = preflighted / "config.yaml"
    planned = subprocess.run(
        SNAKEMAKE + ["--directory", str(preflighted), "--configfile", str(config), "--until", "plan"],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert planned.returncode == 0, planned.stderr[-3000:]
    found = recorded_rates(preflighted)
    assert_asked_at(embed_requests(preflighted, config), {m: f["tokens_per_s"] for m, f in found.items()})

    for model in found.values():  # a slower rate, as KEPT jobs would record it
        for _ in range(rates.KEPT):
            rates.record(str(preflighted / "models" / "cache"), model["model_key"], "cpu", 2)
    slow = embed_requests(preflighted, config)
    assert_asked_at(slow, {"esm": 2, "dnabert": 2})
    assert slow["esm"][0][1] > job_resources.embed_minutes(slow["esm"][0][0], found["esm"]["tokens_per_s"])

    on_gpu = preflighted / "gpu.yaml"
    on_gpu.write_text(yaml.safe_dump(yaml.safe_load(config.read_text()) | {"embedding": {"device": "auto"}}))
    for model in found.values():
        for device, rate in (("NVIDIA H100 80GB HBM3", 30), ("NVIDIA A100-SXM4-80GB", 10)):
            rates.record(str(preflighted / "models" / "cache"), model["model_key"], device, rate)
    assert_asked_at(embed_requests(preflighted, on_gpu), {"esm": 10, "dnabert": 10})
    named = embed_requests(preflighted, on_gpu, "--set-resources", "embed:gpu_model=h100")
    assert_asked_at(named, {"esm": 30, "dnabert": 30})


def test_several_jobs_recording_at_once_leave_a_whole_file(tmp_path):
    writes = [(str(tmp_path), "esm2-2x64-fp16", "NVIDIA H100", rate) for rate in range(100, 140)]
    with ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(rates.record, *zip(*writes)))
    stored = json.loads((tmp_path / "rates" / "esm2-2x64-fp16" / "NVIDIA_H100.json").read_text())
    assert stored["device"] == "NVIDIA H100" and len(stored["rates"]) == rates.KEPT
    assert set(stored["rates"]) <= set(range(100, 140))
    assert rates.recorded(str(tmp_path), "esm2-2x64-fp16") == {"NVIDIA H100": sorted(stored["rates"])[2]}


def test_a_cache_it_cannot_write_to_is_said_in_one_line(tmp_path, caplog):
    (tmp_path / "file").write_text("")
    with caplog.at_level(logging.WARNING, logger="workflow"):
        rates.record(str(tmp_path / "file"), "esm2-2x64-fp16", "cpu", 100)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"the rate of esm2-2x64-fp16 on cpu is not recorded in {tmp_path}/file/rates/esm2-2x64-fp16"
    ]


def test_a_job_is_planned_at_the_slowest_gpu_or_the_named_one(tmp_path):
    check = tmp_path / "models.json"
    check.write_text(json.dumps({"esm": {"architecture": "esm2", "layers": 36, "dim": 2560}}))
    config = {
        "models": {"cache_dir": str(tmp_path), "esm": {"assumed_tokens_per_s": {"cuda": 19000, "cpu": 200}}},
        "embedding": {"device": "auto", "precision": "fp16"},
    }
    assert job_resources.embed_rate("esm", str(check), config) == 19000  # none recorded: the default
    for device, rate in (("NVIDIA H100 80GB HBM3", 80000), ("NVIDIA A100-SXM4-40GB", 30000), ("cpu", 300)):
        rates.record(str(tmp_path), "esm2-36x2560-fp16", device, rate)
    rates.record(str(tmp_path), "esm2-36x2560-fp16", "NVIDIA A100-SXM4-40GB", 20000)  # the median of its last
    assert job_resources.embed_rate("esm", str(check), config) == 25000
    assert job_resources.embed_rate("esm", str(check), config, "H100") == 80000
    assert job_resources.embed_rate("esm", str(check), config, "v100") == 19000  # not recorded: the default
    on_cpu = config | {"embedding": {"device": "cpu", "precision": "fp16"}}
    assert job_resources.embed_rate("esm", str(check), on_cpu) == 300
    in_bf16 = config | {"embedding": {"device": "auto", "precision": "bf16"}}
    assert job_resources.embed_rate("esm", str(check), in_bf16) == 19000  # another model key


def test_a_broken_rate_file_fails_neither_the_plan_nor_the_job(tmp_path):
    """A file edited by hand (not JSON, or a zero rate) counts for nothing when planning, and the
    next job's record replaces it."""
    directory = tmp_path / "rates" / "esm2-2x64-fp16"
    directory.mkdir(parents=True)
    (directory / "cpu.json").write_text("{not json")
    (directory / "NVIDIA_H100.json").write_text(json.dumps({"device": "NVIDIA H100", "rates": [0]}))
    assert rates.recorded(str(tmp_path), "esm2-2x64-fp16") == {}
    rates.record(str(tmp_path), "esm2-2x64-fp16", "cpu", 100)
    assert rates.recorded(str(tmp_path), "esm2-2x64-fp16") == {"cpu": 100}
