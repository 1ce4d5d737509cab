"""The score stage: VirNucPro's classifier over one pooled shard's frames, as soon as its embeddings
files (one per configured model) exist, so that they can go (outputs.keep_embeddings: false) long
before the sample's last shard is embedded.

A shard's scores file is NumPy .npz, so that predict reads it without h5py or torch (its arrays:
docs/outputs.md), with the digest of each pooled sample's shard's frame IDs for predict to check.
"""

import json
import logging
from pathlib import Path

import numpy as np
import torch

from workflow_lib.cli.errors import InputError
from workflow_lib.cli.progress import Progress
from workflow_lib.io import checksums, h5store
from workflow_lib.io.outputs import atomic_path
from workflow_lib.models import classifier
from workflow_lib.models.classifier_chunks import embedders_refusal
from workflow_lib.prepare.reconcile import IDDigest

log = logging.getLogger("workflow")

# Frames scored at a time: one float32 block of their features, whatever the shard's size.
SCORE_ROWS = 32768


def score_shard(
    embeddings: list[str | Path],
    classifier_path: str | Path,
    output: str | Path,
    progress_seconds: float,
    pieces: list[tuple[str, int, int]] | None = None,
) -> int:
    """Score every frame of one pooled shard into its scores file `output`, the shard made of
    `pieces` (each sample's shard: sample, shard, frames; in order) from its `embeddings` (a file per
    configured model, in the classifier's input order); return the number of frames."""
    model, metadata = classifier.load(classifier_path)
    with h5store.FeatureBlocks(*embeddings, rows=SCORE_ROWS) as blocks:
        if blocks.dim != model.input_dim:
            raise InputError(
                f"{' + '.join(map(str, blocks.paths))}: {blocks.dim} features per frame but the classifier "
                f"takes {model.input_dim}; use the classifier trained for these models"
            )
        made_with = {  # each embedding model's checkpoint
            str(attrs["model"]): {
                "checkpoint": str(attrs["checkpoint"]),
                "layer": int(attrs["layer"]),
                "precision": str(attrs["precision"]),
                "sha256": json.loads(attrs.get("checkpoint_sha256", "{}")),
            }
            for attrs in blocks.attrs
        }
        models = [(str(attrs["model"]), dim) for attrs, dim in zip(blocks.attrs, blocks.dims)]
        if refusal := embedders_refusal(classifier_path, metadata, models):
            raise InputError(refusal)
        made_with["classifier"] = {"path": str(classifier_path), "sha256": checksums.sha256(classifier_path)}
        progress = Progress(log, "frames", total=blocks.n, interval=progress_seconds)
        frames = [n for _, _, n in pieces] if pieces else [blocks.n]
        if sum(frames) != blocks.n:
            raise InputError(
                f"{embeddings[0]}: {blocks.n} frames where the plan's shards hold {sum(frames)}; "
                "delete it and run again"
            )
        ends = np.cumsum(frames)
        digests, scores = [IDDigest() for _ in frames], np.empty((blocks.n, 2), dtype=np.float32)
        atypicality = np.empty(blocks.n, dtype=np.float32)
        for rows, ids, features in blocks:
            probabilities, atypical = classifier.scores_and_atypicality(model, torch.from_numpy(features))
            scores[rows], atypicality[rows] = probabilities.numpy(), atypical.numpy()
            piece = np.searchsorted(ends, np.arange(rows.start, rows.stop), side="right")
            for p in np.unique(piece).tolist():
                digests[p].update([i.encode() for i in np.asarray(ids, dtype=object)[piece == p]])
            progress.update(rows.stop)
    with atomic_path(output) as tmp, open(tmp, "wb") as handle:  # a file object: savez adds no suffix
        pooled = {"piece_samples": [p[0] for p in pieces or ()], "piece_shards": [p[1] for p in pieces or ()]}
        np.savez(
            handle,
            scores=scores,
            atypicality=atypicality,
            **({k: np.array(v) for k, v in pooled.items()} if pieces else {}),
            pieces=np.array(frames, dtype=np.int64),
            ids_blake2b=np.array([d.hash.hexdigest() for d in digests]),
            checkpoints=json.dumps(made_with),
        )
    log.info(progress.line(blocks.n, f"scored into {output}"))
    return blocks.n
