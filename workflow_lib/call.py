"""The call stage: from the scored chunks, a call per input record against the threshold (the
sequences table, every input record), its viral records as FASTA, and a manifest (the
checkpoints and the reconciled counts). It needs no embeddings: a new threshold reruns only this."""

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from . import __version__
from .errors import InputError
from .outputs import atomic_open
from .seqio import read_batches
from .tables import CHUNK_ROWS, SEQUENCES, read_chunks, read_json, tsv_writer, whole_groups, write_json

log = logging.getLogger("workflow")
BLOCK_ROWS = CHUNK_ROWS  # records called at a time


class CallFiles(NamedTuple):
    sequences: Path  # the sequences table
    viral: Path  # FASTA
    manifest: Path  # JSON


def sequence_table(sequences: pd.DataFrame, per_sequence: pd.DataFrame, min_viral_fraction: float) -> pd.DataFrame:
    """prepare's sequences table with each record's scored chunks (`per_sequence`) and its call."""
    table = sequences[["sequence_id", "length", "n_chunks", "status"]].join(per_sequence, on="sequence_id")
    scored = table["n_chunks_scored"].notna()
    table["n_chunks_scored"] = table["n_chunks_scored"].fillna(0).astype(int)
    table["n_viral_chunks"] = table["n_viral_chunks"].fillna(0).astype(int)
    table["viral_fraction"] = np.where(scored, table["n_viral_chunks"] / table["n_chunks_scored"].clip(lower=1), np.nan)
    table["call"] = np.select(
        [~scored, table["viral_fraction"] >= min_viral_fraction], ["no_coding_frame", "virus"], "other"
    )
    return table[list(SEQUENCES)]


# what a record's scored chunks give its row of the sequences table
PER_SEQUENCE = {
    "n_chunks_scored": ("chunk", "size"),
    "n_viral_chunks": ("is_virus", "sum"),
    "max_score_virus": ("max_score_virus", "max"),
    "mean_score_virus": ("max_score_virus", "mean"),
}


def scored_sequences(chunks_path: str | Path, rows: int) -> Iterator[pd.DataFrame]:
    """predict's chunks table summed per record (indexed by sequence_id), in blocks, in its order."""
    for chunks in whole_groups(read_chunks(chunks_path, rows=rows), ["sequence_id"]):
        yield chunks.groupby("sequence_id", sort=False).agg(**PER_SEQUENCE)


def sequence_tables(
    prepared_sequences: str | Path, chunks_path: str | Path, min_viral_fraction: float, rows: int
) -> Iterator[pd.DataFrame]:
    """The sequences table in blocks of prepare's: predict scored the records in prepare's order,
    so each block's scored records come next in the chunks table."""
    scored = scored_sequences(chunks_path, rows)
    # scored records read, not yet joined; typed, so that a sample of no scored chunk joins its columns
    # as numbers and the first block concatenated keeps its types (an untyped frame makes them objects)
    waiting = pd.DataFrame(
        {"n_chunks_scored": [], "n_viral_chunks": [], "max_score_virus": [], "mean_score_virus": []},
        index=pd.Index([], dtype=object, name="sequence_id"),
    ).astype({"n_chunks_scored": "int64", "n_viral_chunks": "int64"})
    for sequences in read_chunks(prepared_sequences, rows=rows):
        listed = pd.Index(sequences["sequence_id"])
        while waiting.empty or waiting.index[-1] in listed:  # read on until past this block
            more = next(scored, None)
            if more is None:
                break
            waiting = pd.concat([waiting, more])
        position = listed.get_indexer(waiting.index)
        here = np.flatnonzero(position < 0)
        here = int(here[0]) if here.size else len(waiting)
        backwards = np.flatnonzero(np.diff(position[:here]) <= 0)  # repeated, or before the one above it
        if backwards.size:
            _disagree(chunks_path, prepared_sequences, waiting.index[backwards[0] + 1])
        yield sequence_table(sequences, waiting.iloc[:here], min_viral_fraction)
        waiting = waiting.iloc[here:]
    left = waiting if not waiting.empty else next(scored, None)
    if left is not None:
        _disagree(chunks_path, prepared_sequences, left.index[0])


def _disagree(chunks_path, sequences_path, record) -> None:
    raise InputError(
        f"{chunks_path}: scores '{record}' out of the order of {sequences_path}, or not listed there; delete the "
        "sample's predict outputs and run again"
    )


def write_viral_fasta(input_path: str | Path, viral: Iterator[tuple[bytes, bytes]], handle) -> None:
    """The records called virus, as in the input (soft-masking kept), their scores added to the
    header. `viral`: (record ID, header suffix) of each, in input order, read alongside the input."""
    wanted = next(viral, None)
    for batch in read_batches(input_path, keep_case=True):
        offsets = batch.offsets()
        for i, (record_id, header) in enumerate(zip(batch.ids, batch.headers)):
            if wanted is not None and record_id == wanted[0]:
                seq = batch.buf[offsets[i] : offsets[i + 1]]
                wrapped = b"\n".join(seq[j : j + 60] for j in range(0, len(seq), 60))
                handle.write(b">%s%s\n%s\n" % (header, wanted[1], wrapped))
                wanted = next(viral, None)
    if wanted is not None:
        raise InputError(
            f"{input_path}: no record '{wanted[0].decode()}' where prepare found it; the input changed after "
            "prepare: run the sample again"
        )


def call(
    prepared_sequences: str | Path,
    chunks_path: str | Path,
    scoring_path: str | Path,
    input_path: str | Path,
    outputs: CallFiles,
    min_viral_fraction: float,
) -> dict:
    """A call per input record from its scored chunks (predict's chunks table and scoring JSON);
    write the sequences table, the viral FASTA and the manifest, block by block. Returns the count
    of each call."""
    scoring = read_json(scoring_path)
    counts, totals = Counter(), Counter()

    def viral_records(write) -> Iterator[tuple[bytes, bytes]]:
        for table in sequence_tables(prepared_sequences, chunks_path, min_viral_fraction, BLOCK_ROWS):
            write(table)
            counts.update(table["call"].value_counts().to_dict())
            viral = table[table["call"] == "virus"]
            totals.update(
                records=len(table),
                chunks=int(table["n_chunks"].sum()),
                chunks_scored=int(table["n_chunks_scored"].sum()),
                viral_chunks=int(table["n_viral_chunks"].sum()),
                viral_bases=int(viral["length"].sum()),  # of the records called virus
            )
            for sid, best, fraction in zip(viral["sequence_id"], viral["max_score_virus"], viral["viral_fraction"]):
                yield sid.encode(), b" virus_score=%.4g viral_fraction=%.4g" % (best, fraction)

    with tsv_writer(outputs.sequences, SEQUENCES) as write, atomic_open(outputs.viral, "wb") as fasta:
        write_viral_fasta(input_path, viral_records(write), fasta)
    manifest = {
        "workflow_version": __version__,
        "input": {"path": str(input_path), "bytes": Path(input_path).stat().st_size},
        "checkpoints": scoring["checkpoints"],
        "counts": {
            **{key: totals[key] for key in ("records", "chunks", "chunks_scored", "viral_chunks", "viral_bases")},
            "frames": scoring["frames"],
            "calls": {call: int(n) for call, n in sorted(counts.items())},
        },
    }
    write_json(manifest, outputs.manifest)
    log.info("%d records: %s", totals["records"], ", ".join(f"{n} {c}" for c, n in sorted(counts.items())))
    return dict(counts)
