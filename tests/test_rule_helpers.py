"""What the rules ask of workflow_lib/workflow without running Snakemake: a job's resources and
priority, the model files a config names, the shell commands and the outputs' flags."""

import copy
import hashlib
import json
import os
import re
import shlex
import subprocess

import pandas as pd
import pytest
from helpers import ROOT, SNAKEMAKE, write_config, write_inputs
from snakemake.io import is_flagged
from snakemake.iocontainers import InputFiles, OutputFiles, Wildcards

from harness.stages import DEFAULTS
from workflow_lib.workflow import job_commands, job_resources, model_files, rule_outputs
from workflow_lib.workflow.config_check import Samples, run_settings


def config_with(**models) -> dict:
    """The run's settings with these keys of the models section given."""
    return run_settings({"samples": "samples.tsv", "models": models}, ROOT / "config", [])[0]


def test_a_resource_grows_with_the_named_inputs_that_exist(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 3 * 1024**2)
    (tmp_path / "b").write_bytes(b"x" * 1024**2)
    # as Snakemake names a rule's inputs: esm the first file, dnabert the next two
    inputs = InputFiles([str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "gone")])
    inputs._set_name("esm", 0)
    inputs._set_name("dnabert", 1, end=3)
    # floor + per_gb for each GB, rounded up: 4 MB at 1024 a GB is 4
    assert job_resources.by_input(10, 1024)(None, inputs) == 14
    assert job_resources.by_input(10, 1024, "esm")(None, inputs) == 13
    assert job_resources.by_input(10, 1024, "plan")(None, inputs) == 10  # an input the rule lacks


def test_an_embed_jobs_gpu_memory_covers_the_peaks_measured_on_a_gpu(tmp_path):
    """gpu_mem_mb, the share of a GPU an embed job claims, is at least the peak memory measured on
    an H200 (the GPU check's model part) at each token budget, plus its context allowance, and
    not far above it; in fp32 the model and the batch take twice as much."""
    check = tmp_path / "models.json"
    check.write_text(json.dumps({"esm": {"layers": 36, "dim": 2560}, "dnabert": {"layers": 12, "dim": 768}}))
    measured = json.loads((ROOT / "docs" / "gpu-check" / "model.json").read_text())["model"]
    config = copy.deepcopy(DEFAULTS)
    for model in ("esm", "dnabert"):
        for budget, run in measured[model]["budgets"].items():
            config["models"][model]["token_budget"] = int(budget)
            config["embedding"]["precision"] = "fp16"
            share = job_resources.embed_gpu_mem_mb(model, str(check), config) - job_resources.GPU_CONTEXT_MB
            assert run["peak_memory_gib"] * 1024 <= share <= run["peak_memory_gib"] * 1024 * 1.1, (model, budget)
            config["embedding"]["precision"] = "fp32"
            fp32 = job_resources.embed_gpu_mem_mb(model, str(check), config)
            assert abs(fp32 - job_resources.GPU_CONTEXT_MB - 2 * share) <= 1


def test_a_sample_is_small_up_to_a_gigabyte_of_input(tmp_path):
    """A gigabyte of its files together: two mate files of half as much each are a large sample."""
    small, large, half = tmp_path / "small.fa", tmp_path / "large.fa", tmp_path / "half.fa"
    for path, size in ((small, 0), (large, 1), (half, 1 - job_resources.SMALL_SAMPLE_BYTES // 2)):
        with open(path, "wb") as handle:
            handle.truncate(job_resources.SMALL_SAMPLE_BYTES + size)
    assert job_resources.small_sample((str(small),)) and not job_resources.small_sample((str(large),))
    assert job_resources.small_sample((str(tmp_path / "not_yet.fa"),))
    assert job_resources.small_sample((str(half),)) and not job_resources.small_sample((str(half), str(half)))


def test_embed_jobs_come_shard_by_shard_the_classifiers_training_samples_first():
    training, other = job_resources.embed_priority("0-3", True), job_resources.embed_priority("0-3", False)
    assert training == job_resources.EMBED_PRIORITY - 3 and other == job_resources.EMBED_PRIORITY // 2 - 3
    assert job_resources.embed_priority("1-0", False) > other
    assert job_resources.PRIORITY["plan"] > job_resources.PRIORITY["score"] > training
    assert job_resources.embed_priority(f"0-{job_resources.EMBED_PRIORITY}", True) == 1


def test_local_models_are_inputs_and_remote_ones_fetched_first():
    local = config_with(
        esm={"checkpoint": "models/esm.pt", "layer": 2},
        dnabert={"checkpoint": "models/demo/dnabert_s"},
        classifier="models/classifier.pt",
    )
    assert model_files.local_checkpoints(local) == ["models/demo/dnabert_s", "models/esm.pt"]  # in input order
    assert model_files.local_checkpoints(local, "dnabert") == ["models/demo/dnabert_s"]
    assert model_files.fetched(local) == [] and model_files.fetched_classifier(local) == []
    assert model_files.classifier_file(local) == "models/classifier.pt"

    # a fair-esm name: fetched first; the local DNABERT-S is still an input
    named = config_with(esm={"checkpoint": "esm2_t6_8M_UR50D", "layer": 6}, cache_dir="cache")
    named["models"]["dnabert"] = local["models"]["dnabert"]
    assert model_files.local_checkpoints(named) == ["models/demo/dnabert_s"]
    assert model_files.fetched(named) == ["cache/fetched.json"] == [model_files.fetched_manifest(named)]
    assert model_files.fetched_classifier(named) == []

    # a classifier URL alone: fetched into the cache by a job of its own, which the model check does
    # not wait for; its pin goes to that job alone
    remote = copy.deepcopy(local)
    remote["models"] |= {"classifier": "https://example.org/c.pt", "cache_dir": "cache"}
    remote["models"]["checksums"] = {"c.pt": "a" * 64, "model.safetensors": "b" * 64}
    assert model_files.fetched(remote) == []
    fetched = f"cache/classifier/{hashlib.sha256(b'https://example.org/c.pt').hexdigest()[:16]}/c.pt"
    assert model_files.classifier_file(remote) == fetched  # in a folder of its URL's own
    assert model_files.fetched_classifier(remote) == [fetched]
    assert model_files.pins(remote, classifier=True) == {"c.pt": "a" * 64}
    assert model_files.pins(remote, classifier=False) == {"model.safetensors": "b" * 64}


def test_the_model_check_checks_a_local_classifier_this_run_does_not_train():
    config = config_with(classifier=DEFAULTS["train"]["classifier"])
    assert model_files.trains_here(config, labelled=True)
    assert not model_files.trains_here(config, labelled=False)  # the file is used as it is
    assert model_files.classifier_to_check(config, trains=True)({}, []) == ""
    given = config_with(classifier="models/c.pt")
    assert not model_files.trains_here(given, labelled=True)
    assert model_files.classifier_to_check(given, trains=False)({}, []) == "--classifier models/c.pt"
    # one given by URL: its download, where fetch_classifier has made it by the time of the check
    remote = config_with(classifier="https://example.org/c.pt", cache_dir="cache")
    assert (
        model_files.classifier_to_check(remote, trains=False)({}, [])
        == f"--classifier {model_files.classifier_file(remote)}"
    )


def test_jobs_that_load_models_run_offline_and_share_compiled_kernels():
    config = config_with(cache_dir="my cache")
    assert model_files.model_env(config) == "HF_HUB_OFFLINE=1 TORCH_HOME='my cache/torch'"
    assert model_files.model_env(config, compiles=True).endswith(
        "TORCHINDUCTOR_CACHE_DIR='my cache/compile' TRITON_CACHE_DIR='my cache/compile/triton'"
    )
    config["embedding"] = config["embedding"] | {"compile_cache_dir": "/scratch/kernels"}
    assert "TORCHINDUCTOR_CACHE_DIR=/scratch/kernels " in model_files.model_env(config, compiles=True)
    assert model_files.calibration_file(config_with(calibration=None)) == []
    assert model_files.calibration_file(config_with(calibration="c.json")) == ["c.json"]


def test_a_script_job_runs_through_the_wrapper_into_the_rules_log():
    command = job_commands.script_job("/my checkout", "embed", "--model {wildcards.model}", env="A=1")
    assert command == (
        "bash '/my checkout/scripts/run_logged.sh' {log:q} env A=1 python '/my checkout/scripts/embed.py' "
        "{params} --model {wildcards.model}"
    )
    assert shlex.split(job_commands.script_job("/r", "plan")) == [
        "bash",
        "/r/scripts/run_logged.sh",
        "{log:q}",
        "python",
        "/r/scripts/plan.py",
        "{params}",
    ]


def test_a_jobs_named_files_are_its_scripts_options():
    """A rule names each file once: the job's named inputs and outputs become the script's options,
    lists as their paths, none left out; what a job only waits for goes unnamed."""
    input = InputFiles(["a b.tsv", "x.h5", "y.h5", "plan.tsv"])
    input._set_name("prepared_frames", 0)
    input._set_name("scores", 1, 3)
    input._set_name("calibration", 3, 3)  # none: no option
    output = OutputFiles(["out.tsv"])
    output._set_name("chunks", 0)
    options = job_commands.named_files(None, input, output)
    assert shlex.split(options) == ["--prepared-frames", "a b.tsv", "--scores", "x.h5", "y.h5", "--chunks", "out.tsv"]
    output._set_name("scores", 0)
    with pytest.raises(ValueError, match="share the name scores"):
        job_commands.named_files(None, input, output)


def test_a_jobs_arguments_are_its_options_and_the_settings_that_change_results():
    """params.args: what a rule tells its script besides its files, made from the wildcards alone so
    that Snakemake compares it (a change reruns the job); the tuning goes as a resource."""
    from snakemake.rules import Rule

    from workflow_lib.cli.settings import EmbedSettings

    wildcards = Wildcards(fromdict={"model": "esm", "pool": "0-0"})
    args = job_commands.job_args(
        DEFAULTS,
        lambda w: f"--pool {w.pool}",
        "--fixed",
        input=lambda w: f"shard {w.model}.faa",
        settings=EmbedSettings,
    )
    assert not Rule._is_deriving_function(args) and Rule._is_deriving_function(job_commands.named_files)
    words = shlex.split(args(wildcards))
    assert words[:5] == ["--pool", "0-0", "--fixed", "--input", "shard esm.faa"]
    assert "--checkpoint" in words and "--token-budget" not in words
    tuning = job_commands.tuning_of(EmbedSettings, DEFAULTS)(wildcards)
    assert "--token-budget" in tuning and "--checkpoint" not in tuning
    assert job_commands.job_args(DEFAULTS)(wildcards) == ""


def test_the_run_summary_records_every_setting_that_can_change_results():
    config = copy.deepcopy(DEFAULTS)
    recorded = job_commands.result_config(config)
    assert config == DEFAULTS  # left as it was
    assert "pending_check_seconds" not in recorded and "progress_seconds" not in recorded
    assert "token_budget" not in str(recorded) and "assumed_tokens_per_s" not in str(recorded)
    assert recorded["chunk_length"] == config["chunk_length"]
    assert recorded["models"]["esm"]["checkpoint"] == config["models"]["esm"]["checkpoint"]
    assert recorded["models"]["embedders"] == ["dnabert", "esm"]


def test_tables_are_attached_to_the_report_while_all_of_them_are_small(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tables = {"chunks": "results/{sample}/chunks.tsv", "sequences": "results/{sample}/sequences.tsv"}
    for sample in ("a", "b"):
        os.makedirs(f"results/{sample}")
        for table in tables.values():
            with open(table.format(sample=sample), "wb") as handle:
                handle.truncate(300 * 1024)
    config = config_with()
    config["report"] = config["report"] | {"max_attached_mb": 1.2}  # 4 tables of 0.29 MB
    assert is_flagged(rule_outputs.attached_table(tables, ["a", "b"], config, "chunks", "the chunks"), "report")
    config["report"]["max_attached_mb"] = 1.1
    attached = rule_outputs.attached_table(tables, ["a", "b"], config, "chunks", "the chunks")
    assert attached == tables["chunks"] and not is_flagged(attached, "report")


def test_embeddings_and_their_shards_are_temporary_unless_kept():
    config = config_with()
    config["outputs"] = config["outputs"] | {"keep_embeddings": False}
    assert is_flagged(rule_outputs.temp_unless_kept(config, "e.h5"), "temp")
    config["outputs"]["keep_embeddings"] = True
    assert not is_flagged(rule_outputs.temp_unless_kept(config, "e.h5"), "temp")


def test_a_samples_pages_are_flagged_for_its_part_of_the_report():
    page = rule_outputs.sample_page("calls.png", "calls.rst", "Predictions", "calls")
    assert str(page) == "results/{sample}/report/calls.png"
    report = page.flags["report"]
    assert (report.caption, report.category, report.subcategory) == ("../report/calls.rst", "Predictions", "{sample}")


def test_samples_by_generation_and_the_training_ones():
    table = pd.DataFrame(
        {"path": ["a.fa", "b.fa", "c.fa", "cal.fa"], "label": ["virus", "", "other", "virus"]},
        index=["a", "b", "c", "cal"],
    )
    samples = Samples(table, ["a", "b", "c"], table.loc[["cal"]], {"a": 0, "b": 1, "c": 0, "cal": 1}, True)
    assert samples.of_generation("0") == ["a", "c"] and samples.of_generation(1) == ["b", "cal"]
    assert samples.training() == ["a", "c"]  # the sheet's labelled samples: not the calibration sample


# A Snakefile that loads the workflow and writes what each rule declares (declared.json), the SLURM
# profile's defaults filled in: whether it runs on the submit host, its threads, and its mem_mb,
# runtime and gpu: a number, [floor, per GB] for one that grows with its input
# (job_resources.by_input), null for one the plan decides.
DECLARED = """
import json


include: {snakefile!r}


class _Input(list):
    def __getattr__(self, name):
        return list(self)


def _declared(resource):
    if not resource.is_evaluable():
        return resource.value
    try:
        at = [resource.evaluate(None, input=_Input(files)).value for files in ([], [{gib!r}])]
    except AttributeError:
        return None
    return [at[0], at[1] - at[0]]


kept = ("mem_mb", "runtime", "gpu")
with open("declared.json", "w") as out:
    json.dump({{
        r.name: {{"local": r.name in workflow._localrules, "threads": r.resources["_cores"].value}}
        | {{k: _declared(v) for k, v in r.resources.items() if k in kept}}
        for r in workflow.rules
    }}, out)
"""


def _cell(value, unit: str) -> str | None:
    """The table's words for a declared resource (None: decided by the plan, not checked)."""
    if value is None or isinstance(value, int):
        return value if value is None else _amount(value, unit)
    floor, per_gb = value
    return _amount(floor, unit) + (f" + {_amount(per_gb, unit)}/GB" if per_gb else "")


def _amount(value: int, unit: str) -> str:
    """Minutes, or MB as the table writes them: whole GB (of 1,000 or 1,024 MB) as GB."""
    if unit == "min":
        return f"{value} min"
    for gb in (1000, 1024):
        if value % gb == 0:
            return f"{value // gb} GB"
    return f"{value} MB"


def test_the_resource_table_of_docs_cluster_is_what_the_rules_declare(tmp_path):
    """Every rule that runs as a cluster job has its row, whose threads, memory, runtime and GPU
    are those its rule declares (a cell naming a config key is checked for its number only where
    it gives one); what a rule leaves to the profile, the profile's default."""
    write_inputs(tmp_path)
    (tmp_path / "calibration.tsv").write_text(
        "sample\tpath\tlabel\n" + f"cal\t{tmp_path / 'inputs' / 'phix.fa'}\tvirus\n"
    )
    config = write_config(tmp_path, calibration={"samples": str(tmp_path / "calibration.tsv")})
    with open(tmp_path / "gib", "wb") as handle:
        handle.truncate(1 << 30)
    (tmp_path / "declared.smk").write_text(
        DECLARED.format(snakefile=str(ROOT / "Snakefile"), gib=str(tmp_path / "gib"))
    )
    command = [*SNAKEMAKE[:3], "--snakefile", str(tmp_path / "declared.smk"), "--directory", str(tmp_path), "-n"]
    command += ["--configfile", str(config), "--profile", str(ROOT / "profiles" / "slurm")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    declared = json.loads((tmp_path / "declared.json").read_text())
    text = (ROOT / "docs" / "cluster.md").read_text()
    rows = re.findall(r"^\| `(\w+)`[^|]*\|([^|]*)\|([^|]*)\|([^|]*)\|([^|]*)\|$", text, re.M)
    assert sorted(name for name, *_ in rows) == sorted(r for r, d in declared.items() if not d["local"] and r != "all")
    for name, threads, memory, runtime, gpu in rows:
        rule = declared[name]
        assert re.search(rf"\b{rule['threads']}\b", threads), (name, threads)
        for key, cell, unit in (("mem_mb", memory, "MB"), ("runtime", runtime, "min")):
            expected = _cell(rule[key], unit)
            if expected is not None and "`" not in cell:
                assert cell.strip().startswith(expected), (name, cell, expected)
        if rule.get("gpu", 0) is not None:
            assert gpu.strip() == str(rule.get("gpu", "")), (name, gpu)
