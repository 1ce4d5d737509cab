"""The predict stage: join each frame's two embeddings on prepare's frames table and classify.
It writes the frames table (a score per frame), the chunks table (VirNucPro's call per chunk),
the scoring JSON (the checkpoints with their SHA-256) and optionally VirNucPro's own tables.
Calls per record are the call stage's (call.py), so that a new threshold needs no embeddings."""

import csv
import json
import logging
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from . import checksums, h5store
from .errors import InputError
from .models import classifier
from .outputs import atomic_open
from .progress import Progress
from .tables import CHUNKS, FRAMES, read_table, write_json, write_tsv

log = logging.getLogger("workflow")


class ScoreFiles(NamedTuple):
    frames: Path  # the frames table
    chunks: Path  # the chunks table
    scoring: Path  # JSON
    virnucpro: tuple[Path, Path] | None  # VirNucPro's prediction_results.txt and _highestscore.csv, or none


SCORE_ROWS = h5store.BLOCK_ROWS  # frames read and scored at a time, per shard


def check_tables(frames: pd.DataFrame, sequences: pd.DataFrame, frames_path: Path, sequences_path: Path) -> None:
    """Every input record once in the sequences table, every frame once in the frames table, and
    the frames counted per record where they are listed."""
    for table, column, path in ((sequences, "sequence_id", sequences_path), (frames, "frame_id", frames_path)):
        repeated = table[column][table[column].duplicated()]
        if len(repeated):
            raise InputError(
                f"{path}: {len(repeated)} IDs listed more than once (e.g. "
                f"{repeated.head(3).tolist()}); delete the sample's prepare outputs and run again"
            )
    counted = frames["sequence_id"].value_counts()
    listed = sequences.set_index("sequence_id")["n_frames"]
    differ = listed.sub(counted, fill_value=0)
    differ = differ[differ != 0]
    if len(differ):
        raise InputError(
            f"{frames_path} and {sequences_path} disagree on the frames of {len(differ)} records "
            f"(e.g. {differ.index[:3].tolist()}); delete the sample's prepare outputs and run again"
        )


def score_frames(
    frames: pd.DataFrame,
    dnabert_files: list[str],
    esm_files: list[str],
    model,
    progress_seconds: float,
    block_rows: int | None = None,
) -> tuple[np.ndarray, dict[str, dict]]:
    """[N, 2] softmax scores (others, virus) in frames-table order, every frame scored exactly once;
    and each model's checkpoint, the same for every shard. Each shard is read and scored in blocks
    of `block_rows` frames: memory holds one block of features, whatever the shard's size."""
    scores = np.full((len(frames), 2), np.nan, dtype=np.float32)
    progress, done = Progress(log, "frames", total=len(frames), interval=progress_seconds), 0
    shard_of = frames["shard"].to_numpy()
    frame_ids = frames["frame_id"].to_numpy()
    made_with: dict[str, dict] = {}
    for shard, (dna_path, esm_path) in enumerate(zip(dnabert_files, esm_files)):
        with h5store.FeatureBlocks(dna_path, esm_path, block_rows or SCORE_ROWS) as blocks:
            for name, path in (("dnabert", dna_path), ("esm", esm_path)):
                used = _checkpoint(blocks.attrs[name])
                if made_with.setdefault(name, used) != used:
                    raise InputError(
                        f"{path}: made with {used} but shard 0 with {made_with[name]}; delete the sample's "
                        "embeddings and run again"
                    )
            rows = np.flatnonzero(shard_of == shard)
            expected = pd.Index(frame_ids[rows])
            if blocks.dim != model.input_dim:
                raise InputError(
                    f"{dna_path} + {esm_path}: {blocks.dim} features per frame but the classifier "
                    f"takes {model.input_dim}; use the classifier trained for these models"
                )
            counts = np.zeros(rows.size, dtype=np.int64)  # times each of the shard's frames is in the files
            unexpected: list[str] = []
            for read, ids, features in blocks:
                position = expected.get_indexer(ids)
                known = position >= 0
                if not known.all():
                    unexpected += [ids[i] for i in np.flatnonzero(~known)[: 3 - len(unexpected)]]
                    position, features = position[known], features[known]
                np.add.at(counts, position, 1)
                scores[rows[position]] = classifier.scores(model, torch.from_numpy(features)).numpy()
                done += len(position)
                progress.update(done, f"{shard + (read.stop >= blocks.n)} of {len(esm_files)} shards scored")
            if unexpected or (counts != 1).any():
                raise InputError(
                    f"{dna_path}: the embeddings do not match shard {shard} of the frames table (missing "
                    f"{expected[counts == 0][:3].tolist()}, unexpected {unexpected}, repeated "
                    f"{expected[counts > 1][:3].tolist()}); delete the sample's embeddings and run again"
                )
    if np.isnan(scores).any():
        raise InputError(
            f"{len(frames)} frames but only {int((~np.isnan(scores[:, 0])).sum())} scored: "
            "the shard lists do not cover the frames table"
        )
    log.info(progress.line(done, f"{len(esm_files)} of {len(esm_files)} shards scored"))
    return scores, made_with


def _checkpoint(attrs: dict) -> dict:
    return {
        "checkpoint": str(attrs["checkpoint"]),
        "layer": int(attrs["layer"]),
        "precision": str(attrs["precision"]),
        "sha256": json.loads(attrs.get("checkpoint_sha256", "{}")),
    }


def frame_table(frames: pd.DataFrame, scores: np.ndarray) -> pd.DataFrame:
    table = frames[["frame_id", "sequence_id", "chunk", "frame"]].copy()
    table["score_other"], table["score_virus"] = scores[:, 0], scores[:, 1]
    # torch.max picks the first maximum: a tie is 'others', as in VirNucPro.
    table["prediction"] = np.where(scores[:, 1] > scores[:, 0], "virus", "others")
    return table[list(FRAMES)]


def chunk_table(frames: pd.DataFrame) -> pd.DataFrame:
    grouped = frames.groupby(["sequence_id", "chunk"], sort=False)
    table = grouped.agg(
        n_frames=("frame_id", "size"), max_score_other=("score_other", "max"), max_score_virus=("score_virus", "max")
    ).reset_index()
    table["is_virus"] = table["max_score_virus"] >= table["max_score_other"]  # VirNucPro's rule
    return table[list(CHUNKS)]


def write_virnucpro_tables(frames: pd.DataFrame, paths: tuple[Path, Path]) -> None:
    """VirNucPro's prediction_results.txt and prediction_results_highestscore.csv as it writes them:
    scores printed as str() of float32, and chunks (the frame ID less its last two characters)
    sorted by ID, as its pandas groupby does."""
    per_frame, per_chunk = paths
    with atomic_open(per_frame) as handle:
        handle.write("Sequence_ID\tPrediction\tscore1\tscore2\n")
        for fid, prediction, other, virus in zip(
            frames["frame_id"],
            frames["prediction"],
            frames["score_other"].to_numpy(np.float32),
            frames["score_virus"].to_numpy(np.float32),
        ):
            handle.write(f"{fid}\t{prediction}\t{other!s}\t{virus!s}\n")  # str(np.float32), as VirNucPro
    modified = frames.assign(Modified_ID=frames["frame_id"].str[:-2]).groupby("Modified_ID")
    highest = (modified["score_virus"].max() >= modified["score_other"].max()).rename("Is_Virus").reset_index()
    with atomic_open(per_chunk) as handle:
        highest.to_csv(handle, sep="\t", index=False, lineterminator="\n", quoting=csv.QUOTE_NONE)


def score(
    frames_path: str | Path,
    sequences_path: str | Path,
    dnabert_files: list[str],
    esm_files: list[str],
    classifier_path: str | Path,
    outputs: ScoreFiles,
    progress_seconds: float,
) -> dict:
    """Score every frame of prepare's frames table (checked against its sequences table) from the
    shards' embeddings, in shard order; write `outputs`."""
    model, _ = classifier.load(classifier_path)
    # read once, the columns used only: the table orders every output, the embeddings stream by shard
    frames = read_table(frames_path, ["frame_id", "sequence_id", "chunk", "frame", "shard"])
    sequences = read_table(sequences_path, ["sequence_id", "n_frames"])
    check_tables(frames, sequences, Path(frames_path), Path(sequences_path))
    del sequences
    scores, made_with = score_frames(frames, dnabert_files, esm_files, model, progress_seconds)
    frames = frame_table(frames, scores)
    chunks = chunk_table(frames)
    write_tsv(frames, outputs.frames)
    write_tsv(chunks, outputs.chunks)
    if outputs.virnucpro:
        write_virnucpro_tables(frames, outputs.virnucpro)
    made_with["classifier"] = {"path": str(classifier_path), "sha256": checksums.sha256(classifier_path)}
    scoring = {"checkpoints": made_with, "frames": len(frames)}
    write_json(scoring, outputs.scoring)
    log.info("%d frames scored into %s and %s", len(frames), outputs.frames, outputs.chunks)
    return scoring
