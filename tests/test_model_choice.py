"""Model choice: any fair-esm ESM-2 with its layer, and a classifier that fits, checked before any job runs."""

import subprocess
import sys

import pytest
import torch
from helpers import ROOT
from test_bad_input import PHIX, dry_run

from workflow_lib.cli.errors import InputError
from workflow_lib.models import Embedder, classifier
from workflow_lib.workflow.check_models import check_models

SHEET = f"sample\tpath\nphix\t{PHIX}\n"


@pytest.mark.parametrize(
    "esm, expected",
    [
        (
            "checkpoint: esm2_t33_650M_UR50D\n    layer: 36",
            "models.esm.layer: 36 is out of range for esm2_t33_650M_UR50D (33 layers); "
            "set it to 33 (the last layer, as VirNucPro) or lower",
        ),
        (
            "checkpoint: esm2_t36_650M_UR50D",
            "models.esm.checkpoint: 'esm2_t36_650M_UR50D' is no fair-esm ESM-2 model (esm2_t6_8M_UR50D, "
            "esm2_t12_35M_UR50D, esm2_t30_150M_UR50D, esm2_t33_650M_UR50D, esm2_t36_3B_UR50D, esm2_t48_15B_UR50D) "
            "and no local .pt file; fix it",
        ),
    ],
    ids=["layer_out_of_range", "unknown_name"],
)
def test_named_esm2_model_and_layer_are_checked_at_start_up(tmp_path, esm, expected):
    lines = dry_run(tmp_path, SHEET, f"models:\n  esm:\n    {esm}\n")
    assert f"{tmp_path / 'config.yaml'}: {expected}" in lines


def test_650m_with_its_last_layer_is_accepted(tmp_path):
    (tmp_path / "samples.tsv").write_text(SHEET)
    config = tmp_path / "config.yaml"
    # its chunk length is checked at start-up, its input size by the model-check job
    classifier.save(classifier.MLPClassifier(8), tmp_path / "classifier.pt", chunk_length=500)
    config.write_text(
        "samples: samples.tsv\nmodels:\n  esm:\n    checkpoint: esm2_t33_650M_UR50D\n    layer: 33\n"
        "  classifier: classifier.pt\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path)]
        + ["--configfile", str(config)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_classifier_for_3b_is_refused_with_650m(tmp_path, demo_models):
    """VirNucPro's classifiers take DNABERT-S 768 + ESM-2 3B 2560 features: with the 650M model
    (1280) the model check fails before any embedding job, naming both sizes."""
    torch.manual_seed(0)
    dnabert_dim = 48  # the demo DNABERT-S stands in for the real one (768): no download here
    path = tmp_path / "for_3b.pt"
    models = [
        Embedder("dnabert", "dnabert_s", str(demo_models["dnabert"])),
        Embedder("esm", "esm2", "esm2_t33_650M_UR50D", 33),
    ]
    classifier.save(classifier.MLPClassifier(dnabert_dim + 2560), path, chunk_length=500)
    with pytest.raises(InputError) as error:
        check_models(models, str(path), str(tmp_path), tmp_path / "m.json", 500)
    assert str(error.value) == (
        f"{path}: the classifier takes 2608 features but the configured models give 48 (dnabert) + 1280 "
        "(esm) = 1328; use the classifier trained for these models (VirNucPro's: DNABERT-S 768 + ESM-2 3B 2560) "
        "or train one"
    )
    assert not (tmp_path / "m.json").exists()
    classifier.save(classifier.MLPClassifier(dnabert_dim + 1280), path, chunk_length=500)
    report = check_models(models, str(path), str(tmp_path), tmp_path / "m.json", 500)
    assert report["esm"]["dim"] == 1280 and report["classifier"]["input_dim"] == 1328
