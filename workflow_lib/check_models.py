"""Before any embedding job: the models' sizes, and the classifier's input size against them."""

import json
import logging
from pathlib import Path

from .errors import InputError
from .models import classifier, dnabert, esm
from .outputs import atomic_open

log = logging.getLogger("workflow")


def check_models(
    esm_checkpoint: str,
    esm_layer: int,
    dnabert_checkpoint: str,
    classifier_path: str | None,
    cache_dir: str | None,
    output: str | Path,
) -> dict:
    layers, esm_dim = esm.read_config(esm_checkpoint)
    if not 0 <= esm_layer <= layers:
        raise InputError(f"models.esm.layer: {esm_layer} is out of range for {esm_checkpoint} ({layers} layers)")
    dnabert_dim = dnabert.read_config(dnabert.resolve(dnabert_checkpoint, cache_dir))["hidden_size"]
    report = {
        "esm": {"checkpoint": esm_checkpoint, "layers": layers, "layer": esm_layer, "dim": esm_dim},
        "dnabert": {"checkpoint": dnabert_checkpoint, "dim": dnabert_dim},
    }
    if classifier_path:
        classifier.check_input_dim(classifier_path, dnabert_dim, esm_dim)
        report["classifier"] = {"path": str(classifier_path), "input_dim": dnabert_dim + esm_dim}
    with atomic_open(output) as handle:
        json.dump(report, handle, indent=2)
    log.info(
        "models agree: DNABERT-S %d + ESM-2 layer %d of %d, %d = %d features",
        dnabert_dim,
        esm_layer,
        layers,
        esm_dim,
        dnabert_dim + esm_dim,
    )
    return report
