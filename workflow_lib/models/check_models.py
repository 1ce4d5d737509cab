"""Before any embedding job: the models' sizes, and a classifier's input size and chunk length against them."""

import logging
from pathlib import Path

from workflow_lib.io import checksums
from workflow_lib.io.tables import read_json, write_json
from workflow_lib.models import Embedder, loading_module
from workflow_lib.models.checkpoints import check_layer

log = logging.getLogger("workflow")
CHECKSUMS = "checksums.json"  # in models.cache_dir: the model files' SHA-256, kept across runs


def check_models(
    embedders: list[Embedder],
    classifier_path: str | None,
    cache_dir: str,
    output: str | Path,
    chunk_length: int,
    classifier_chunk_length: int | None = None,
) -> dict:
    """Write the report of the configured models (per model its architecture, layers, width, layer
    and file checksums, which embed jobs reuse) to `output`; the checksums are kept in
    cache_dir/CHECKSUMS for the next run."""
    report, store = {}, Path(cache_dir) / CHECKSUMS
    for embedder in embedders:
        model = loading_module(embedder.architecture)
        config = model.read_config(embedder.checkpoint, cache_dir)
        check_layer(embedder.name, embedder.checkpoint, embedder.layer, config["layers"])
        # A named model is fetched before this check in a run; by hand without it, it has no files here.
        files = checksums.describe_kept(model.checkpoint_files(embedder.checkpoint, cache_dir), store)
        report[embedder.name] = {
            "architecture": embedder.architecture,
            "checkpoint": embedder.checkpoint,
            "layers": config["layers"],
            "layer": embedder.layer,
            "dim": config["dim"],
            "files": files,
        }
    if classifier_path and Path(classifier_path).is_file():  # a URL's: once fetch_classifier has it
        from workflow_lib.models import classifier  # torch: the tokenize job (known_checksums) does without

        widths = [(name, entry["dim"]) for name, entry in report.items()]
        classifier.check_fits(classifier_path, widths, chunk_length, classifier_chunk_length)
    write_json(report, output)
    log.info(
        "models agree: %s = %d features",
        " + ".join(f"{e.declared.display_name} {report[e.name]['dim']}" for e in embedders),
        sum(entry["dim"] for entry in report.values()),
    )
    return report


def known_checksums(report_path: str, model: str) -> dict:
    """The model check's file checksums for `model` (its name in models.embedders), to reuse in its jobs."""
    return read_json(report_path)[model]["files"]
