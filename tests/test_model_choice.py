"""Model choice: any fair-esm ESM-2 with its layer, the embedding models listed in the config (a
third one by config alone), and a classifier that fits, checked before any job runs."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from helpers import ENV, GENOMES, ROOT, SNAKEMAKE, read_embeddings, read_tsv, seed_demo_models, write_config
from test_bad_input import PHIX, dry_run

from workflow_lib.cli.errors import InputError
from workflow_lib.models import Embedder, classifier, classifier_chunks
from workflow_lib.models.check_models import check_models
from workflow_lib.models.demo_models import build_esm

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
    assert report["esm"]["dim"] == 1280 and report.keys() == {"dnabert", "esm"}


@pytest.mark.parametrize(
    "models, expected",
    [
        (
            "embedders: [dnabert, esm, esm]\n",
            "models.embedders: ['dnabert', 'esm', 'esm'] has non-unique elements; fix it (config/schema.yaml "
            "describes every key)",
        ),
        (
            "embedders: [dnabert, esm, esm_small]\n",
            "models.embedders: 'esm_small' has no entry models.esm_small with its architecture and checkpoint; "
            "add one (config/README.md) or remove it from the list",
        ),
        (
            "embedders: [dnabert, esm, esm_small]\n  esm_small:\n    checkpoint: small.pt\n",
            "models.esm_small.architecture: not given; fix it (config/schema.yaml describes every key)",
        ),
        (
            "embedders: [dnabert, esm, esm_small]\n  esm_small:\n    checkpoint: small.pt\n    architecture: esm3\n",
            "models.esm_small.architecture: 'esm3' is not one of ['esm2', 'dnabert_s']; fix it (config/schema.yaml "
            "describes every key)",
        ),
        (
            "dnabert:\n    layer: 3\n",
            "models.dnabert.layer: 3 is not allowed (dnabert_s embeds with its last hidden state; set the layer to "
            "null); fix it (config/schema.yaml describes every key)",
        ),
    ],
    ids=["duplicate", "no_entry", "no_architecture", "unknown_architecture", "layer_of_dnabert_s"],
)
def test_a_bad_model_list_is_refused_at_start_up_in_one_line(tmp_path, models, expected):
    lines = dry_run(tmp_path, SHEET, f"models:\n  {models}")
    assert without_notes(lines) == [f"{tmp_path / 'config.yaml'}: {expected}"]


def without_notes(lines: list[str]) -> list[str]:
    """A dry run's lines less Snakemake's note on the config files."""
    return [line for line in lines if not line.startswith("Config file ")]


def test_a_classifier_trained_on_other_models_is_refused_at_start_up(tmp_path):
    """The train target's classifier records its models and their widths: one trained on two
    models is refused for three, and one trained on ESM-2 650M's 1280 features for the 3B's 2560."""
    path = tmp_path / "classifier.pt"
    embedders = [["dnabert", 768], ["esm", 1280]]
    classifier.save(classifier.MLPClassifier(2048), path, chunk_length=500, embedders=embedders)
    three = "embedders: [dnabert, esm, esm_small]\n  esm_small:\n    checkpoint: small.pt\n    architecture: esm2\n"
    lines = dry_run(tmp_path, SHEET, f"models:\n  {three}  classifier: classifier.pt\n")
    assert without_notes(lines) == [
        f"{tmp_path / 'config.yaml'}: models.classifier: classifier.pt: the classifier was trained on the models "
        "dnabert, esm (in that order) but models.embedders lists dnabert, esm, esm_small; list those models, or "
        "train a classifier on these"
    ]
    lines = dry_run(tmp_path, SHEET, "models:\n  classifier: classifier.pt\n")
    assert without_notes(lines) == [
        f"{tmp_path / 'config.yaml'}: models.classifier: classifier.pt:"
        " the classifier was trained on 1280 features of esm but its checkpoint "
        "gives 2560; configure the checkpoint it was trained on, or train a classifier on this one"
    ]


# A second, smaller ESM-2 than the demo's (2 layers, 64 wide), in fair-esm's format
SMALL_ESM = {"encoder_layers": 1, "encoder_embed_dim": 32, "encoder_attention_heads": 2, "token_dropout": True}
THREE_MODELS = {"dnabert": 48, "esm": 64, "esm_small": 32}  # the demo DNABERT-S, the demo ESM-2, SMALL_ESM


@pytest.mark.slow
def test_a_third_model_runs_end_to_end_by_config_alone(tmp_path, demo_models):
    """A third embedding model, a second ESM-2 of another size, added by config alone (its entry
    and models.embedders): the train target trains a classifier on the three models' features,
    which records them, then the workflow embeds every shard with each of them, scores the shards
    with that classifier and writes the tables."""
    genomes = {
        "phix": ("phiX174.fasta", "virus"),
        "plasmid": ("yersinia_pestis_plasmid_pPCP1_NC_005816.fasta", "other"),
    }
    sheet = "".join(f"{name}\t{GENOMES / file}\t{label}\n" for name, (file, label) in genomes.items())
    (tmp_path / "samples.tsv").write_text("sample\tpath\tlabel\n" + sheet)
    small = build_esm(tmp_path / "esm_small.pt", seed=1, config=SMALL_ESM)
    seed_demo_models(demo_models["esm"].parent, tmp_path)
    config = yaml.safe_load(write_config(tmp_path).read_text())
    config["models"] |= {
        "embedders": list(THREE_MODELS),
        "esm_small": {"architecture": "esm2", "checkpoint": str(small)},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    options = ["--directory", str(tmp_path), "--configfile", str(tmp_path / "config.yaml")]

    result = subprocess.run(
        [*SNAKEMAKE[:5], "train", *SNAKEMAKE[5:], *options], capture_output=True, text=True, env=ENV
    )
    assert result.returncode == 0, result.stderr[-3000:]
    recorded = classifier_chunks.recorded_metadata(tmp_path / "results/train/classifier.pt")
    assert recorded["embedders"] == [list(width) for width in THREE_MODELS.items()] and recorded["input_dim"] == 144

    result = subprocess.run([*SNAKEMAKE, *options], capture_output=True, text=True, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    embeddings = tmp_path / "results/shards/embeddings"
    shards = {model: sorted(p.name for p in (embeddings / model).glob("*.h5")) for model in THREE_MODELS}
    assert shards["esm"] and shards["dnabert"] == shards["esm"] == shards["esm_small"]
    for model, width in THREE_MODELS.items():
        for shard in shards[model]:
            _, values, attrs = read_embeddings(embeddings / model / shard)
            assert (attrs["model"], values.shape[1]) == (model, width)
    for scores in (tmp_path / "results/shards/scores").glob("*.npz"):
        assert list(json.loads(str(np.load(scores)["checkpoints"]))) == [*THREE_MODELS, "classifier"]
    for sample in genomes:
        assert read_tsv(tmp_path / "results" / sample / "sequences.tsv")
        summary = json.loads((tmp_path / "results" / sample / "run_summary.json").read_text())
        assert list(summary["timings"]["embed"]) == list(THREE_MODELS)
