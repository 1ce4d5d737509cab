"""Viral regions called from chunk tables with known answers: gaps, edges, a whole viral record, one
chunk, none, and records too short for a region."""

import pandas as pd
import pytest

from workflow_lib.classify.regions import (
    EVIDENCE,
    REGIONS,
    RegionSettings,
    extend_to_ends,
    record_regions,
    regions_table,
)


def chunks(pattern: str, sequence_id: str = "r", length: int = 500, scored: str | None = None) -> pd.DataFrame:
    """A record's chunks table: one chunk of `length` bp per character, V viral (score 0.9), o not
    (0.2), and - not scored (no stop-free frame: absent from chunks.tsv). Chunks as VirNucPro cuts
    them here for simplicity: end to end, 1-based."""
    rows = [
        {
            "sequence_id": sequence_id,
            "chunk": i,
            "is_virus": c == "V",
            "max_score_virus": 0.9 if c == "V" else 0.2,
            "chunk_start": i * length + 1,
            "chunk_end": (i + 1) * length,
        }
        for i, c in enumerate(pattern)
        if c != "-"
    ]
    return pd.DataFrame(rows)


SETTINGS = RegionSettings(max_gap=1000, min_length=2000)  # 2 chunks of gap, 4 chunks long


@pytest.mark.parametrize(
    "pattern, expected",
    [
        ("oooooooooo", []),  # none
        ("VVVVVVVVVV", [(1, 5000, 10, 10)]),  # the whole record
        ("VVVVoooooo", [(1, 2000, 4, 4)]),  # at the start
        ("ooooooVVVV", [(3001, 5000, 4, 4)]),  # at the end
        ("oooVVVoooo", []),  # too short: 1,500 bp
        ("ooVVooVVoo", [(1001, 4000, 6, 4)]),  # a gap of 1,000 bp is bridged
        ("VVooooVVVV", [(3001, 5000, 4, 4)]),  # one of 1,500 is not; the first run is too short alone
        ("VVVVoooVVVV", [(1, 2000, 4, 4), (3501, 5500, 4, 4)]),  # two regions
        ("VV--VVoooo", [(1, 3000, 4, 4)]),  # unscored chunks are no evidence: not chunks of the region
        ("VV------VV", [(1, 5000, 4, 4)]),  # nor a gap: 3,000 bp with no scored chunk do not break it
        ("VVooo---VV", []),  # 1,500 bp scored other do, with or without unscored chunks beside them
        ("--VV-oo-VV--", [(1, 5000, 6, 4)]),  # nothing scored before it: it starts with the record
        ("oo--VVVV--oo", [(1501, 4500, 4, 4)]),  # bounds halfway across the unscored chunks
        ("V", []),  # one chunk
    ],
)
def test_regions_of_a_record(pattern, expected):
    found = record_regions(chunks(pattern), SETTINGS)
    assert [(start, end, n, viral) for _, start, end, _, n, viral, *_ in found] == expected
    assert [number for number, *_ in found] == list(range(1, len(found) + 1))
    for _, start, end, length, *_ in found:
        assert length == end - start + 1


def test_region_scores_cover_the_chunks_it_spans():
    """Mean and max virus score over every scored chunk from the region's first viral chunk to its
    last, the non-viral ones in its gaps included."""
    (region,) = record_regions(chunks("VVoVV"), RegionSettings(max_gap=500, min_length=1))
    assert region[1:6] == (1, 2500, 2500, 5, 4)
    assert region[6] == pytest.approx((4 * 0.9 + 0.2) / 5) and region[7] == pytest.approx(0.9)


def test_overlapping_chunks_merge():
    """VirNucPro's chunks may overlap by a few bases: a negative gap."""
    table = chunks("VVVV", length=300)
    table["chunk_end"] += 2
    (region,) = record_regions(table, RegionSettings(max_gap=0, min_length=1))
    assert region[1:3] == (1, 1202)


def test_regions_table_numbers_regions_per_record_in_order():
    table = pd.concat([chunks("VVVVoooVVVV", "a"), chunks("oooo", "b"), chunks("VVVV", "c")])
    found = regions_table(table, SETTINGS)
    assert list(found.columns) == [*REGIONS, *EVIDENCE]
    assert list(zip(found["sequence_id"], found["region"])) == [("a", 1), ("a", 2), ("c", 1)]
    assert regions_table(table.iloc[:0], SETTINGS).empty


@pytest.mark.parametrize(
    "pattern, edge",
    [
        ("VVVVoo", [True]),
        ("ooVVVV", [True]),
        ("oVVVVo", [False]),
        ("-VVVV-o", [True]),  # only unscored chunks between it and the start
        ("VVVVoooVVVV", [True, True]),
        ("oVVVVoooVVVVo", [False, False]),
    ],
)
def test_a_region_says_whether_it_reaches_an_end_of_its_record(pattern, edge):
    """in_seq_edge: no chunk scored other lies between the region and an end of the record, so it
    may go on beyond what was read (a prophage at a contig's end, or a whole viral contig)."""
    found = record_regions(chunks(pattern), SETTINGS)
    assert [region[-2] for region in found] == edge


def test_a_region_sums_the_llrs_of_the_chunks_it_spans():
    table = chunks("oVVoVVo")
    table["llr"] = [-1.0, 2.0, 2.5, -0.5, 3.0, 1.0, -4.0]
    (region,) = record_regions(table, RegionSettings(max_gap=500, min_length=1))
    assert region[-3] == pytest.approx(2.0 + 2.5 - 0.5 + 3.0 + 1.0)


def test_a_region_that_no_scored_chunk_ends_goes_on_to_the_records_end():
    """The call job knows the record's length (prepare's sequences table): the region ends with it."""
    found = regions_table(pd.concat([chunks("oVVVV-", "a"), chunks("VVVVo", "b")]), SETTINGS)
    extend_to_ends(found, pd.Series({"a": 3100, "b": 2500}))
    assert list(zip(found["start"], found["end"], found["length"])) == [(501, 3100, 2600), (1, 2000, 2000)]
