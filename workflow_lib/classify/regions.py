"""Viral regions inside records: runs of viral chunks along a record, merged across short stretches
of chunks scored `other` and kept when long enough. A prophage of 40 kb inside a 2 Mb contig is then
found where the record's call (its viral fraction) would lose it. Only scored chunks are evidence:
a chunk with no stop-free frame neither starts a region nor breaks one. Coordinates are the
chunks' (1-based, inclusive).
"""

from typing import NamedTuple

import numpy as np
import pandas as pd

REGIONS = (
    "sequence_id",
    "region",
    "start",
    "end",
    "length",
    "n_chunks",
    "n_viral_chunks",
    "mean_score_virus",
    "max_score_virus",
)


# besides REGIONS, for weighing a region (weighing.py): the sum of its chunks' LLRs (chunks.tsv
# read with an `llr` column), and whether no scored chunk lies between it and the record's end (its
# end is then the record's, known to the caller: ends_record) or start (in_seq_edge: either)
EVIDENCE = ("sum_llr", "in_seq_edge", "ends_record")


class RegionSettings(NamedTuple):
    max_gap: int  # bp of chunks scored other between two viral chunks that one region still spans
    min_length: int  # bp from the first viral chunk's start to the last one's end; shorter runs are not regions
    # of the scored chunks a region spans, at least this share viral (predict.min_viral_fraction,
    # the share that calls a record virus): fewer, and it is not a region
    min_viral_fraction: float = 0.0


def record_regions(chunks: pd.DataFrame, settings: RegionSettings) -> list[tuple]:
    """The regions of one record from its scored chunks in order along it (chunks.tsv's rows of one
    sequence_id): rows of REGIONS without the sequence_id, then EVIDENCE. A region's bounds lie
    halfway across the unscored bases between its outer viral chunks and the chunks scored other
    beyond them (no evidence either way there), or at the record's ends where none is."""
    is_virus = chunks["is_virus"].to_numpy(dtype=bool)
    viral = np.flatnonzero(is_virus)
    if viral.size == 0:
        return []
    starts, ends = chunks["chunk_start"].to_numpy(), chunks["chunk_end"].to_numpy()
    # a gap: the bases of chunks scored other between one viral chunk and the next; chunks with no
    # scored frame between them are not in the table, so they count for nothing
    other_bases = np.cumsum(np.where(is_virus, 0, ends - starts + 1))
    gaps = other_bases[viral[1:]] - other_bases[viral[:-1]]
    cuts = np.flatnonzero(gaps > settings.max_gap)
    firsts, lasts = np.r_[viral[0], viral[cuts + 1]], np.r_[viral[cuts], viral[-1]]
    scores = chunks["max_score_virus"].to_numpy()
    llr = chunks["llr"].to_numpy() if "llr" in chunks else np.zeros(len(chunks))
    regions = []
    for first, last in zip(firsts, lasts):
        viral_chunks = int(is_virus[first : last + 1].sum())
        if ends[last] - starts[first] + 1 < settings.min_length or viral_chunks < settings.min_viral_fraction * (
            last - first + 1
        ):
            continue
        at_start, at_end = bool(first == 0), bool(last == len(chunks) - 1)
        start = 1 if at_start else _halfway(ends[first - 1], starts[first]) + 1
        end = int(ends[last]) if at_end else _halfway(ends[last], starts[last + 1])
        span = slice(first, last + 1)  # the scored chunks it spans, viral or not
        row = (start, end, end - start + 1, int(last - first + 1), viral_chunks)
        scored = (float(scores[span].mean()), float(scores[span].max()))
        evidence = (float(llr[span].sum()), at_start or at_end, at_end)
        regions.append((len(regions) + 1, *row, *scored, *evidence))
    return regions


def _halfway(end: int, start: int) -> int:
    """The last base of the first half of the bases strictly between `end` and `start` (or `end`
    itself where the chunks touch or overlap)."""
    return int(end + max(start - end - 1, 0) // 2)


def extend_to_ends(regions: pd.DataFrame, lengths: pd.Series) -> None:
    """Regions that no scored chunk separates from their record's end end with it (`lengths`:
    record lengths by sequence_id)."""
    last = regions["ends_record"].to_numpy(dtype=bool)
    if last.any():
        regions.loc[last, "end"] = lengths.reindex(regions.loc[last, "sequence_id"]).to_numpy()
        regions["length"] = regions["end"] - regions["start"] + 1


def regions_table(chunks: pd.DataFrame, settings: RegionSettings) -> pd.DataFrame:
    """The regions of every record of `chunks` (whole records, in order), in REGIONS' columns and
    EVIDENCE's."""
    # only records whose scored chunks span min_length can hold a region: reads never go through the
    # per-record loop
    grouped = chunks.groupby("sequence_id", sort=False)
    span = grouped["chunk_end"].transform("max") - grouped["chunk_start"].transform("min") + 1
    candidates = chunks[(span >= settings.min_length) & grouped["is_virus"].transform("any")]
    rows = [
        (sequence_id, *region)
        for sequence_id, own in candidates.groupby("sequence_id", sort=False)
        for region in record_regions(own, settings)
    ]
    table = pd.DataFrame(rows, columns=[*REGIONS, *EVIDENCE])
    return table.astype({**{c: "int64" for c in REGIONS[1:7]}, "in_seq_edge": bool, "ends_record": bool})
