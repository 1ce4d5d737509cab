"""The predict stage, in two steps, so that a new threshold needs no embeddings (which may be gone):

- score: join each frame's two embeddings on the frames table and classify; in `outdir`
  frames.tsv, chunks.tsv, scoring.json (the checkpoints with their SHA-256) and optionally
  VirNucPro's prediction_results.txt and prediction_results_highestscore.csv;
- call: from chunks.tsv, a call per input record against the threshold: sequences.tsv (every
  input record), viral.fasta, manifest.json (the checkpoints and the reconciled counts).
"""

import csv
import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from . import __version__, checksums, h5store
from .errors import InputError
from .models import classifier
from .outputs import atomic_open
from .progress import Progress
from .seqio import read_batches

log = logging.getLogger("workflow")
FLOAT = "%.6g"
SCORE_ROWS = 65536  # frames scored between two progress checks


def read_table(path: str | Path) -> pd.DataFrame:
    """A table of prepare or predict. QUOTE_NONE and no default NA: record IDs are taken verbatim
    from headers and may hold quote characters or read "NA"; NA in a score column marks a record
    with no scored chunk."""
    na = {column: ["NA"] for column in ("viral_fraction", "max_score_virus", "mean_score_virus")}
    return pd.read_csv(
        path,
        sep="\t",
        keep_default_na=False,
        na_values=na,
        dtype={"frame_id": str, "sequence_id": str},
        quoting=csv.QUOTE_NONE,
    )


def check_tables(frames: pd.DataFrame, sequences: pd.DataFrame, prepare_dir: Path) -> None:
    """Every input record once in the sequences table, every frame once in the frames table, and
    the frames counted per record where they are listed."""
    for table, column, name in ((sequences, "sequence_id", "sequences"), (frames, "frame_id", "frames")):
        repeated = table[column][table[column].duplicated()]
        if len(repeated):
            raise InputError(
                f"{prepare_dir / name}.tsv.gz: {len(repeated)} IDs listed more than once (e.g. "
                f"{repeated.head(3).tolist()}); delete the prepare directory and run again"
            )
    counted = frames["sequence_id"].value_counts()
    listed = sequences.set_index("sequence_id")["n_frames"]
    differ = listed.sub(counted, fill_value=0)
    differ = differ[differ != 0]
    if len(differ):
        raise InputError(
            f"{prepare_dir}: the frames table and the sequences table disagree on the frames of "
            f"{len(differ)} records (e.g. {differ.index[:3].tolist()}); delete the prepare directory and run again"
        )


def score_frames(
    frames: pd.DataFrame, dnabert_files: list[str], esm_files: list[str], model, progress_seconds: float = 30.0
) -> tuple[np.ndarray, dict[str, dict]]:
    """[N, 2] softmax scores (others, virus) in frames-table order, every frame scored exactly once;
    and each model's checkpoint, the same for every shard."""
    scores = np.full((len(frames), 2), np.nan, dtype=np.float32)
    progress, done = Progress(log, "frames", total=len(frames), interval=progress_seconds), 0
    shard_of = frames["shard"].to_numpy()
    made_with: dict[str, dict] = {}
    for shard, (dna_path, esm_path) in enumerate(zip(dnabert_files, esm_files)):
        ids, features, attrs = h5store.read_features(dna_path, esm_path)
        for name, path in (("dnabert", dna_path), ("esm", esm_path)):
            used = _checkpoint(attrs[name])
            if made_with.setdefault(name, used) != used:
                raise InputError(
                    f"{path}: made with {used} but shard 0 with {made_with[name]}; delete the sample's "
                    "embeddings and run again"
                )
        rows = np.flatnonzero(shard_of == shard)
        expected = frames["frame_id"].to_numpy()[rows]
        index = pd.Index(ids)
        position = index.get_indexer(expected) if index.is_unique else None
        if position is None or len(ids) != rows.size or (position < 0).any():
            missing = sorted(set(expected) - set(ids))
            extra = sorted(set(ids) - set(expected))
            raise InputError(
                f"{dna_path}: the embeddings do not match shard {shard} of the frames table "
                f"(missing {missing[:3]}, unexpected {extra[:3]}); delete the sample's embeddings and run again"
            )
        if features.shape[1] != model.input_dim:
            raise InputError(
                f"{dna_path} + {esm_path}: {features.shape[1]} features per frame but the classifier "
                f"takes {model.input_dim}; use the classifier trained for these models"
            )
        for start in range(0, rows.size, SCORE_ROWS):
            part = slice(start, start + SCORE_ROWS)
            scores[rows[part]] = classifier.scores(model, torch.from_numpy(features[position[part]])).numpy()
            done += len(position[part])
            progress.update(done, f"{shard + (part.stop >= rows.size)} of {len(esm_files)} shards scored")
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
    return table


def chunk_table(frames: pd.DataFrame) -> pd.DataFrame:
    grouped = frames.groupby(["sequence_id", "chunk"], sort=False)
    table = grouped.agg(
        n_frames=("frame_id", "size"), max_score_other=("score_other", "max"), max_score_virus=("score_virus", "max")
    ).reset_index()
    table["is_virus"] = table["max_score_virus"] >= table["max_score_other"]  # VirNucPro's rule
    return table


def sequence_table(sequences: pd.DataFrame, chunks: pd.DataFrame, min_viral_fraction: float) -> pd.DataFrame:
    per_sequence = chunks.groupby("sequence_id", sort=False).agg(
        n_chunks_scored=("chunk", "size"),
        n_viral_chunks=("is_virus", "sum"),
        max_score_virus=("max_score_virus", "max"),
        mean_score_virus=("max_score_virus", "mean"),
    )
    table = sequences[["sequence_id", "length", "n_chunks", "status"]].join(per_sequence, on="sequence_id")
    scored = table["n_chunks_scored"].notna()
    table["n_chunks_scored"] = table["n_chunks_scored"].fillna(0).astype(int)
    table["n_viral_chunks"] = table["n_viral_chunks"].fillna(0).astype(int)
    table["viral_fraction"] = np.where(scored, table["n_viral_chunks"] / table["n_chunks_scored"].clip(lower=1), np.nan)
    table["call"] = np.select(
        [~scored, table["viral_fraction"] >= min_viral_fraction], ["no_coding_frame", "virus"], "other"
    )
    columns = [
        "sequence_id",
        "length",
        "n_chunks",
        "n_chunks_scored",
        "n_viral_chunks",
        "viral_fraction",
        "max_score_virus",
        "mean_score_virus",
        "call",
        "status",
    ]
    return table[columns]


def write_tsv(table: pd.DataFrame, path: Path) -> None:
    with atomic_open(path) as handle:
        table.to_csv(
            handle, sep="\t", index=False, float_format=FLOAT, na_rep="NA", lineterminator="\n", quoting=csv.QUOTE_NONE
        )


def write_virnucpro_tables(frames: pd.DataFrame, outdir: Path) -> None:
    """prediction_results.txt and prediction_results_highestscore.csv as VirNucPro writes them:
    scores printed as str() of float32, and chunks (the frame ID less its last two characters)
    sorted by ID, as its pandas groupby does."""
    with atomic_open(outdir / "prediction_results.txt") as handle:
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
    with atomic_open(outdir / "prediction_results_highestscore.csv") as handle:
        highest.to_csv(handle, sep="\t", index=False, lineterminator="\n", quoting=csv.QUOTE_NONE)


def write_viral_fasta(input_path: str | Path, calls: pd.DataFrame, path: Path) -> None:
    """The records called virus, as in the input (soft-masking kept), their scores added to the header."""
    viral = calls.loc[calls["call"] == "virus"].set_index("sequence_id")
    scores = {
        sid.encode(): b" virus_score=%.4g viral_fraction=%.4g" % (best, fraction)
        for sid, best, fraction in zip(viral.index, viral["max_score_virus"], viral["viral_fraction"])
    }
    with atomic_open(path, "wb") as handle:
        for batch in read_batches(input_path, keep_case=True):
            offsets = batch.offsets()
            for i, (record_id, header) in enumerate(zip(batch.ids, batch.headers)):
                if record_id in scores:
                    seq = batch.buf[offsets[i] : offsets[i + 1]]
                    wrapped = b"\n".join(seq[j : j + 60] for j in range(0, len(seq), 60))
                    handle.write(b">%s%s\n%s\n" % (header, scores[record_id], wrapped))


def score(
    prepare_dir: str | Path,
    dnabert_files: list[str],
    esm_files: list[str],
    classifier_path: str | Path,
    outdir: str | Path,
    virnucpro_tables: bool = True,
    progress_seconds: float = 30.0,
) -> dict:
    """Score every frame; write frames.tsv, chunks.tsv, scoring.json and VirNucPro's tables."""
    prepare_dir, outdir = Path(prepare_dir), Path(outdir)
    model, _ = classifier.load(classifier_path)
    frames = read_table(prepare_dir / "frames.tsv.gz")
    check_tables(frames, read_table(prepare_dir / "sequences.tsv.gz"), prepare_dir)
    scores, made_with = score_frames(frames, dnabert_files, esm_files, model, progress_seconds)
    frames = frame_table(frames, scores)
    chunks = chunk_table(frames)
    write_tsv(frames, outdir / "frames.tsv")
    write_tsv(chunks, outdir / "chunks.tsv")
    if virnucpro_tables:
        write_virnucpro_tables(frames, outdir)
    made_with["classifier"] = {"path": str(classifier_path), "sha256": checksums.sha256(classifier_path)}
    scoring = {"checkpoints": made_with, "frames": len(frames)}
    _write_json(scoring, outdir / "scoring.json")
    log.info("%d frames scored; tables in %s", len(frames), outdir)
    return scoring


def call(
    prepared_sequences: str | Path,
    chunks_path: str | Path,
    scoring_path: str | Path,
    input_path: str | Path,
    outdir: str | Path,
    min_viral_fraction: float = 0.5,
) -> dict:
    """A call per input record from its scored chunks; write sequences.tsv, viral.fasta and
    manifest.json. Returns the count of each call."""
    outdir = Path(outdir)
    sequences = read_table(prepared_sequences)
    chunks = read_table(chunks_path)
    scoring = json.loads(Path(scoring_path).read_text())
    calls = sequence_table(sequences, chunks, min_viral_fraction)
    write_tsv(calls, outdir / "sequences.tsv")
    write_viral_fasta(input_path, calls, outdir / "viral.fasta")
    counts = calls["call"].value_counts().to_dict()
    manifest = {
        "workflow_version": __version__,
        "input": {"path": str(input_path), "bytes": Path(input_path).stat().st_size},
        "checkpoints": scoring["checkpoints"],
        "counts": {
            "records": len(calls),
            "chunks": int(sequences["n_chunks"].sum()),
            "chunks_scored": len(chunks),
            "frames": scoring["frames"],
            "calls": {call: int(n) for call, n in sorted(counts.items())},
        },
    }
    _write_json(manifest, outdir / "manifest.json")
    log.info("%d records: %s", len(calls), ", ".join(f"{n} {c}" for c, n in sorted(counts.items())))
    return counts


def _write_json(value: dict, path: Path) -> None:
    with atomic_open(path) as handle:
        json.dump(value, handle, indent=2)
        handle.write("\n")
