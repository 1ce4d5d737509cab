"""Before any embedding job: the models' sizes, and the classifier's input size and chunk length against them."""

import json
import logging
from pathlib import Path

from . import checksums
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
    chunk_length: int,
) -> dict:
    layers, esm_dim = esm.read_config(esm_checkpoint)
    if not 0 <= esm_layer <= layers:
        raise InputError(f"models.esm.layer: {esm_layer} is out of range for {esm_checkpoint} ({layers} layers)")
    dnabert_dir = dnabert.resolve(dnabert_checkpoint, cache_dir)
    dnabert_dim = dnabert.read_config(dnabert_dir)["hidden_size"]
    # A named ESM-2 model is fetched before this check in a run; by hand without it, it has no files here.
    report = {
        "esm": {
            "checkpoint": esm_checkpoint,
            "layers": layers,
            "layer": esm_layer,
            "dim": esm_dim,
            "files": checksums.describe(esm.checkpoint_files(esm_checkpoint, cache_dir)),
        },
        "dnabert": {
            "checkpoint": dnabert_checkpoint,
            "dim": dnabert_dim,
            "files": checksums.describe(dnabert.checkpoint_files(dnabert_dir)),
        },
    }
    if classifier_path:
        classifier.check_fits(classifier_path, dnabert_dim, esm_dim, chunk_length)
        report["classifier"] = {
            "path": str(classifier_path),
            "input_dim": dnabert_dim + esm_dim,
            "files": checksums.describe([Path(classifier_path)]),
        }
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


def known_checksums(report_path: str | None, model: str) -> dict | None:
    """The model check's file checksums for `model` ("esm" or "dnabert"), to reuse in embed jobs."""
    if not report_path:
        return None
    return json.loads(Path(report_path).read_text()).get(model, {}).get("files")
