"""The whole workflow run for real by Snakemake: prepare, model check, embed, train, predict."""

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch
import yaml
from conftest import GENOMES, ROOT, read_fasta, read_tsv

from workflow_lib.models import classifier
from workflow_lib.seqio import read_records

SNAKEMAKE = [
    sys.executable,
    "-m",
    "snakemake",
    "--snakefile",
    str(ROOT / "Snakefile"),
    "--cores",
    "2",
    "--resources",
    "gpu=2",
]
# The rules call `python`: the one running the tests, as in an activated environment.
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
SAMPLES = {"phix": "virus", "gamma": "virus", "plasmid": "other", "mito": "other", "reads": ""}


def write_inputs(workdir: Path) -> None:
    """Samples: real genomes (one bzip2-compressed) and gzipped FASTQ reads cut from lambda."""
    inputs = workdir / "inputs"
    inputs.mkdir()
    shutil.copy(GENOMES / "phiX174.fasta", inputs / "phix.fa")
    shutil.copy(GENOMES / "bacillus_phage_gamma_NC_007458.fasta", inputs / "gamma.fa")
    (inputs / "plasmid.fa.bz2").write_bytes(
        __import__("bz2").compress((GENOMES / "yersinia_pestis_plasmid_pPCP1_NC_005816.fasta").read_bytes())
    )
    shutil.copy(GENOMES / "human_mtDNA.fasta", inputs / "mito.fa")
    ((_, _, lam),) = read_records(GENOMES / "lambda_NC_001416.fasta")
    with gzip.open(inputs / "reads.fq.gz", "wt") as out:
        for i in range(0, 30000, 250):
            read = lam[i : i + 280].decode()
            out.write(f"@read{i} from lambda\n{read}\n+\n{'F' * len(read)}\n")
    paths = {
        "phix": "phix.fa",
        "gamma": "gamma.fa",
        "plasmid": "plasmid.fa.bz2",
        "mito": "mito.fa",
        "reads": "reads.fq.gz",
    }
    (workdir / "samples.tsv").write_text(
        "sample\tpath\tlabel\n"
        + "".join(f"{name}\t{inputs / paths[name]}\t{label}\n" for name, label in SAMPLES.items())
    )


def write_config(workdir: Path, classifier: str = "results/train/classifier.pt", **settings) -> Path:
    """The test config: tiny demo models, and `settings` in place of the top-level keys they name."""
    config = {
        "samples": str(workdir / "samples.tsv"),
        "chunk_length": 300,
        "shards": 2,
        "models": {
            "esm": {"checkpoint": "resources/demo_models/esm2_t2_demo.pt", "layer": 2},
            "dnabert": {"checkpoint": "resources/demo_models/dnabert_s_demo"},
            "classifier": classifier,
        },
        "embedding": {"esm_token_budget": 2048, "dnabert_token_budget": 2048},
        "train": {"epochs": 8},
        **settings,
    }
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("workflow")
    write_inputs(workdir)
    config = write_config(workdir)
    result = subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(config)], capture_output=True, text=True, env=ENV
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir, config


def test_tables_cover_every_record_and_frame(run):
    workdir, _ = run
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


def test_reads_sample_is_called_per_read(run):
    workdir, _ = run
    calls = read_tsv(workdir / "results" / "reads" / "sequences.tsv")
    assert len(calls) == 120 and {c["call"] for c in calls} <= {"virus", "other", "no_coding_frame"}
    assert read_tsv(workdir / "results" / "mito" / "sequences.tsv")[0]["n_chunks"] == "56"


def test_trained_classifier_and_metrics(run):
    workdir, _ = run
    model, metadata = classifier.load(workdir / "results" / "train" / "classifier.pt")
    assert model.input_dim == 48 + 64 and metadata["chunk_length"] == 300
    metrics = yaml.safe_load((workdir / "results" / "train" / "metrics.json").read_text())
    assert set(metrics["validation"]) >= {"accuracy", "precision", "recall", "f1", "roc_auc"}


def test_every_rule_logs_and_rerun_is_a_no_op(run):
    workdir, config = run
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
