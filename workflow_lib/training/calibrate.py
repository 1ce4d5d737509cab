"""The calibrate stage: a calibration (calibration.py) for the classifier that scored labelled
samples, from their shards' scores read as predict reads them (predict.py), so that any classifier,
VirNucPro's published ones included, can be weighed. The samples are scored by a classifier that
never saw them; a sample's records keep their chunks together, in order, as the record rule needs."""

import logging
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from workflow_lib.classify.calibration import Calibration, fit
from workflow_lib.classify.predict import ShardScores, chunk_table, scored_chunks
from workflow_lib.cli.errors import InputError
from workflow_lib.cli.progress import Progress

log = logging.getLogger("workflow")
LABELS = {"other": 0, "virus": 1}  # a labelled sample's, for training and calibration


class Labelled(NamedTuple):
    name: str  # the sample's, as the pooled scores files list it
    label: str  # virus or other
    frames: str  # prepare's frames table
    sequences: str  # prepare's sequences table
    bins: str  # prepare's bins file
    scores: list[str]  # the score jobs' files, in the plan's order


def labelled_chunks(samples: list[Labelled], progress_seconds: float) -> tuple[pd.DataFrame, str]:
    """(every chunk's max_score_virus, label and record, a record's chunks together in order; the
    SHA-256 of the classifier that scored them all)."""
    tables, classifier = [], None
    for number, sample in enumerate(samples):
        if sample.label not in LABELS:  # the script run by hand too
            raise InputError(f"{sample.name}: label {sample.label!r}: a calibration sample is 'virus' or 'other'")
        shards = ShardScores(sample.scores, sample.bins, sample.name)
        progress = Progress(log, "frames", total=shards.frames, interval=progress_seconds)
        for frames in scored_chunks(sample.frames, sample.sequences, shards, progress):
            chunks = chunk_table(frames)
            record = str(number) + "\t" + chunks["sequence_id"]
            tables.append(chunks[["max_score_virus", "atypicality"]].assign(record=record, label=LABELS[sample.label]))
        sha = shards.checkpoints["classifier"]["sha256"] if shards.checkpoints else None
        if None not in (classifier, sha) and sha != classifier:
            raise InputError(
                f"{sample.scores[0]}: scored by another classifier than {samples[0].scores[0]}; score both again"
            )
        classifier = classifier or sha
    chunks = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    if chunks.empty:
        raise InputError("the calibration samples have no scored chunk: give samples with coding sequence")
    return chunks, classifier


def fit_chunks(chunks: pd.DataFrame, classifier_sha256: str, chunk_length: int, output, method="auto") -> Calibration:
    """Fit the calibration on `chunks` (max_score_virus, label, record numbered, atypicality; a
    record's chunks together in order) and write it to `output`."""
    columns = [chunks[c].to_numpy() for c in ("max_score_virus", "label", "record")]
    fitted = fit(*columns, classifier_sha256, chunk_length, method, chunks["atypicality"].to_numpy())
    fitted.save(output)
    return fitted


def calibrate(
    samples: list[Labelled], chunk_length: int, method: str, output: str | Path, progress_seconds: float
) -> Calibration:
    """Fit the calibration on the labelled samples' chunks and write it to `output`."""
    chunks, classifier = labelled_chunks(samples, progress_seconds)
    chunks["record"] = pd.factorize(chunks["record"])[0]
    fitted = fit_chunks(chunks, classifier, chunk_length, output, method)
    errors = fitted.fitted_on["held_out_calibration_error"]
    log.info(
        "%d chunks (%d viral) of %d records: %s chosen; held-out calibration error %.3f (the scores: %.3f); "
        "chunks of a record correlated as r = %.2f",
        len(chunks),
        int(np.sum(chunks["label"])),
        chunks["record"].max() + 1,
        fitted.method,
        errors[fitted.method],
        errors["scores"],
        fitted.record_correlation,
    )
    return fitted
