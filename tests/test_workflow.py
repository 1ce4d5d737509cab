"""The whole workflow run for real by Snakemake: prepare, model check, embed, train, predict."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import yaml
from helpers import (
    EMBEDDING_TOLERANCE,
    ENV,
    GENOMES,
    ROOT,
    SAMPLES,
    SCORE_TOLERANCE,
    SNAKEMAKE,
    job_counts,
    read_embeddings,
    read_fasta,
    read_tsv,
    seed_demo_models,
    write_config,
    write_inputs,
)

from workflow_lib.embed import rates
from workflow_lib.io import locks
from workflow_lib.io.seqio import read_records
from workflow_lib.io.sharding import BIN_COUNTS, BINS, SKETCH, sketch, write_bins
from workflow_lib.models import classifier
from workflow_lib.prepare.plan import cut, distinct_tokens, pack, read_plans
from workflow_lib.workflow import job_resources


@pytest.mark.slow
def test_tables_cover_every_record_and_frame(workflow_run):
    workdir, _ = workflow_run
    for sample in SAMPLES:
        results = workdir / "results" / sample
        source = next((workdir / "inputs").glob(f"{sample}.*"))
        records = [record_id for record_id, _, _ in read_records(source)]
        assert [r["sequence_id"] for r in read_tsv(results / "sequences.tsv")] == records
        prepared = [f["frame_id"] for f in read_tsv(results / "prepare" / "frames.tsv.gz")]
        assert [f["frame_id"] for f in read_tsv(results / "frames.tsv")] == prepared
        for name in ("chunks.tsv", "viral.fasta", "prediction_results.txt", "prediction_results_highestscore.csv"):
            assert (results / name).exists()
        pieces = read_plans(workdir / "results" / "plan")[0][sample]
        assert sum(p["frames"] for p in pieces) == len(prepared)
        for model, suffix in (("esm", "faa"), ("dnabert", "fna")):
            ids = {}  # each shard's rows of its pooled shards' embeddings, piece by piece
            for piece in pieces:
                pooled = workdir / "results" / "shards" / "embeddings" / model / f"shard_{piece['pool']}.h5"
                with h5py.File(pooled) as h5:
                    rows = h5["ids"][piece["offset"] : piece["offset"] + piece["frames"]]
                ids.setdefault(piece["shard"], []).extend(i.decode() for i in rows)
            assert sorted(ids) == list(range(len(ids)))
            for shard, shard_ids in ids.items():
                fasta = results / "prepare" / "shards" / f"shard_{shard}.{suffix}"
                assert shard_ids == [fid for fid, _ in read_fasta(fasta)]
    pools = read_plans(workdir / "results" / "plan")[1]
    assert any(len({p["sample"] for p in pieces}) > 1 for pieces in pools.values())  # small samples share


@pytest.mark.slow
def test_one_table_counts_every_sample(workflow_run):
    """results/report/samples.tsv: per sample, its records, calls, chunks and viral bases, as its tables say."""
    workdir, _ = workflow_run
    table = {row["sample"]: row for row in read_tsv(workdir / "results" / "report" / "samples.tsv")}
    assert sorted(table) == sorted(SAMPLES)
    for sample in SAMPLES:
        sequences = read_tsv(workdir / "results" / sample / "sequences.tsv")
        virus = [s for s in sequences if s["call"] == "virus"]
        expected = {
            "records": len(sequences),
            "bases": sum(int(s["length"]) for s in sequences),
            **{call: sum(s["call"] == call for s in sequences) for call in ("virus", "other", "no_coding_frame")},
            "chunks": sum(int(s["n_chunks"]) for s in sequences),
            "chunks_scored": sum(int(s["n_chunks_scored"]) for s in sequences),
            "viral_chunks": sum(int(s["n_viral_chunks"]) for s in sequences),
            "viral_bases": sum(int(s["length"]) for s in virus),
        }
        assert {key: int(table[sample][key]) for key in expected} == expected, sample


@pytest.mark.slow
def test_reads_sample_is_called_per_read(workflow_run):
    workdir, _ = workflow_run
    calls = read_tsv(workdir / "results" / "reads" / "sequences.tsv")
    assert len(calls) == 120 and {c["call"] for c in calls} <= {"virus", "other", "no_coding_frame"}
    assert read_tsv(workdir / "results" / "mito" / "sequences.tsv")[0]["n_chunks"] == "56"


@pytest.mark.slow
def test_trained_classifier_and_metrics(workflow_run):
    workdir, _ = workflow_run
    model, metadata = classifier.load(workdir / "results" / "train" / "classifier.pt")
    assert model.input_dim == 48 + 64 and metadata["chunk_length"] == 300
    metrics = yaml.safe_load((workdir / "results" / "train" / "metrics.json").read_text())
    assert set(metrics["validation"]) >= {"accuracy", "precision", "recall", "f1", "roc_auc"}


@pytest.mark.slow
def test_every_rule_logs_and_rerun_is_a_no_op(workflow_run):
    """Each rule's log is written; a second run of the same config has nothing to do, and no
    warning at start-up (its config is that of the results: test_a_config_unlike_the_results...)."""
    workdir, config = workflow_run
    for log in (
        "check_models.log",
        "build_demo_models.log",
        "train.log",
        "prepare/reads.log",
        "predict/reads.log",
        f"embed/esm_{read_plans(workdir / 'results' / 'plan')[0]['reads'][1]['pool']}.log",
    ):
        assert (workdir / "logs" / log).stat().st_size > 0
    assert "tokens/s" in (workdir / "logs" / log).read_text()
    dry = subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(config), "-n"],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr
    assert "Warning" not in dry.stdout + dry.stderr


@pytest.mark.slow
def test_the_embed_jobs_record_their_rates(workflow_run):
    """Each model's embed jobs recorded their steady rates in models.cache_dir (on the CPU here),
    where the next plan's embed runtimes come from (tests/test_preflight.py)."""
    cache = workflow_run[0] / "models" / "cache" / "rates"
    found = {path.parent.name: json.loads(path.read_text()) for path in cache.glob("*/cpu.json")}
    assert sorted(found) == ["dnabert_s-2x48-fp16", "esm2-2x64-fp16"]  # the demo models' shapes, fp16 configured
    for recorded in found.values():
        assert recorded["device"] == "cpu" and 0 < len(recorded["rates"]) <= rates.KEPT and min(recorded["rates"]) > 0


@pytest.mark.slow
def test_wrong_classifier_stops_before_any_embedding(workflow_run, tmp_path):
    """The check's one-line error reaches the console, once: a deterministic failure is not retried,
    (only embed jobs are retried), also under a profile (profiles/local). (The demo models are
    workflow_run's: helpers.seed_demo_models.)"""
    write_inputs(tmp_path)
    seed_demo_models(workflow_run[0] / "resources" / "demo_models", tmp_path)
    # one sample: the check fails while its prepare job runs
    (tmp_path / "samples.tsv").write_text(f"sample\tpath\nphix\t{tmp_path / 'inputs' / 'phix.fa'}\n")
    torch.manual_seed(0)
    # DNABERT-S 768 + ESM-2 3B 2560
    classifier.save(classifier.MLPClassifier(3328), tmp_path / "virnucpro_sized.pt", chunk_length=300)
    config = write_config(tmp_path, classifier=str(tmp_path / "virnucpro_sized.pt"))
    command = SNAKEMAKE + ["--directory", str(tmp_path), "--configfile", str(config)]
    result = subprocess.run(
        command + ["--profile", str(ROOT / "profiles" / "local")], capture_output=True, text=True, env=ENV
    )
    assert result.returncode != 0
    message = "takes 3328 features but the configured models give 48 (dnabert) + 64 (esm) = 112"
    assert message in (tmp_path / "logs" / "check_models.log").read_text()
    assert [line for line in result.stderr.splitlines() if message in line] == [
        f"error: {tmp_path / 'virnucpro_sized.pt'}: the classifier {message}; use the classifier trained for these "
        "models (VirNucPro's: DNABERT-S 768 + ESM-2 3B 2560) or train one"
    ]
    assert "Trying to restart" not in result.stderr
    assert not list(tmp_path.glob("results/*/embeddings/*/*.h5"))


def snakemake_dry_run(
    workdir: Path, config: Path, tmp_path: Path, *options: str, **changes
) -> tuple[str, dict[str, int]]:
    """`snakemake -n` with the run's config changed: (its output, jobs per rule); with `options`
    (`--until`, a target) instead of -n, a real run."""
    settings = yaml.safe_load(config.read_text())
    for key, value in changes.items():
        settings[key] = {**settings.get(key, {}), **value} if isinstance(value, dict) else value
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(settings))
    result = subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(changed), *(options or ["-n"])],
        capture_output=True,
        text=True,
        env=ENV,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    return output, job_counts(output)


@pytest.mark.slow
def test_settings_that_cannot_change_results_rerun_nothing(workflow_run, tmp_path):
    workdir, config = workflow_run
    runtime = {"num_workers": 1, "prefetch_factor": 4, "commit_seconds": 5, "expandable_segments": False}
    runtime |= {"embed_copies": True}
    runtime |= {"compile_cache_dir": str(tmp_path / "kernels")}
    models = yaml.safe_load(config.read_text())["models"]
    budgets = {"esm": 1024, "dnabert": 4096}
    rates = {"cuda": 10, "cpu": 1}
    models = {m: models[m] | {"token_budget": b, "assumed_tokens_per_s": rates} for m, b in budgets.items()}
    output, jobs = snakemake_dry_run(workdir, config, tmp_path, progress_seconds=7, embedding=runtime, models=models)
    assert "Nothing to be done" in output and jobs == {}


@pytest.mark.slow
def test_a_threshold_or_classifier_change_reruns_predict_not_the_embeddings(workflow_run, tmp_path):
    workdir, config = workflow_run
    _, jobs = snakemake_dry_run(workdir, config, tmp_path, predict={"min_viral_fraction": 0.9})
    assert jobs["call"] == len(SAMPLES) and not {"embed", "prepare", "train", "check_models", "predict"} & jobs.keys()
    # with the embeddings gone (outputs.keep_embeddings: false), a new threshold needs none of them
    gone = tmp_path / "gone"
    shutil.copytree(workdir, gone, symlinks=True)
    for h5 in gone.glob("results/shards/embeddings/*/*.h5"):
        h5.unlink()
    _, jobs = snakemake_dry_run(
        gone, config, tmp_path, predict={"min_viral_fraction": 0.9}, outputs={"keep_embeddings": False}
    )
    assert jobs["call"] == len(SAMPLES) and not {"embed", "predict"} & jobs.keys()
    # a classifier swap (the same weights under another path): the scores and tables, and no
    # embedding; the model check (of the embedding models) and the plans stand
    other = tmp_path / "other_classifier.pt"
    shutil.copy(workdir / "results" / "train" / "classifier.pt", other)
    swap = {"models": {"classifier": str(other)}}
    pools = len(read_plans(workdir / "results" / "plan")[1])
    _, jobs = snakemake_dry_run(workdir, config, tmp_path, **swap)
    assert jobs["score"] == pools and jobs["predict"] == len(SAMPLES)
    assert not {"embed", "prepare", "plan", "train", "check_models"} & jobs.keys()
    # the classifier's chunk length stated (checked at start-up, and by the model check without
    # comparing it): the run summaries record it; nothing is checked, planned or scored again
    _, jobs = snakemake_dry_run(workdir, config, tmp_path, models={"classifier_chunk_length": 300})
    assert jobs == {"summarize": len(SAMPLES), "plot_sample": len(SAMPLES), "overview": 1, "all": 1}, jobs
    # with a setting that changes the embeddings too, every embed job runs again
    _, jobs = snakemake_dry_run(workdir, config, tmp_path, embedding={"storage": "float16"}, **swap)
    assert jobs["embed"] == 2 * pools and jobs["score"] == pools


@pytest.mark.slow
def test_the_trained_classifier_used_by_a_run_without_labels_reruns_nothing(workflow_run, tmp_path):
    """The run that trained the classifier, again with the labels taken off its samples sheet (its
    classifier now a given file, no longer trained here): the model check stood for the embedding
    models alone, so neither it nor the plans, embeddings or scores run again."""
    workdir, config = workflow_run
    sheet = tmp_path / "unlabelled.tsv"
    sheet.write_text(
        "".join("\t".join(row.split("\t")[:2]).rstrip("\n") + "\n" for row in open(workdir / "samples.tsv"))
    )
    _, jobs = snakemake_dry_run(workdir, config, tmp_path, samples=str(sheet))
    assert not {"check_models", "plan", "embed", "score", "predict", "call"} & jobs.keys(), jobs
    # a classifier for other widths is refused at start-up, by the widths the model check found
    other = tmp_path / "other.pt"
    classifier.save(
        classifier.MLPClassifier(48 + 99), other, chunk_length=300, embedders=[["dnabert", 48], ["esm", 99]]
    )
    changed = tmp_path / "other.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["models"]["classifier"] = str(other)
    changed.write_text(yaml.safe_dump(settings))
    result = subprocess.run(
        SNAKEMAKE + ["-n", "--directory", str(workdir), "--configfile", str(changed)],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert result.returncode == 1 and result.stderr.splitlines()[-1] == (
        f"{changed}: models.classifier: {other}: the classifier was trained on 99 features of esm but its checkpoint "
        "gives 64; configure the checkpoint it was trained on, or train a classifier on this one"
    )


@pytest.mark.slow
def test_a_table_cut_short_by_a_crash_is_refused(workflow_run, tmp_path):
    """predict's chunks table cut short after its rename (a node lost before its data reached the
    disk), which Snakemake takes as finished: the call job that reads it refuses it in one line,
    with its name and what to do (the job itself; scripts/run_logged.sh brings the line to the
    console)."""
    from harness.stages import script_command
    from workflow_lib.cli.settings import CallSettings

    results = workflow_run[0] / "results" / "phix"
    chunks = tmp_path / "chunks.tsv"
    chunks.write_bytes((results / "chunks.tsv").read_bytes()[:-10])
    outputs = {"sequences": "sequences.tsv", "viral": "viral.fasta", "regions": "regions.tsv"}
    outputs |= {"regions_fasta": "regions.fasta", "manifest": "manifest.json"}
    command = script_command(
        "call", CallSettings, prepared_sequences=results / "prepare" / "sequences.tsv.gz", chunks=chunks,
        scoring=results / "scoring.json", input=workflow_run[0] / "inputs" / "phix.fa",
        **{option: tmp_path / name for option, name in outputs.items()},
    )  # fmt: skip
    refused = subprocess.run(command, capture_output=True, text=True, env=ENV)
    expected = f"error: {chunks}: cut short (its last line is not whole); delete it and run the workflow again\n"
    assert (refused.returncode, refused.stderr) == (2, expected)
    assert not any((tmp_path / name).exists() for name in outputs.values())


@pytest.mark.slow
def test_a_missing_classifier_stops_a_run_with_results(workflow_run, tmp_path):
    """With results present Snakemake would not miss the classifier (no job that needs it is due,
    while the summaries would be made again): the run stops before its first job, in one line."""
    workdir, config = workflow_run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy, symlinks=True)
    settings = yaml.safe_load(config.read_text())
    settings["models"]["classifier"] = str(tmp_path / "gone.pt")
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(settings))
    summary = copy / "results" / "reads" / "run_summary.json"
    before = summary.read_bytes()
    command = SNAKEMAKE + ["--directory", str(copy), "--configfile", str(changed)]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output
    assert f"{changed}: models.classifier: {tmp_path / 'gone.pt'}: no such file" in output
    assert "Finished jobid" not in output and summary.read_bytes() == before


@pytest.mark.slow
def test_a_trained_classifier_is_reused_for_unlabelled_samples(workflow_run, tmp_path):
    """models.classifier at the train target's output, with a sheet that labels nothing: the file
    is used as it is (checked, not trained again); missing, the run stops in one line."""
    workdir, _ = workflow_run
    write_inputs(tmp_path)
    sheet = tmp_path / "samples.tsv"
    sheet.write_text(
        "sample\tpath\n" + "".join(line.rsplit("\t", 1)[0] + "\n" for line in sheet.read_text().splitlines()[1:])
    )
    config = write_config(tmp_path)
    command = SNAKEMAKE + ["--directory", str(tmp_path), "--configfile", str(config), "-n"]
    missing = subprocess.run(command, capture_output=True, text=True, env=ENV)
    output = missing.stdout + missing.stderr
    assert missing.returncode != 0 and "Traceback" not in output
    assert "the samples sheet labels no sample for the train target to make it from" in output
    (tmp_path / "results" / "train").mkdir(parents=True)
    shutil.copy(workdir / "results" / "train" / "classifier.pt", tmp_path / "results" / "train" / "classifier.pt")
    reused = subprocess.run(command, capture_output=True, text=True, env=ENV)
    assert reused.returncode == 0, reused.stderr[-3000:]
    assert "rule check_models" in reused.stdout and "rule train" not in reused.stdout


def new_genome(tmp_path: Path) -> Path:
    """A genome for a sample added to a finished run: lambda's first 10 kb (one pooled shard), in a
    file dated as lambda's bundled genome, older than the run (as a file kept on disk is)."""
    lam = GENOMES / "lambda_NC_001416.fasta"
    ((record_id, _, bases),) = read_records(lam)
    path = tmp_path / "lambda.fa"
    path.write_bytes(b">" + record_id.encode() + b" first 10 kb\n" + bases[:10_000] + b"\n")
    os.utime(path, ns=(lam.stat().st_atime_ns, lam.stat().st_mtime_ns))
    return path


def classify_new_samples(workdir: Path, config: Path, tmp_path: Path, keep: list[str], **changes) -> str:
    """A second run in a copy of a finished run, with a new samples sheet: the samples `keep`,
    unlabelled, and a new one (lambda, new_genome's) and the config's `changes` (as in
    snakemake_dry_run). It runs to the end and plans every frame of every sample of the sheet (its
    shards table's), and the new sample has a call per record. Returns its output."""
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy, symlinks=True)
    old = {row["sample"]: row["path"] for row in read_tsv(workdir / "samples.tsv")}
    sheet = tmp_path / "samples.tsv"
    sheet.write_text(
        "sample\tpath\n"
        + "".join(f"{sample}\t{old[sample]}\n" for sample in keep)
        + f"lambda\t{new_genome(tmp_path)}\n"
    )
    settings = yaml.safe_load(config.read_text()) | {"samples": str(sheet)}
    for key, value in changes.items():
        settings[key] = {**settings.get(key, {}), **value} if isinstance(value, dict) else value
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(settings))
    command = SNAKEMAKE + ["--directory", str(copy), "--configfile", str(changed)]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    plan = read_plans(copy / "results" / "plan")[0]  # the appended sample in a generation of its own
    assert list(plan)[-1] == "lambda" and set(keep) <= set(plan)
    for sample in [*keep, "lambda"]:
        shards = read_tsv(copy / "results" / sample / "prepare" / "shards.tsv")
        planned: dict[int, list] = {}  # each shard's pieces' frames and tokens, summed
        for piece in plan[sample]:
            summed = planned.setdefault(piece["shard"], [0, 0])
            summed[0], summed[1] = summed[0] + piece["frames"], summed[1] + piece["tokens"]
        assert planned == {int(shard["shard"]): [int(shard["frames"]), int(shard["tokens"])] for shard in shards}
    records = [record_id for record_id, _, _ in read_records(tmp_path / "lambda.fa")]
    assert [row["sequence_id"] for row in read_tsv(copy / "results" / "lambda" / "sequences.tsv")] == records
    return output


def embedded_samples(output: str, workdir: Path) -> set[str]:
    """The samples whose shards lie in the pooled shards whose embed jobs a Snakemake run's output shows."""
    jobs = re.split(r"\n(?:local)?rule ", output)
    pools = {re.search(r"pool=([\d-]+)", job).group(1) for job in jobs if job.startswith("embed:")}
    return {p["sample"] for pool in pools for p in read_plans(workdir / "results" / "plan")[1][pool]}


@pytest.mark.slow
def test_new_samples_with_another_classifier_after_training(workflow_run, tmp_path):
    """Train on labelled genomes, then classify a new sample with that classifier (another file): the
    sheet and what the model check covers change together. The plan is made again with the new
    sample (a plan that lacks a sample is out of date, never the truth); the samples embedded
    before are scored again, not embedded again: the new sample is planned in a generation of its
    own, with pooled shards of its own."""
    workdir, config = workflow_run
    shutil.copy(workdir / "results" / "train" / "classifier.pt", tmp_path / "classifier.pt")
    sheet = [row["sample"] for row in read_tsv(workdir / "samples.tsv")]  # the run's samples, in its order
    output = classify_new_samples(
        workdir, config, tmp_path, sheet, models={"classifier": str(tmp_path / "classifier.pt")}
    )
    copy = tmp_path / "run"
    before, after = (read_plans(d / "results" / "plan")[1] for d in (workdir, copy))
    assert embedded_samples(output, copy) == {"lambda"}  # its own pooled shards: a generation of its own
    assert all(after[pool] == before[pool] for pool in before)  # the earlier pooled shards stay


@pytest.mark.slow
def test_new_samples_with_another_chunk_length(workflow_run, tmp_path):
    """A sheet of new samples only, with chunk_length 500 (and a classifier for 500 bp chunks): the
    sheet and what the model check covers change together."""
    workdir, config = workflow_run
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(48 + 64), tmp_path / "classifier_500.pt", chunk_length=500)
    output = classify_new_samples(
        workdir, config, tmp_path, [], chunk_length=500, models={"classifier": str(tmp_path / "classifier_500.pt")}
    )
    assert embedded_samples(output, tmp_path / "run") == {"lambda"}


def planned_embed_jobs(directory: Path, config: Path) -> list[str]:
    """The embed jobs of a dry run under the SLURM profile, once the run is planned, as it prints them."""
    command = SNAKEMAKE + ["--directory", str(directory), "--configfile", str(config)]
    planned = subprocess.run(command + ["--until", "plan"], capture_output=True, text=True, env=ENV)
    assert planned.returncode == 0, planned.stderr[-3000:]
    slurm = [*SNAKEMAKE[:5], "--directory", str(directory), "--configfile", str(config), "-n"]
    dry = subprocess.run(slurm + ["--profile", str(ROOT / "profiles" / "slurm")], capture_output=True, text=True)
    assert dry.returncode == 0, dry.stderr[-3000:]
    return [job for job in re.split(r"\n(?:local)?rule ", dry.stdout + dry.stderr) if job.startswith("embed:")]


@pytest.mark.slow
def test_a_shard_with_no_frames_asks_for_no_gpu(pooled_run, tmp_path):
    """A sample with no frame (its one record is too short) gets one empty shard, pooled with the
    next sample's: their embed jobs ask for a GPU; a pooled shard of empty shards only asks for
    none (the resource is decided once the plan is made). A run with such a sample (pooled_run's
    `none`) goes to the end and calls its record no_coding_frame. (The demo models are
    pooled_run's: helpers.seed_demo_models.)"""
    ((_, _, genome),) = read_records(ROOT / "resources" / "genomes" / "phiX174.fasta")
    (tmp_path / "one.fa").write_bytes(b">one\n" + genome[:900] + b"\n")
    (tmp_path / "none.fa").write_bytes(b">short\n" + genome[:90] + b"\n")
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(48 + 64), tmp_path / "classifier.pt", chunk_length=300)
    asked = {}
    for run, sheet in (("pooled", ["none", "one"]), ("empty", ["none"])):
        (tmp_path / run).mkdir()
        seed_demo_models(pooled_run / "resources" / "demo_models", tmp_path / run)
        rows = "".join(f"{s}\t{tmp_path / s}.fa\n" for s in sheet)
        (tmp_path / run / "samples.tsv").write_text("sample\tpath\n" + rows)
        config = write_config(tmp_path / run, classifier=str(tmp_path / "classifier.pt"), input={"min_length": 100})
        jobs = planned_embed_jobs(tmp_path / run, config)
        assert len(jobs) == 2
        for job in jobs:
            assert "threads: 3" in job and "--threads 3 " in job, job  # embedding.num_workers auto + 1
            # decided before the job's inputs all exist (a DNABERT-S job's tokens come from its tokenize
            # job); only Snakemake's own disk_mb, from the input sizes, waits for them
            assert re.search(r"mem_mb=16000, .*runtime=\d+, .*gpu=[01]\b", job), job
            asked[run] = asked.get(run, set()) | {int(re.search(r"\bgpu=(\d+)", job).group(1))}
    assert asked == {"pooled": {1}, "empty": {0}}
    (none,) = read_plans(pooled_run / "results" / "plan")[0]["none"]
    assert none["frames"] == 0 and none["pool"] == "0-0"
    assert read_tsv(pooled_run / "results" / "none" / "sequences.tsv")[0]["call"] == "no_coding_frame"


@pytest.mark.slow
def test_a_copy_of_a_sample_in_its_pooled_shard_is_embedded_once(pooled_run):
    """pooled_run's `phix_copy`, phiX174's file again under another name, shares phix's pooled
    shard: its frames are copies, not embedded again, and its tables are phix's to the byte; each
    sample's run summary, its manifest and the report say what share of the pooled shard's tokens
    was embedded."""
    results = pooled_run / "results"
    for table in ("frames.tsv", "chunks.tsv", "sequences.tsv", "viral.fasta"):
        assert (results / "phix_copy" / table).read_bytes() == (results / "phix" / table).read_bytes()
    embedded = json.loads((results / "phix_copy" / "run_summary.json").read_text())["embedded"]
    phix_tokens = sum(int(shard["tokens"]) for shard in read_tsv(results / "phix" / "prepare" / "shards.tsv"))
    assert embedded["esm"]["tokens"] - embedded["esm"]["distinct_tokens"] >= phix_tokens  # ESM-2 tokens, as planned
    for model in ("esm", "dnabert"):
        share = embedded[model]["distinct_tokens"] / embedded[model]["tokens"]
        assert embedded[model]["tokens_embedded_share"] == round(share, 4) < 1
        assert embedded[model]["seconds_saved"] >= 0
    assert json.loads((results / "phix_copy" / "manifest.json").read_text())["embedded"] == embedded
    report = {row["sample"]: row for row in read_tsv(results / "report" / "samples.tsv")}
    assert float(report["phix"]["esm_tokens_embedded_share"]) == embedded["esm"]["tokens_embedded_share"]


@pytest.mark.slow
def test_a_range_of_many_copies_is_split_between_pooled_shards_and_every_copy_keeps_its_scores(workflow_run, tmp_path):
    """phiX174 ten times over in one sample, beside phiX174 once: the ranges of bins of phiX's
    frames hold more than plan.MOST_COPIES times shard_tokens, copies included, so the plan splits
    each between shards into several pooled shards (each embeds its copies once); every record still
    gets phiX174's scores and call."""
    ((_, _, genome),) = read_records(GENOMES / "phiX174.fasta")
    (tmp_path / "phix.fa").write_bytes(b">phix\n" + genome + b"\n")
    (tmp_path / "many.fa").write_bytes(b"".join(b">copy_%d\n%s\n" % (i, genome) for i in range(10)))
    (tmp_path / "samples.tsv").write_text(f"sample\tpath\nphix\t{tmp_path}/phix.fa\nmany\t{tmp_path}/many.fa\n")
    seed_demo_models(workflow_run[0] / "resources" / "demo_models", tmp_path)
    classifier = workflow_run[0] / "results" / "train" / "classifier.pt"
    config = write_config(tmp_path, classifier=str(classifier), shard_tokens=3000)
    command = SNAKEMAKE + ["--directory", str(tmp_path), "--configfile", str(config)]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    pools = read_plans(tmp_path / "results" / "plan")[1].values()
    ranges = [(pieces[0]["first_bin"], pieces[0]["end_bin"]) for pieces in pools]
    assert len(set(ranges)) < len(ranges)  # a range in several pooled shards
    phix = {c["chunk"]: c for c in read_tsv(tmp_path / "results" / "phix" / "chunks.tsv")}
    copies = read_tsv(tmp_path / "results" / "many" / "chunks.tsv")
    assert len(copies) == 10 * len(phix)
    for chunk in copies:
        assert chunk["is_virus"] == phix[chunk["chunk"]]["is_virus"]
        assert abs(float(chunk["max_score_virus"]) - float(phix[chunk["chunk"]]["max_score_virus"])) <= 1e-6
    (call,) = {s["call"] for s in read_tsv(tmp_path / "results" / "phix" / "sequences.tsv")}
    assert {s["call"] for s in read_tsv(tmp_path / "results" / "many" / "sequences.tsv")} == {call}


def test_the_workflow_runs_from_any_directory(tmp_path):
    """From a directory with no copy of config/: the defaults are found beside the Snakefile."""
    write_inputs(tmp_path)
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(768 + 2560), tmp_path / "500_model.pth", chunk_length=500)
    command = [*SNAKEMAKE[:5], "-n", "--cores", "1", "--config", f"samples={tmp_path / 'samples.tsv'}"]
    command += [f"models={{classifier: {tmp_path / '500_model.pth'}}}"]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Config file {ROOT / 'config' / 'config.yaml'} is extended" in result.stdout


@pytest.mark.slow
def test_a_config_unlike_the_results_is_flagged_at_start_up(workflow_run, tmp_path):
    """The overview records what made the results; a config that names other values says so (a
    report made now describes the results as they are). The run's own config warns of nothing:
    test_every_rule_logs_and_rerun_is_a_no_op's dry run."""
    workdir, config = workflow_run
    output, _ = snakemake_dry_run(workdir, config, tmp_path, chunk_length=500)
    assert "Warning: chunk_length is 500 in the config, but the results in results/ were made with 300" in output


FRAMES = ("F1", "F2", "F3", "R1", "R2", "R3")


def pieces_of(workdir: Path, sample: str, model: str) -> dict[str, np.ndarray]:
    """Each of the sample's frames' rows of its pooled shards' embeddings by `model`, and their scores."""
    found = {}
    for piece in read_plans(workdir / "results" / "plan")[0][sample]:
        rows = slice(piece["offset"], piece["offset"] + piece["frames"])
        ids, values, _ = read_embeddings(
            workdir / "results" / "shards" / "embeddings" / model / f"shard_{piece['pool']}.h5"
        )
        scores = np.load(workdir / "results" / "shards" / "scores" / f"shard_{piece['pool']}.npz")["scores"][rows, 1]
        found.update(zip(ids[rows], zip(values[rows], scores.astype(float).tolist(), strict=True), strict=True))
    return found


def frame_scores(workdir: Path, sample: str) -> dict[str, float]:
    """Each frame's virus score from the sample's rows of its pooled shards' scores files (float32,
    as the score jobs wrote them)."""
    return {frame: score for frame, (_, score) in pieces_of(workdir, sample, "esm").items()}


def frame_embeddings(workdir: Path, sample: str, model: str) -> dict[str, np.ndarray]:
    return {frame: values for frame, (values, _) in pieces_of(workdir, sample, model).items()}


@pytest.mark.slow
def test_results_do_not_depend_on_sharding(workflow_run, pooled_run):
    """The same samples and classifier in shards of 5,000 tokens (up to 3 a sample, some pooled
    with other samples') and all in one pooled shard (conftest's pooled_run, where two more samples
    share it): the same frames, embeddings and frame and chunk scores equal but for float32 rounding
    (helpers.EMBEDDING_TOLERANCE, SCORE_TOLERANCE), and the same calls: a sample's calls do not
    depend on which samples share its shards."""
    workdir, pooled = workflow_run[0], pooled_run
    plan = read_plans(workdir / "results" / "plan")[0]
    assert max(map(len, plan.values())) >= 3
    assert all(len(shards) == 1 for shards in read_plans(pooled / "results" / "plan")[0].values())
    assert list(read_plans(pooled / "results" / "plan")[1]) == ["0-0"]  # every sample in one
    for sample in SAMPLES:
        sharded, whole = (read_tsv(d / "results" / sample / "frames.tsv") for d in (workdir, pooled))
        assert [f["frame_id"] for f in sharded] == [f["frame_id"] for f in whole]
        for model in ("esm", "dnabert"):
            sharded, whole = (frame_embeddings(d, sample, model) for d in (workdir, pooled))
            assert sharded.keys() == whole.keys()
            assert max(np.abs(sharded[f] - whole[f]).max() for f in sharded) <= EMBEDDING_TOLERANCE
        sharded, whole = (frame_scores(d, sample) for d in (workdir, pooled))
        assert sharded.keys() == whole.keys()
        assert max(abs(sharded[f] - whole[f]) for f in sharded) <= SCORE_TOLERANCE
        chunks = {f[:-2] for f in sharded}  # VirNucPro's chunk key
        for scores in (sharded, whole):
            for chunk in chunks:
                scores[chunk] = max(scores[f"{chunk}{frame}"] for frame in FRAMES if f"{chunk}{frame}" in scores)
        assert max(abs(sharded[c] - whole[c]) for c in chunks) <= SCORE_TOLERANCE
        sharded, whole = (read_tsv(d / "results" / sample / "chunks.tsv") for d in (workdir, pooled))
        assert [c["is_virus"] for c in sharded] == [c["is_virus"] for c in whole]
        sharded, whole = (read_tsv(d / "results" / sample / "sequences.tsv") for d in (workdir, pooled))
        assert [s["call"] for s in sharded] == [s["call"] for s in whole]


def test_the_plan_cuts_the_generations_bins_into_pooled_shards_by_distinct_tokens():
    """A pooled shard is a range of bins of every shard of the generation: bins join the latest
    range while their distinct tokens fit shard_tokens, else start the next, and a bin larger than
    shard_tokens is a range of its own. Its pieces are each shard's frames of those bins, in the
    sheet's and shard order, each at the row where the one before it ends; a shard without frames
    is a piece of the first."""

    def counts(*shards: dict[int, tuple[int, int]]) -> dict[str, np.ndarray]:
        """Each shard's (frames, tokens) by bin, as prepare's bins file."""
        arrays = {name: np.zeros((len(shards), BINS), dtype=np.int64) for name in BIN_COUNTS}
        for shard, by_bin in enumerate(shards):
            for b, (frames, tokens) in by_bin.items():
                arrays["frames"][shard, b], arrays["tokens"][shard, b] = frames, tokens
        return arrays

    samples = [
        ("a", counts({0: (6, 60), 2: (1, 10)}, {1: (2, 20), 3: (1, 10)})),
        ("b", counts({2: (1, 10)})),  # a copy of a's frame of bin 2
        ("empty", counts({})),
        ("big", counts({4000: (8, 80)})),
    ]
    distinct = np.zeros(BINS)
    distinct[[0, 1, 2, 3, 4000]] = [30, 20, 10, 10, 80]  # a's bin 0: 3 copies
    rows = pack(samples, cut(distinct, 50), generation=2)
    placed = [(r["sample"], r["shard"], r["frames"], r["tokens"], r["pool"], r["offset"]) for r in rows]
    assert placed == [
        ("a", 0, 6, 60, "2-0", 0),
        ("a", 1, 2, 20, "2-0", 6),
        ("empty", 0, 0, 0, "2-0", 8),
        ("a", 0, 1, 10, "2-1", 0),
        ("a", 1, 1, 10, "2-1", 1),
        ("b", 0, 1, 10, "2-1", 2),
        ("big", 0, 8, 80, "2-2", 0),
    ]
    ranges = {r["pool"]: (r["first_bin"], r["end_bin"]) for r in rows}
    assert ranges == {"2-0": (0, 2), "2-1": (2, 4000), "2-2": (4000, BINS)}
    assert [r["pool"] for r in pack([("empty", counts({}))], cut(np.zeros(BINS, np.int64), 50))] == ["0-0"]
    # a range whose tokens, copies included, pass most_tokens is cut again between shards
    rows = pack(samples, cut(distinct, 50), most_tokens=70)
    placed = [(r["sample"], r["shard"], r["pool"], r["offset"], r["first_bin"]) for r in rows]
    assert placed == [
        ("a", 0, "0-0", 0, 0),
        ("a", 1, "0-1", 0, 0),
        ("empty", 0, "0-1", 2, 0),
        ("a", 0, "0-2", 0, 2),
        ("a", 1, "0-2", 1, 2),
        ("b", 0, "0-2", 2, 2),
        ("big", 0, "0-3", 0, 4000),
    ]


def test_the_plan_counts_each_distinct_protein_once_in_bounded_memory(tmp_path):
    """The plan's distinct tokens per bin come from each shard's sketch, merged across shards and
    samples: a protein in several shards counts once, and where a bin holds more distinct proteins
    than the sketch keeps, their tokens are estimated within about 1/sqrt(SKETCH) a bin, closer
    over the bins of a pool."""
    rng = np.random.default_rng(0)
    crcs = np.unique(rng.integers(0, 2**32, 700_000))  # about 170 distinct proteins a bin
    tokens = rng.integers(30, 170, crcs.size)
    zeros = np.zeros((3, BINS), np.int64)
    files = []
    for sample, frames in (("a", np.arange(0, 400_000)), ("b", np.arange(200_000, crcs.size))):  # b repeats a's half
        files.append(tmp_path / f"{sample}.npz")
        write_bins(
            files[-1], dict.fromkeys(BIN_COUNTS, zeros), [sketch(crcs[p], tokens[p]) for p in np.array_split(frames, 3)]
        )
    estimate, exact = distinct_tokens(files), np.bincount(crcs % BINS, weights=tokens, minlength=BINS)
    assert np.std(estimate / exact - 1) < 1.2 / np.sqrt(SKETCH)  # a bin
    for bins_a_pool, most in ((64, 0.06), (BINS, 0.01)):
        ratio = estimate.reshape(-1, bins_a_pool).sum(axis=1) / exact.reshape(-1, bins_a_pool).sum(axis=1)
        assert np.abs(ratio - 1).max() < most, bins_a_pool


def test_copies_from_any_record_shard_or_sample_meet_in_one_pooled_shard(tmp_path):
    """Two samples cut into several shards each, the second holding a copy of the first's genome:
    the plan puts all copies of a frame in one pooled shard, whichever record, shard or sample they
    come from, so that the embed jobs, each finding the copies of its own shard, embed each
    distinct protein once in all."""
    from harness.stages import prepare_into, prepared_files
    from workflow_lib.embed.packing import first_copies
    from workflow_lib.io.sharding import ShardIndex, pool_shards, read_bins

    lambda_genome = (GENOMES / "lambda_NC_001416.fasta").read_text()
    (tmp_path / "b.fasta").write_text(lambda_genome.replace(">", ">copy_") + (GENOMES / "phiX174.fasta").read_text())
    samples = []
    for name, reads in (("a", GENOMES / "lambda_NC_001416.fasta"), ("b", tmp_path / "b.fasta")):
        counts = prepare_into(reads, tmp_path / name, 3000, chunk_length=300)
        assert counts["shards"] >= 3
        samples.append((name, prepared_files(tmp_path / name)))
    bins = [(name, read_bins(files.bins)) for name, files in samples]
    distinct = distinct_tokens(files.bins for _, files in samples)
    rows = pack(bins, cut(distinct, 6000))
    pools: dict[str, list] = {}
    for row in rows:
        files = dict(samples)[row["sample"]]
        pools.setdefault(row["pool"], []).append(
            (files.shards, files.bins, row["shard"], row["first_bin"], row["end_bin"])
        )
    assert len(pools) >= 3
    proteins: dict[str, set] = {}  # the pools holding each protein
    embedded = 0
    for pool, pieces in pools.items():
        fasta = {suffix: tmp_path / f"pool_{pool}.{suffix}" for suffix in ("fna", "faa")}
        pool_shards(pieces, fasta["fna"], fasta["faa"])
        for _, protein in read_fasta(fasta["faa"]):
            proteins.setdefault(protein, set()).add(pool)
        first = first_copies(index := ShardIndex.read(fasta["faa"]))
        embedded += int((first == np.arange(len(index))).sum())
    assert all(len(held) == 1 for held in proteins.values())
    assert embedded == len(proteins) < sum(len(read_fasta(f)) for f in tmp_path.glob("pool_*.faa")) / 1.5
    # the plan counted each protein once, across shards and samples: no bin holds SKETCH of them
    by_bin = np.zeros(BINS, np.int64)
    for protein in proteins:
        by_bin[zlib.crc32(protein.encode()) % BINS] += len(protein) + 2
    assert np.array_equal(distinct, by_bin)


@pytest.mark.slow
def test_an_appended_sample_runs_only_its_own_jobs(workflow_run, tmp_path):
    """A sample appended to the sheet of a finished run, nothing else changed: it is planned in a
    generation of its own, so only its own jobs run (its pooled shard's and the run-wide report's),
    and no earlier sample's table is written again."""
    workdir, config = workflow_run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy, symlinks=True)
    sheet = copy / "samples.tsv"  # the run's sheet, labels and all, in the copy (the config names it relative)
    command = SNAKEMAKE + ["--directory", str(copy), "--configfile", str(config)]
    columns = sheet.read_text().splitlines()[0].count("\t") + 1
    with open(sheet, "a") as handle:
        handle.write("\t".join(["lambda", str(new_genome(tmp_path))] + [""] * (columns - 2)) + "\n")
    result = subprocess.run(command, capture_output=True, text=True, env=ENV)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    jobs = re.split(r"\n(?:local)?(?:rule|checkpoint) ", output)[1:]
    per_sample = [j for j in jobs if re.search(r"sample=\w+", j)]
    assert per_sample and all("sample=lambda" in j for j in per_sample), [j.split(":")[0] for j in per_sample]
    pooled = {shard["pool"] for shard in read_plans(copy / "results" / "plan")[0]["lambda"]}
    assert sum(j.startswith("embed:") for j in jobs) == 2 * len(pooled)  # its own pooled shards only
    for sample in SAMPLES:  # the tables of the first run, as the copy has them
        table = copy / "results" / sample / "sequences.tsv"
        assert table.stat().st_mtime_ns == (workdir / "results" / sample / "sequences.tsv").stat().st_mtime_ns


def wait_for_line(paths: list[Path], text: str, run: subprocess.Popen, count: int, limit_s: float = 600) -> None:
    """Returns once `count` of the files `paths` hold a line with `text`, failing if `run` ends
    first (the time limit only turns a hung run into a failure)."""
    deadline = time.monotonic() + limit_s
    while sum(path.is_file() and text in path.read_text() for path in paths) < count:
        assert run.poll() is None, f"the run ended ({run.returncode}) before {count} jobs said '{text}'"
        assert time.monotonic() < deadline, f"fewer than {count} jobs said '{text}' in {limit_s} s"
        time.sleep(0.1)


def log_seconds(path: Path) -> list[int]:
    """The times of a job log's lines (HH:MM:SS), in seconds of the day."""
    stamps = re.findall(r"^(\d\d):(\d\d):(\d\d) ", path.read_text(), re.M)
    return [int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in stamps]


@pytest.fixture(scope="module")
def phix_planned(workflow_run, tmp_path_factory) -> tuple[Path, Path]:
    """A run of phiX174 alone in one shard, up to its plan as the docs run it (--until plan --notemp:
    prepare, the model check, the plan; prepare's shards kept for the next run), for the tests to
    embed in a copy each: (directory, config). The demo models are workflow_run's
    (helpers.seed_demo_models)."""
    directory = tmp_path_factory.mktemp("phix_planned")
    seed_demo_models(workflow_run[0] / "resources" / "demo_models", directory)
    shutil.copy(GENOMES / "phiX174.fasta", directory / "phix.fa")
    (directory / "samples.tsv").write_text(f"sample\tpath\nphix\t{directory / 'phix.fa'}\n")
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(48 + 64), directory / "classifier.pt", chunk_length=300)
    outputs = {"keep_embeddings": False}  # the default: prepare's shards are temporary
    config = write_config(
        directory, classifier=str(directory / "classifier.pt"), embedding={"num_workers": 0}, outputs=outputs
    )
    command = SNAKEMAKE + ["--directory", str(directory), "--configfile", str(config)]
    result = subprocess.run(command + ["--until", "plan", "--notemp"], capture_output=True, text=True, env=ENV)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (directory / "results" / "plan" / "shards_0.tsv").is_file()
    assert not list(directory.glob("results/shards/embeddings/*/*.h5"))
    # the next run starts from the plan: without --notemp, the plan, the shards' last job up to
    # it, removed them and the next run prepared every sample again
    jobs = job_counts(subprocess.run(command + ["-n"], capture_output=True, text=True, env=ENV).stdout)
    assert jobs["embed"] == 2 and not {"prepare", "plan"} & jobs.keys(), jobs
    return directory, config


@pytest.mark.slow
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "whole"])
def test_the_embed_jobs_of_a_shard_share_one_gpu_under_the_local_profile(phix_planned, tmp_path, shared):
    """Under profiles/local on a one-GPU machine (--resources gpu=1), the ESM-2 and DNABERT-S embed
    jobs of a shard run at the same time, each claiming its share (gpu_mem_mb) of the GPU's memory;
    with a whole GPU per embed job (embed: gpu=1), one after the other. The GPU is a stand-in
    (VIRNUCPRO_GPUS) with real claims; the jobs compute on the CPU. The test holds the whole GPU
    until the jobs that Snakemake lets run all wait for it: both at once only when sharing. (Each
    in its copy of phix_planned's run: its embed jobs, and DNABERT-S's tokens, are what is left.)"""
    shutil.copytree(phix_planned[0], tmp_path, symlinks=True, dirs_exist_ok=True)
    config = phix_planned[1]
    gpu = locks.Gpu(f"GPU-test-{uuid.uuid4()}", 4000)
    command = [
        *SNAKEMAKE[:5],
        "results/shards/embeddings/esm/shard_0-0.h5",
        "results/shards/embeddings/dnabert/shard_0-0.h5",
        "--profile",
        str(ROOT / "profiles" / "local"),
        "--cores",
        "2",
    ]
    command += ["--directory", str(tmp_path), "--configfile", str(config)]
    if shared:  # the profile's set-resources: embed jobs ask for their GPU memory, no whole GPU
        command += ["--resources", "gpu=1", f"gpu_mem_mb={gpu.memory_mb}"]
    else:
        command += ["--resources", "gpu=1", "--set-resources", "embed:gpu=1"]
    logs = [tmp_path / "logs" / "embed" / f"{model}_0-0.log" for model in ("esm", "dnabert")]
    env = {**ENV, "VIRNUCPRO_GPUS": f"{gpu.uuid}={gpu.memory_mb}"}
    with open(tmp_path / "snakemake.log", "w") as output, locks.claim_gpu([gpu]):
        run = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True
        )
        try:
            wait_for_line(logs, "waiting for other jobs to end", run, 2 if shared else 1)
            if not shared:  # the other is not started while the first holds the one GPU unit
                assert sum(log.is_file() for log in logs) == 1
        except BaseException:
            os.killpg(run.pid, signal.SIGKILL)  # Snakemake and its jobs
            raise
    assert run.wait(timeout=600) == 0, (tmp_path / "snakemake.log").read_text()[-3000:]
    first, second = sorted(logs, key=lambda log: log_seconds(log)[0])
    if shared:  # the second started before the first ended
        assert log_seconds(second)[0] <= log_seconds(first)[-1]
        run_config = {"models": yaml.safe_load(config.read_text())["models"]}
        run_config["models"]["esm"]["architecture"] = "esm2"
        run_config["models"]["dnabert"]["architecture"] = "dnabert_s"
        run_config["embedding"] = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["embedding"]
        for model, log in zip(("esm", "dnabert"), logs):
            mb = job_resources.embed_gpu_mem_mb(model, str(tmp_path / "results/checks/models.json"), run_config)
            assert f"no GPU has {mb} MB unclaimed" in log.read_text()
            assert f"claimed {mb} MB of GPU 0 ({gpu.uuid}, 4000 MB)" in log.read_text()
    else:  # the second started once the first had ended
        assert log_seconds(second)[0] >= log_seconds(first)[-1]
        assert all(f"claimed all of GPU 0 ({gpu.uuid}, 4000 MB)" in log.read_text() for log in logs)
