"""Viral regions inside records: runs of viral chunks along a record, merged across short gaps and
kept when long enough. A prophage of 40 kb inside a 2 Mb contig is then found where the record's
call (its viral fraction) would lose it. Coordinates are the chunks' (1-based, inclusive).
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


class RegionSettings(NamedTuple):
    max_gap: int  # bp between two viral chunks that one region still spans
    min_length: int  # bp: shorter runs are not regions, and shorter records are left alone


def record_regions(chunks: pd.DataFrame, settings: RegionSettings) -> list[tuple]:
    """The regions of one record from its scored chunks in order along it (chunks.tsv's rows of one
    sequence_id): rows of REGIONS without the sequence_id."""
    viral = np.flatnonzero(chunks["is_virus"].to_numpy(dtype=bool))
    if viral.size == 0:
        return []
    starts, ends = chunks["chunk_start"].to_numpy(), chunks["chunk_end"].to_numpy()
    # a gap: the bases strictly between one viral chunk and the next (chunks may overlap: below 0)
    gaps = starts[viral[1:]] - ends[viral[:-1]] - 1
    cuts = np.flatnonzero(gaps > settings.max_gap)
    firsts, lasts = np.r_[viral[0], viral[cuts + 1]], np.r_[viral[cuts], viral[-1]]
    scores, is_virus = chunks["max_score_virus"].to_numpy(), chunks["is_virus"].to_numpy(dtype=bool)
    regions = []
    for first, last in zip(firsts, lasts):
        start, end = int(starts[first]), int(ends[last])
        if end - start + 1 < settings.min_length:
            continue
        span = slice(first, last + 1)  # the scored chunks it spans, viral or not
        row = (start, end, end - start + 1, int(last - first + 1), int(is_virus[span].sum()))
        regions.append((len(regions) + 1, *row, float(scores[span].mean()), float(scores[span].max())))
    return regions


def regions_table(chunks: pd.DataFrame, settings: RegionSettings) -> pd.DataFrame:
    """The regions of every record of `chunks` (whole records, in order), in REGIONS' columns."""
    rows = [
        (sequence_id, *region)
        for sequence_id, own in chunks.groupby("sequence_id", sort=False)
        for region in record_regions(own, settings)
    ]
    table = pd.DataFrame(rows, columns=list(REGIONS))
    return table.astype({c: "int64" for c in REGIONS[1:7]})
