"""The call stage: from the scored chunks, a call per input record against the threshold (the
sequences table, every input record), its viral records as FASTA, and a manifest (the
checkpoints and the reconciled counts). It needs no embeddings: a new threshold reruns only this."""

import logging
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from . import __version__
from .outputs import atomic_open
from .seqio import read_batches
from .tables import SEQUENCES, read_json, read_table, write_json, write_tsv

log = logging.getLogger("workflow")


class CallFiles(NamedTuple):
    sequences: Path  # the sequences table
    viral: Path  # FASTA
    manifest: Path  # JSON


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
    return table[list(SEQUENCES)]


def write_viral_fasta(input_path: str | Path, calls: pd.DataFrame, path: str | Path) -> None:
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


def call(
    prepared_sequences: str | Path,
    chunks_path: str | Path,
    scoring_path: str | Path,
    input_path: str | Path,
    outputs: CallFiles,
    min_viral_fraction: float,
) -> dict:
    """A call per input record from its scored chunks (predict's chunks table and scoring JSON);
    write the sequences table, the viral FASTA and the manifest. Returns the count of each call."""
    sequences = read_table(prepared_sequences)
    chunks = read_table(chunks_path)
    scoring = read_json(scoring_path)
    calls = sequence_table(sequences, chunks, min_viral_fraction)
    write_tsv(calls, outputs.sequences)
    write_viral_fasta(input_path, calls, outputs.viral)
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
    write_json(manifest, outputs.manifest)
    log.info("%d records: %s", len(calls), ", ".join(f"{n} {c}" for c, n in sorted(counts.items())))
    return counts
