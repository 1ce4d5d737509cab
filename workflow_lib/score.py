"""The score stage: VirNucPro's classifier over one shard's frames, as soon as both of its
embeddings files exist, so that they can go (outputs.keep_embeddings: false) long before the
sample's last shard is embedded.

A shard's scores file (HDF5): dataset `scores` ([N, 2] float32: others, virus; the shard FASTA's
order); attributes `frames` (N), `ids_blake2b` (the digest of its frame IDs in order: predict checks
it against prepare's frames table) and `checkpoints` (JSON: each embedding model's checkpoint,
layer, precision and SHA-256, and the classifier's path and SHA-256). 8 bytes a frame."""

import json
import logging
from pathlib import Path

import h5py
import numpy as np
import torch

from . import checksums, h5store
from .errors import InputError
from .models import classifier
from .outputs import atomic_path
from .progress import Progress
from .reconcile import IDDigest

log = logging.getLogger("workflow")

# Frames scored at a time: one float32 block of their features (32,768 x (768 + 2560) is 436 MB at
# production width), whatever the shard's size.
SCORE_ROWS = 32768


def score_shard(
    dnabert_path: str | Path,
    esm_path: str | Path,
    classifier_path: str | Path,
    output: str | Path,
    progress_seconds: float,
) -> int:
    """Score every frame of one shard into its scores file `output`; return the number of frames."""
    model, _ = classifier.load(classifier_path)
    with h5store.FeatureBlocks(dnabert_path, esm_path, rows=SCORE_ROWS) as blocks:
        made_with = _made_with(blocks, model)
        made_with["classifier"] = {"path": str(classifier_path), "sha256": checksums.sha256(classifier_path)}
        progress = Progress(log, "frames", total=blocks.n, interval=progress_seconds)
        digest = IDDigest()
        with atomic_path(output) as tmp, h5py.File(tmp, "w") as handle:
            scores = handle.create_dataset("scores", shape=(blocks.n, 2), dtype=np.float32)
            for rows, ids, features in blocks:
                scores[rows] = classifier.scores(model, torch.from_numpy(features)).numpy()
                digest.update([i.encode() for i in ids])
                progress.update(rows.stop)
            handle.attrs.update(frames=blocks.n, ids_blake2b=digest.hash.hexdigest(), checkpoints=json.dumps(made_with))
    log.info(progress.line(blocks.n, f"scored into {output}"))
    return blocks.n


def _made_with(blocks: h5store.FeatureBlocks, model) -> dict[str, dict]:
    """Each embedding model's checkpoint; features as wide as the classifier's input."""
    if blocks.dim != model.input_dim:
        raise InputError(
            f"{blocks.paths[0]} + {blocks.paths[1]}: {blocks.dim} features per frame but the classifier "
            f"takes {model.input_dim}; use the classifier trained for these models"
        )
    return {
        name: {
            "checkpoint": str(attrs["checkpoint"]),
            "layer": int(attrs["layer"]),
            "precision": str(attrs["precision"]),
            "sha256": json.loads(attrs.get("checkpoint_sha256", "{}")),
        }
        for name, attrs in blocks.attrs.items()
    }


class ShardScores:
    """A scores file read in order, a run of rows at a time, its frame IDs digested as they are
    matched to prepare's frames table. Use as a context manager."""

    def __init__(self, path: str | Path, shard: int):
        self.path, self.shard = Path(path), shard
        try:
            self.handle = h5py.File(path, "r")
            self.scores = self.handle["scores"]
            self.attrs = dict(self.handle.attrs)
            self.checkpoints = json.loads(self.attrs["checkpoints"])
        except (OSError, KeyError, ValueError) as error:
            raise InputError(f"{path}: not a readable scores file ({error}); delete it and run again") from None
        self.next_row, self.digest = 0, IDDigest()

    def __enter__(self) -> "ShardScores":
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()

    def read(self, frame_ids: list[str]) -> np.ndarray:
        """The scores of the next len(frame_ids) frames, which the frames table names `frame_ids`."""
        start, stop = self.next_row, self.next_row + len(frame_ids)
        if stop > self.scores.shape[0]:
            self._disagree(f"holds {self.scores.shape[0]} frames where the frames table lists more")
        self.digest.update([i.encode() for i in frame_ids])
        self.next_row = stop
        return self.scores[start:stop]

    def finish(self) -> None:
        """Fail unless every row was read, for the very frames the scores were made from."""
        if self.next_row != self.scores.shape[0]:
            self._disagree(f"holds {self.scores.shape[0]} frames where the frames table lists {self.next_row}")
        if self.digest.hash.hexdigest() != self.attrs["ids_blake2b"]:
            self._disagree("was made from other frames than the frames table lists")

    def _disagree(self, what: str) -> None:
        raise InputError(
            f"{self.path}: the scores do not match shard {self.shard} of the frames table (it {what}); delete the "
            "sample's prepare outputs and run again"
        )
