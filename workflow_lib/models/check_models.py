"""Before any embedding job: the models' sizes, and the classifier's input size and chunk length against them."""

import logging
from pathlib import Path

from workflow_lib.io import checksums
from workflow_lib.io.tables import read_json, write_json
from workflow_lib.models import EMBEDDING_MODELS, classifier, embedding_model
from workflow_lib.models.checkpoints import check_esm_layer

log = logging.getLogger("workflow")
CHECKSUMS = "checksums.json"  # in models.cache_dir: the model files' SHA-256, kept across runs


def check_models(
    checkpoints: dict[str, str],
    esm_layer: int,
    classifier_path: str | None,
    cache_dir: str,
    output: str | Path,
    chunk_length: int,
    classifier_chunk_length: int | None = None,
) -> dict:
    """`checkpoints`: per embedding model ("esm", "dnabert"), its checkpoint. Writes the report
    (sizes and file checksums, which embed jobs reuse) to `output` (JSON). The checksums are kept
    in cache_dir/CHECKSUMS for the next run (io/checksums.py says when one is reused)."""
    report, store = {}, Path(cache_dir) / CHECKSUMS
    for name, checkpoint in checkpoints.items():
        model = embedding_model(name)
        config = model.read_config(checkpoint, cache_dir)
        # A named ESM-2 model is fetched before this check in a run; by hand without it, it has no files here.
        files = checksums.describe_kept(model.checkpoint_files(checkpoint, cache_dir), store)
        report[name] = {"checkpoint": checkpoint, "layers": config["layers"], "dim": config["dim"], "files": files}
    check_esm_layer(checkpoints["esm"], esm_layer, report["esm"]["layers"])
    report["esm"]["layer"] = esm_layer
    esm_dim, dnabert_dim = report["esm"]["dim"], report["dnabert"]["dim"]
    if classifier_path:
        classifier.check_fits(classifier_path, dnabert_dim, esm_dim, chunk_length, classifier_chunk_length)
        report["classifier"] = {
            "path": str(classifier_path),
            "input_dim": dnabert_dim + esm_dim,
            "files": checksums.describe_kept([Path(classifier_path)], store),
        }
    write_json(report, output)
    log.info(
        "models agree: %s %d + %s layer %d of %d, %d = %d features",
        EMBEDDING_MODELS["dnabert"],
        dnabert_dim,
        EMBEDDING_MODELS["esm"],
        esm_layer,
        report["esm"]["layers"],
        esm_dim,
        dnabert_dim + esm_dim,
    )
    return report


def known_checksums(report_path: str, model: str) -> dict:
    """The model check's file checksums for `model` ("esm" or "dnabert"), to reuse in embed jobs."""
    return read_json(report_path)[model]["files"]
