"""The embeddings HDF5 contract: dataset `ids` (UTF-8, shard FASTA order), dataset
`embeddings` (float32 [N, D]), and attributes describing how they were made."""

from pathlib import Path

import h5py
import numpy as np

from .errors import InputError
from .outputs import atomic_path

REQUIRED_ATTRS = ("model", "checkpoint", "layer", "dim", "precision", "pooling", "n_tokens", "workflow_version")


def write(path: str | Path, ids: list[str], embeddings: np.ndarray, attrs: dict) -> None:
    missing = [a for a in REQUIRED_ATTRS if a not in attrs]
    assert not missing, f"HDF5 attributes missing: {missing}"
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as out:
        out.create_dataset("ids", data=np.array(ids, dtype=object), dtype=h5py.string_dtype("utf-8"))
        out.create_dataset("embeddings", data=np.asarray(embeddings, dtype=np.float32))
        for key, value in attrs.items():
            out.attrs[key] = value


def read(path: str | Path) -> tuple[list[str], np.ndarray, dict]:
    try:
        with h5py.File(path, "r") as handle:
            ids = [i.decode() if isinstance(i, bytes) else i for i in handle["ids"][()]]
            return ids, handle["embeddings"][()], dict(handle.attrs)
    except (OSError, KeyError) as error:
        raise InputError(
            f"{path}: not a readable embeddings file ({error}); delete it and run the workflow again"
        ) from None


def read_features(dnabert_path: str | Path, esm_path: str | Path) -> tuple[list[str], np.ndarray, dict[str, dict]]:
    """One shard's classifier input: DNABERT-S then ESM-2 embedding per frame (VirNucPro's order),
    and each model's attributes."""
    dna_ids, dna, dna_attrs = read(dnabert_path)
    esm_ids, esm, esm_attrs = read(esm_path)
    if dna_ids != esm_ids:
        raise InputError(f"{dnabert_path} and {esm_path} hold different frames; delete both and run again")
    return dna_ids, np.concatenate([dna, esm], axis=1), {"dnabert": dna_attrs, "esm": esm_attrs}
