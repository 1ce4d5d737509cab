"""Model code: ESM-2 (through fair-esm), DNABERT-S (native), the VirNucPro MLP classifier, their
tokenizers, checkpoints and attention over packed rows; and the tooling of their files: fetching
them into the cache, checking them, building the tiny demo models.

The two embedding models share one interface, by the names the config and the HDF5 files use:
each one's loading module (esm_loading, dnabert_loading; their forwards are in esm and dnabert)
gives resolve, read_config, checkpoint_files, load and embedder, with the same arguments
(checkpoint: a local path or a name to fetch; cache_dir: where fetch_models put it).

May import: cli, io.
"""

import importlib
from types import ModuleType

from workflow_lib.cli.settings import MODELS

EMBEDDING_MODELS = dict(zip(MODELS, ("ESM-2", "DNABERT-S")))  # display names, in the order of MODELS


def embedding_model(name: str) -> ModuleType:
    """The module of an embedding model, imported when first asked for (fair-esm and torch take seconds)."""
    if name not in EMBEDDING_MODELS:
        raise ValueError(f"no embedding model '{name}': one of {', '.join(EMBEDDING_MODELS)}")
    return importlib.import_module(f"{__name__}.{name}_loading")
