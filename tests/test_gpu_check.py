"""The GPU check's CPU dry run: benchmarks/gpu_check.py's parts, as documented, on tiny shapes; and
docs/gpu-check.md's table of GPU figures, as benchmarks/gpu_table.py prints it from the JSONs."""

import json
import subprocess
import sys
import time

import pytest
from helpers import ENV, ROOT

from workflow_lib.models import esm

sys.path.insert(0, str(ROOT / "benchmarks"))
from gpu_check import LEVER_PLANS  # noqa: E402
from gpu_table import table  # noqa: E402

# One thread for torch's ops: on the tiny shapes a second one mostly spins, taking a core from the
# other test worker. The jobs whose sums depend on it (embed, score, train) set their own.
CHECK_ENV = ENV | {"OMP_NUM_THREADS": "1"}
SMALL = {
    "equivalence": ["--reads", "300", "--equivalence-frames", "10", "--budget", "2048"],
    "model": ["--reads", "300", "--frames", "100", "--sweep", "1024", "4096"],
    "workflow": ["--workflow-reads", "200", "--cold-reads", "100", "--budget", "2048", "--dnabert-budget", "2048"],
}


def gpu_check(part: str, tmp_path) -> list[str]:
    """The part's command on the CPU, tiny shapes, its checkpoints made under tmp_path."""
    script = str(ROOT / "benchmarks" / "gpu_check.py")
    return [sys.executable, script, "--part", part, "--device", "cpu", "--tiny", "--models", str(tmp_path / "models")]


def run_part(part: str, tmp_path, options: list[str] | None = None) -> dict:
    out = tmp_path / f"{part}.json"
    options = SMALL[part] if options is None else options
    result = subprocess.run(
        gpu_check(part, tmp_path) + options + ["--out", str(out)], capture_output=True, text=True, env=CHECK_ENV
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["part"] == part and figures["device"] == "cpu" and figures["tiny"]
    return figures[part]


@pytest.mark.slow
def test_model_part(tmp_path):
    """The models alone, warm-up excluded, over the token-budget sweep: every step's figures."""
    figures = run_part("model", tmp_path)
    assert list(figures) == ["esm", "dnabert"]  # no levers unless asked
    for model in ("esm", "dnabert"):
        assert figures[model]["frames"] == 100 and set(figures[model]["budgets"]) == {"1024", "4096"}
        for run in figures[model]["budgets"].values():
            assert run["tokens_per_s"] > 0 and run["batches"] >= 1 and run["mfu"] is None  # no peak for a CPU


@pytest.mark.slow
def test_all_parts_in_one_command(tmp_path):
    """A GPU session's one command, dry run: the model part with ESM-2's levers and FP8 (eager: the
    CPU computes them all, FP8 GEMMs included), the workflow's runs (the embed jobs sharing the GPU
    and with a whole one each) and equivalence, each part's JSON beside
    all.json. No cold run: on the CPU nothing is compiled or copied, so it would be the warm one
    again (the deadline test names it)."""
    options = ["--reads", "300", "--frames", "12", "--sweep", "1024", "--lever-frames", "6", "--budget", "2048"]
    options += ["--dnabert-budget", "2048", "--workflow-reads", "100", "--cold-reads", "0"]  # the CPU's runs alike
    options += ["--equivalence-frames", "10", "--out", str(tmp_path / "all.json")]
    result = subprocess.run(gpu_check("all", tmp_path) + options, capture_output=True, text=True, env=CHECK_ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    parts = json.loads((tmp_path / "all.json").read_text())["parts"]
    assert parts == {"model": "done", "workflow": "done", "equivalence": "done"}
    figures = {part: json.loads((tmp_path / f"{part}.json").read_text())[part] for part in parts}

    levers = figures["model"]["levers"]
    assert levers["frames"] == 12 and levers["cosine_frames"] == 6 and levers["compiled"] is False  # eager on a CPU
    runs = levers["runs"]
    assert list(runs) == list(LEVER_PLANS)
    for name, run in runs.items():
        assert run["tokens_per_s"] > 0 and run["over_none"] > 0, name
        assert run["t2"]["min_cosine"] > 0.99999 and run["t3"]["min_cosine"] > 0.9999, name
        assert (run["pays"] is None) == (not run["levers"] and not run["fp8"]), name  # nothing to weigh
    # every lever is exact here: those kept are those that paid (on a busy CPU, any or none)
    assert set(runs["kept"]["levers"]) == {n for n in esm.LEVERS if runs[n]["pays"]}
    # FP8 only in t3's middle layer (t2's two layers are its first and last), so only there does it move
    for run in ("fp8", "fp8, fast accumulation"):
        assert runs[run]["fp8"] and runs[run]["t2"]["max_abs_diff"] == 0 < runs[run]["t3"]["max_abs_diff"]
        assert 0 <= runs[run]["t3"]["calls_changed"] <= 1 and runs[run]["t2"]["calls_changed"] == 0
    assert runs["fp8, fast accumulation"]["fast_accum"] and not runs["fp8"]["fast_accum"]

    workflow = figures["workflow"]
    assert list(workflow["runs"]) == ["warm_100", "warm_100_whole"]
    for run in workflow["runs"].values():
        assert run["reads"] == 100 and run["reads_per_hour"] > 0
        assert run["embed_jobs"] == 2 and run["gpu_sm_busy_share"] is None and run["model_check_s"] >= 0
        assert {job.split("_shard")[0] for job in run["embed_job"]} == {"esm", "dnabert"}
        assert all(job["startup_s"] > 0 and job["load_seconds"] > 0 for job in run["embed_job"].values())
    assert "embed:gpu=0" in workflow["runs"]["warm_100"]["snakemake_options"]
    assert "embed:gpu=1" in workflow["runs"]["warm_100_whole"]["snakemake_options"]
    assert workflow["runs"]["warm_100_whole"]["embed_jobs_overlap_seconds"] <= 1  # log times are to the second
    assert set(workflow["shared_over_whole"]) == {"seconds", "embed_seconds"}
    preflight = workflow["preflight"]  # the preflight target, as a user runs it on a GPU node
    assert preflight["device"] == "cpu" and set(preflight["models"]) == {"esm", "dnabert"}
    assert all(model["tokens_per_s"] > 0 and model["batches"] > 1 for model in preflight["models"].values())

    equivalence = figures["equivalence"]
    for shape in ("t2", "t3"):
        runs = equivalence["esm"][shape]["runs"]
        assert set(runs) == {"fp16", "bf16"}
        for run in runs.values():
            assert run["min_cosine"] > 0.999 and run["attention"] == "sdpa by sequence length"
            assert set(run["edge"]) == {"1 residue", "1022 residues", "1100 residues", "X/B/Z/U/O", "<mask>"}
    assert equivalence["dnabert"]["max_tokens"] > 512  # past DNABERT-S's ALiBi starting size
    assert all(run["min_cosine"] > 0.999 for run in equivalence["dnabert"]["runs"].values())
    assert set(equivalence["dnabert"]["runs"]) == {"fp16", "bf16"}
    assert equivalence["dnabert_fixture"]["runs"]["fp32"]["max_abs_diff"] < 1e-5


def documented_command(tmp_path, deadline: int) -> list[str]:
    """docs/gpu-check.md's one command (--part all), as a CPU dry run: tiny shapes, `deadline`."""
    text = (ROOT / "docs" / "gpu-check.md").read_text()
    start = text.index("benchmarks/gpu_check.py --part all")
    words = text[start : text.index("\n    #", start)].replace("\\\n", " ").split()
    at = words.index("--deadline-seconds")
    words[at + 1] = str(deadline)
    words = [w.replace("$OUT", str(tmp_path)) for w in words]
    dry_run = ["--device", "cpu", "--tiny", "--models", str(tmp_path / "models")]
    return [sys.executable, str(ROOT / words[0]), *words[1:], *dry_run]


@pytest.mark.slow
def test_the_documented_command_ends_within_15_s_of_its_deadline_most_decisive_first(tmp_path):
    """The one command of a GPU session, dry run with a deadline of 60 s: it ends within 75 s of its
    start whatever it was asked (here far more than a CPU does in a minute), each part in its share of
    the time; all.json, written after every step, holds what each part measured, the lever runs in
    their order of decision (default forward, plain, FP8 without and with fast accumulation, ...)."""
    start = time.monotonic()
    result = subprocess.run(
        documented_command(tmp_path, 60), capture_output=True, text=True, env=CHECK_ENV, timeout=300
    )
    seconds = time.monotonic() - start
    assert seconds <= 75 and result.returncode == 0, (seconds, result.stderr[-3000:])
    summary = json.loads((tmp_path / "all.json").read_text())
    parts = summary["parts"]
    assert list(parts) == ["model", "workflow", "equivalence"], parts
    assert set(parts.values()) <= {"done", "cut: the deadline", "skipped: the deadline"}, parts
    model = summary["model"]
    # the models alone first, ESM-2 (the embed job's forward) before DNABERT-S, then the levers
    assert model["step_seconds"] and list(model["model"]) == ["esm", "dnabert", "levers"][: len(model["model"])]
    if parts["model"] != "done":
        assert model["cut_by_deadline"]
    runs = list(model["model"].get("levers", {}).get("runs", {}))
    assert runs == list(LEVER_PLANS)[: len(runs)]
    for part in parts:  # each part's own JSON holds the same figures
        if parts[part] != "skipped: the deadline":
            assert json.loads((tmp_path / f"{part}.json").read_text())[part] == summary[part][part]


@pytest.mark.slow
def test_a_part_killed_midway_keeps_what_it_measured(tmp_path):
    """The JSON is rewritten after every step: killed once its first model shape is measured, the
    part leaves a file that parses and holds that shape's figures."""
    out = tmp_path / "equivalence.json"
    part = subprocess.Popen(
        gpu_check("equivalence", tmp_path) + [*SMALL["equivalence"], "--out", str(out)],
        env=CHECK_ENV,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in part.stderr:  # the step after the first shape starts once that shape is saved
        if "step: ESM-2 t3" in line:
            part.kill()
            break
    part.wait(timeout=60)
    figures = json.loads(out.read_text())
    assert set(figures["equivalence"]["esm"]) == {"t2"} and "ESM-2 t2" in figures["step_seconds"]
    assert "part_seconds" not in figures


@pytest.mark.slow
def test_a_failing_step_exits_nonzero_names_it_and_keeps_its_logs(tmp_path):
    out = tmp_path / "workflow.json"
    command = gpu_check("workflow", tmp_path) + SMALL["workflow"]
    command += ["--shard-tokens", "0", "--out", str(out)]  # the config check fails
    result = subprocess.run(command, capture_output=True, text=True, env=CHECK_ENV)
    assert result.returncode == 1
    figures = json.loads(out.read_text())
    assert figures["failed_step"] == "snakemake, cold" and "the workflow failed" in figures["error"]
    kept = tmp_path / "workflow_logs" / "cold" / "snakemake.log"
    assert "shard_tokens: 0 is less than the minimum of 1" in kept.read_text()


def test_the_docs_table_is_the_one_the_jsons_give():
    """docs/gpu-check.md's GPU figures are one table, the one benchmarks/gpu_table.py prints from
    docs/gpu-check/*.json: a figure there that no JSON holds, or a JSON left out, fails here."""
    text = (ROOT / "docs" / "gpu-check.md").read_text()
    start = text.index("| figure | value | measured |")
    assert text[start : text.index("\n\n", start) + 1] == table(ROOT / "docs" / "gpu-check")
