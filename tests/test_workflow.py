"""The whole workflow run for real by Snakemake: prepare, model check, embed, train, predict."""

import subprocess

import h5py
import torch
import yaml
from conftest import ENV, SAMPLES, SNAKEMAKE, read_fasta, read_tsv, write_config, write_inputs

from workflow_lib.models import classifier
from workflow_lib.seqio import read_records


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
        for model, suffix in (("esm", "faa"), ("dnabert", "fna")):
            for shard in range(2):
                with h5py.File(results / "embeddings" / model / f"shard_{shard}.h5") as h5:
                    ids = [i.decode() for i in h5["ids"][()]]
                assert ids == [fid for fid, _ in read_fasta(results / "prepare" / f"shard_{shard}.{suffix}")]


def test_reads_sample_is_called_per_read(workflow_run):
    workdir, _ = workflow_run
    calls = read_tsv(workdir / "results" / "reads" / "sequences.tsv")
    assert len(calls) == 120 and {c["call"] for c in calls} <= {"virus", "other", "no_coding_frame"}
    assert read_tsv(workdir / "results" / "mito" / "sequences.tsv")[0]["n_chunks"] == "56"


def test_trained_classifier_and_metrics(workflow_run):
    workdir, _ = workflow_run
    model, metadata = classifier.load(workdir / "results" / "train" / "classifier.pt")
    assert model.input_dim == 48 + 64 and metadata["chunk_length"] == 300
    metrics = yaml.safe_load((workdir / "results" / "train" / "metrics.json").read_text())
    assert set(metrics["validation"]) >= {"accuracy", "precision", "recall", "f1", "roc_auc"}


def test_every_rule_logs_and_rerun_is_a_no_op(workflow_run):
    workdir, config = workflow_run
    for log in (
        "check_models.log",
        "build_demo_models.log",
        "train.log",
        "prepare/reads.log",
        "predict/reads.log",
        "embed/reads/esm_1.log",
    ):
        assert (workdir / "logs" / log).stat().st_size > 0
    assert "tokens/s" in (workdir / "logs" / "embed" / "reads" / "esm_1.log").read_text()
    dry = subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(config), "-n"],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr


def test_wrong_classifier_stops_before_any_embedding(tmp_path):
    write_inputs(tmp_path)
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(3328), tmp_path / "virnucpro_sized.pt")  # DNABERT-S 768 + ESM-2 3B 2560
    config = write_config(tmp_path, classifier=str(tmp_path / "virnucpro_sized.pt"))
    result = subprocess.run(
        SNAKEMAKE + ["--directory", str(tmp_path), "--configfile", str(config)], capture_output=True, text=True, env=ENV
    )
    assert result.returncode != 0
    log = (tmp_path / "logs" / "check_models.log").read_text()
    assert "takes 3328 features but the configured models give 48 (DNABERT-S) + 64 (ESM-2) = 112" in log
    assert not list(tmp_path.glob("results/*/embeddings/*/*.h5"))
