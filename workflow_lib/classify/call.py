"""The call stage: from the scored chunks, a call per input record against the threshold (the
sequences table, every input record), its viral records as FASTA, the viral regions inside
records (table and FASTA), and a manifest (the checkpoints, the reconciled counts and the share
of the frames embedded). It needs no embeddings: a new threshold reruns only this."""

import contextlib
import logging
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from workflow_lib import __version__
from workflow_lib.classify.calibration import Calibration
from workflow_lib.classify.regions import EVIDENCE, REGIONS, RegionSettings, extend_to_ends, regions_table
from workflow_lib.classify.weighing import SEQUENCE_COLUMNS, WEIGHED_REGION, RecordWeighing, fit_line
from workflow_lib.cli.errors import InputError
from workflow_lib.embed.figures import copies_not_embedded, shard_figures
from workflow_lib.io.outputs import atomic_open
from workflow_lib.io.reads import SampleReads, read_sample
from workflow_lib.io.tables import (
    CHUNK_ROWS,
    CHUNKS,
    MATE_LENGTHS,
    SEQUENCES,
    read_chunks,
    read_json,
    tsv_writer,
    whole_groups,
    write_json,
)

log = logging.getLogger("workflow")
BLOCK_ROWS = CHUNK_ROWS  # records called at a time
COUNTED = ("records", "chunks", "chunks_scored", "viral_chunks", "viral_bases", "regions", "region_bases")


class CallFiles(NamedTuple):
    sequences: Path  # the sequences table
    viral: Path  # FASTA
    regions: Path  # the regions table
    regions_fasta: Path
    manifest: Path  # JSON
    # with call.max_qvalue: FASTA of the records and regions whose q-value is at most that
    passing: tuple[Path, Path] | None = None


def sequence_table(sequences: pd.DataFrame, per_sequence: pd.DataFrame, min_viral_fraction: float) -> pd.DataFrame:
    """prepare's sequences table with each record's scored chunks (`per_sequence`) and its call; the
    columns of `per_sequence` beyond the table's are kept after them."""
    mates = [c for c in MATE_LENGTHS if c in sequences]  # a paired sample's
    table = sequences[["sequence_id", "length", "n_chunks", "status", *mates]].join(per_sequence, on="sequence_id")
    scored = table["n_chunks_scored"].notna()
    table["n_chunks_scored"] = table["n_chunks_scored"].fillna(0).astype(int)
    table["n_viral_chunks"] = table["n_viral_chunks"].fillna(0).astype(int)
    table["viral_fraction"] = np.where(scored, table["n_viral_chunks"] / table["n_chunks_scored"].clip(lower=1), np.nan)
    table["call"] = np.select(
        [~scored, table["viral_fraction"] >= min_viral_fraction], ["no_coding_frame", "virus"], "other"
    )
    table["n_regions"] = table["n_regions"].fillna(0).astype(int)
    table["viral_extent"] = np.select([table["call"] == "virus", table["n_regions"] > 0], ["whole", "regions"], "none")
    return table[list(SEQUENCES) + [c for c in per_sequence.columns if c not in SEQUENCES] + mates]


# what a record's scored chunks give its row of the sequences table
PER_SEQUENCE = {
    "n_chunks_scored": ("chunk", "size"),
    "n_viral_chunks": ("is_virus", "sum"),
    "max_score_virus": ("max_score_virus", "max"),
    "mean_score_virus": ("max_score_virus", "mean"),
}


def scored_sequences(
    chunks_path: str | Path, regions: RegionSettings, calibration: Calibration | None
) -> Iterator[tuple]:
    """predict's chunks table summed per record (indexed by sequence_id) and the records' regions,
    in blocks, in its order; with a calibration, the sum of each one's chunk LLRs too (sum_llr)."""
    columns = list(CHUNKS) + (["atypicality"] if calibration else [])  # not the chunks' probabilities
    for chunks in whole_groups(read_chunks(chunks_path, columns, rows=BLOCK_ROWS), ["sequence_id"]):
        summed = PER_SEQUENCE
        if calibration:
            chunks["llr"] = calibration.chunk_llrs(chunks["max_score_virus"].to_numpy())
            summed = PER_SEQUENCE | {"sum_llr": ("llr", "sum"), "atypicality": ("atypicality", "median")}
        per_sequence = chunks.groupby("sequence_id", sort=False).agg(**summed)
        found = regions_table(chunks, regions)
        per_sequence["n_regions"] = found.groupby("sequence_id").size().reindex(per_sequence.index, fill_value=0)
        yield per_sequence, found


def sequence_tables(
    prepared_sequences: str | Path,
    chunks_path: str | Path,
    min_viral_fraction: float,
    regions: RegionSettings,
    calibration: Calibration | None,
) -> Iterator[tuple[pd.DataFrame, pd.DataFrame]]:
    """The sequences table in blocks of prepare's, with the regions of each block's records: predict
    scored the records in prepare's order, so each block's scored records come next in the chunks
    table. With a calibration, each record and region has the sum of its chunks' LLRs (sum_llr)."""
    scored = scored_sequences(chunks_path, regions, calibration)
    # scored records read, not yet joined; typed, so that a sample of no scored chunk joins its columns
    # as numbers and the first block concatenated keeps its types (an untyped frame makes them objects)
    columns = [*PER_SEQUENCE, "n_regions"]
    columns += ["sum_llr", "atypicality"] if calibration else []
    waiting = pd.DataFrame({c: [] for c in columns}, index=pd.Index([], dtype=object, name="sequence_id"))
    waiting = waiting.astype({"n_chunks_scored": "int64", "n_viral_chunks": "int64", "n_regions": "int64"})
    found = pd.DataFrame(columns=[*REGIONS, *EVIDENCE])
    for sequences in read_chunks(prepared_sequences, rows=BLOCK_ROWS):
        listed = pd.Index(sequences["sequence_id"])
        while waiting.empty or waiting.index[-1] in listed:  # read on until past this block
            more = next(scored, None)
            if more is None:
                break
            waiting = pd.concat([waiting, more[0]])
            found = more[1] if found.empty else pd.concat([found, more[1]], ignore_index=True)
        position = listed.get_indexer(waiting.index)
        here = np.flatnonzero(position < 0)
        here = int(here[0]) if here.size else len(waiting)
        backwards = np.flatnonzero(np.diff(position[:here]) <= 0)  # repeated, or before the one above it
        if backwards.size:
            _disagree(chunks_path, prepared_sequences, waiting.index[backwards[0] + 1])
        mine = found["sequence_id"].isin(waiting.index[:here]).to_numpy()  # a prefix: both are in record order
        table, own = sequence_table(sequences, waiting.iloc[:here], min_viral_fraction), found[mine].copy()
        extend_to_ends(own, sequences.set_index("sequence_id")["length"])
        yield table, own
        waiting, found = waiting.iloc[here:], found[~mine]
    left = waiting if not waiting.empty else next(scored, (None,))[0]
    if left is not None:
        _disagree(chunks_path, prepared_sequences, left.index[0])


def _disagree(chunks_path, sequences_path, record) -> None:
    raise InputError(
        f"{chunks_path}: scores '{record}' out of the order of {sequences_path}, or not listed there; delete the "
        "sample's predict outputs and run again"
    )


# A piece of an input record for a FASTA file: the whole record under its own header and `suffix`
# (name None; a paired fragment's mates each under its own), or bases start..end (1-based,
# inclusive; a fragment's along mate 1 then mate 2) under `name`.
Piece = tuple  # (handle, name: bytes | None, suffix: bytes, start: int | None, end: int | None)


def write_pieces(reads: SampleReads, wanted: Iterator[tuple[bytes, list[Piece]]]) -> None:
    """Write each record's pieces (soft-masking kept), reading the input alongside. `wanted`:
    (record ID, its pieces) of each record that has some, in input order."""
    record = next(wanted, None)
    for batch in read_sample(reads, keep_case=True):
        offsets, m = batch.offsets(), batch.mates
        for i in range(0, len(batch.ids), m):
            if record is not None and batch.ids[i] == record[0]:
                for handle, name, suffix, start, end in record[1]:
                    if name is None:
                        for k in range(i, i + m):
                            _write_fasta(handle, batch.headers[k] + suffix, batch.buf[offsets[k] : offsets[k + 1]])
                    else:
                        _write_fasta(handle, name + suffix, batch.buf[offsets[i] : offsets[i + m]][start - 1 : end])
                record = next(wanted, None)
    if record is not None:
        raise InputError(
            f"{' '.join(map(str, reads.files()))}: no record '{record[0].decode()}' where prepare found it; the "
            "input changed after prepare: run the sample again"
        )


def _write_fasta(handle, header: bytes, seq: bytes) -> None:
    wrapped = b"\n".join(seq[j : j + 60] for j in range(0, len(seq), 60))
    handle.write(b">%s\n%s\n" % (header, wrapped))


def fasta_pieces(
    viral: pd.DataFrame, found: pd.DataFrame, viral_fasta, regions_fasta, weighed: bool = False
) -> dict[str, list[Piece]]:
    """{record: the pieces of it to write}: each record of `viral` whole to the viral FASTA, each
    region of `found` to the regions FASTA, with their headers' suffixes (and, `weighed`, their
    probability and q-value)."""
    by_record = {}
    columns = ["sequence_id", "max_score_virus", "viral_fraction"] + (
        ["probability_virus", "qvalue"] if weighed else []
    )
    header = b" virus_score=%.4g viral_fraction=%.4g" + (b" probability_virus=%.4f qvalue=%.4g" if weighed else b"")
    for sid, *values in zip(*(viral[c].tolist() for c in columns)):  # lists: a row at a time costs more
        by_record[sid] = [(viral_fasta, None, header % tuple(values), None, None)]
    for r in found.itertuples(index=False):
        name = b"%s|region_%d" % (r.sequence_id.encode(), r.region)
        suffix = b" start=%d end=%d length=%d mean_score_virus=%.4g max_score_virus=%.4g" % (
            r.start, r.end, r.length, r.mean_score_virus, r.max_score_virus
        )  # fmt: skip
        suffix += b" probability_virus=%.4f qvalue=%.4g" % (r.probability_virus, r.qvalue) if weighed else b""
        by_record.setdefault(r.sequence_id, []).append((regions_fasta, name, suffix, r.start, r.end))
    return by_record


def call(
    prepared_sequences: str | Path,
    chunks_path: str | Path,
    scoring_path: str | Path,
    reads: SampleReads,
    outputs: CallFiles,
    min_viral_fraction: float,
    regions: RegionSettings,
    calibration: Calibration | None = None,
    max_qvalue: float | None = None,
    embed_figures: list[str | Path] = (),
) -> dict:
    """Write `outputs` block by block, each record and region weighed with a calibration, those within
    `max_qvalue` to FASTA of their own; the count of each call. The manifest gives, from the
    `embed_figures` of the sample's pooled shards, the share of them embedded."""
    scoring = read_json(scoring_path)
    counts, totals = Counter(), Counter()  # of each call, and what the manifest counts
    weighing = RecordWeighing(calibration, scoring, Path(scoring_path)) if calibration else None
    if weighing:
        log.info("records' viral fraction %(viral_fraction_estimate).4f (from the %(source)s)", weighing.found)
        if line := fit_line("this sample", weighing.found, scoring["composition_fit"]):
            log.info(line)
    blocks = sequence_tables(prepared_sequences, chunks_path, min_viral_fraction, regions, calibration)
    with tempfile.TemporaryDirectory(dir=outputs.regions.parent) as scratch:
        # with a calibration the regions go to a scratch table first: their q-values need them all
        regions_path = Path(scratch, "regions.tsv") if weighing else outputs.regions
        with contextlib.ExitStack() as stack:
            columns = SEQUENCES + (SEQUENCE_COLUMNS if weighing else ()) + (MATE_LENGTHS if reads.paired else ())
            fasta_paths = (
                outputs.viral,
                outputs.regions_fasta,
                *(outputs.passing[:1] if max_qvalue is not None else ()),
            )
            write = stack.enter_context(tsv_writer(outputs.sequences, columns))
            write_regions = stack.enter_context(
                tsv_writer(regions_path, REGIONS + (WEIGHED_REGION if weighing else ()))
            )
            fasta = [stack.enter_context(atomic_open(path, "wb")) for path in fasta_paths]
            write_pieces(reads, called(blocks, write, write_regions, fasta, weighing, max_qvalue, counts, totals))
        if weighing:
            passing = weighing.weigh_region_table(regions_path, outputs.regions, max_qvalue)
            if passing is not None:
                copy_passing_regions(outputs.regions_fasta, passing, outputs.passing[1])
    files = reads.files()
    calls = {call: int(n) for call, n in sorted(counts.items())}
    manifest = {
        "workflow_version": __version__,
        # its file (its files, a list, where it has several) and bytes
        "input": {
            "path": str(files[0]) if len(files) == 1 else list(map(str, files)),
            "bytes": sum(f.stat().st_size for f in files),
        },
        "checkpoints": scoring["checkpoints"],
        "counts": {key: totals[key] for key in COUNTED} | {"frames": scoring["frames"], "calls": calls},
    }
    if embed_figures:
        manifest["embedded"] = copies_not_embedded([shard_figures(path, i) for i, path in enumerate(embed_figures)])
    if weighing:
        manifest["weighing"] = weighing.summary(scoring, max_qvalue)
    write_json(manifest, outputs.manifest)
    log.info("%d records: %s", totals["records"], ", ".join(f"{n} {c}" for c, n in calls.items()))
    return calls


def called(
    blocks, write, write_regions, fasta: list, weighing, max_qvalue, counts: Counter, totals: Counter
) -> Iterator:
    """Weigh, write (the sequences and regions tables) and count each block's rows and regions; yield
    each record's pieces to write to `fasta` (viral, regions, passing), in input order (the FASTA are
    written while the input is read alongside: write_pieces)."""
    for table, found in blocks:
        passing = None  # the records within max_qvalue
        if weighing:
            passing = weighing.weigh_records(table, max_qvalue)
            weighing.weigh_regions(found)
        write(table)
        write_regions(found)
        viral = table[table["call"] == "virus"]
        counts.update(table["call"].value_counts().to_dict())
        totals.update(
            records=len(table),
            chunks=int(table["n_chunks"].sum()),
            chunks_scored=int(table["n_chunks_scored"].sum()),
            viral_chunks=int(table["n_viral_chunks"].sum()),
            viral_bases=int(viral["length"].sum()),  # of the records called virus
            regions=len(found),
            region_bases=int(found["length"].sum()),
        )
        by_record = fasta_pieces(viral, found, *fasta[:2])
        if passing is not None:
            for sid, more in fasta_pieces(passing, found.iloc[:0], fasta[2], None, True).items():
                by_record.setdefault(sid, []).extend(more)
        listed = table["sequence_id"]
        for sid in listed[listed.isin(by_record.keys())]:  # input order
            yield sid.encode(), by_record[sid]


def copy_passing_regions(regions_fasta: Path, passing: pd.DataFrame, output: Path) -> None:
    """The regions of `regions_fasta` listed in `passing` (in its order, with their probability and
    q-value), to `output` with those in their headers."""
    wanted = iter(
        (b">%s|region_%d " % (sid.encode(), region), b" probability_virus=%.4f qvalue=%.4g" % (p, q))
        for sid, region, p, q in passing.itertuples(index=False)
    )
    name, suffix = next(wanted, (None, None))
    copying = False
    with open(regions_fasta, "rb") as regions, atomic_open(output, "wb") as out:
        for line in regions:
            if line.startswith(b">"):
                copying = name is not None and line.startswith(name)
                if copying:
                    line = line[:-1] + suffix + b"\n"
                    name, suffix = next(wanted, (None, None))
            if copying:
                out.write(line)
    if name is not None:
        raise InputError(
            f"{regions_fasta}: no region '{name[1:-1].decode()}' where call wrote it; run the sample's call again"
        )
