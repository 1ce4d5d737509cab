"""A calibration (calibration.py) applied to a sample's tables: the probability that each chunk,
record and region is viral at the sample's own estimated viral fraction, and q-values. The tables
are read and written in blocks; what must see the whole sample first (its viral fraction, the
q-values) is taken from histograms of LLRs, so that memory does not grow with the sample."""

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import calibration
from .calibration import Calibration, expit, logit
from .tables import CHUNKS, read_chunks, tsv_writer

# columns a calibration adds, after the contract's (docs/outputs.md)
CHUNK_COLUMNS = ("probability_virus", "atypicality")
SEQUENCE_COLUMNS = ("probability_virus", "qvalue", "atypicality", "reliable")
REGION_COLUMNS = ("probability_virus", "qvalue", "in_seq_edge")


def composition(counts: np.ndarray, fallback: float, minimum: int) -> dict:
    """The viral fraction of the items counted in `counts` (a histogram of LLRs), or the
    calibration's own (`fallback`) when fewer than `minimum` were counted."""
    n = int(counts.sum())
    if n < minimum:
        return {"viral_fraction_estimate": fallback, "source": "calibration", "counted": n}
    return {"viral_fraction_estimate": calibration.estimate_prior(counts), "source": "sample", "counted": n}


class ChunkWeighing:
    """predict's chunks: counted as they are written to a temporary table, then written again with
    their probability at the sample's viral fraction of chunks."""

    def __init__(self, cal: Calibration):
        self.cal = cal
        self.counts = np.zeros(calibration.N_BINS, dtype=np.int64)

    def count(self, chunks: pd.DataFrame) -> None:
        self.counts += calibration.histogram(self.cal.chunk_llrs(chunks["max_score_virus"].to_numpy()))

    def write(self, unweighed: Path, output: Path) -> dict:
        """The chunks table at `unweighed` with its probabilities, to `output`; the composition used."""
        found = composition(self.counts, self.cal.chunk_prior, calibration.MIN_RECORDS_FOR_ESTIMATE)
        shift = logit(found["viral_fraction_estimate"])
        with tsv_writer(output, CHUNKS + CHUNK_COLUMNS) as write:
            for block in read_chunks(unweighed):
                block["probability_virus"] = expit(self.cal.chunk_llrs(block["max_score_virus"].to_numpy()) + shift)
                write(block)
        return found


@dataclass
class RecordWeighing:
    """call's records and regions: their LLRs counted in a first pass over the chunks table, then
    each one's probability and q-value."""

    cal: Calibration
    records: np.ndarray  # histogram of records' LLRs
    regions: np.ndarray  # of regions'
    found: dict | None = None  # the records' composition, once counted
    tallied: Counter = field(default_factory=Counter)  # unreliable records, and those within max_qvalue

    @classmethod
    def of(cls, cal: Calibration) -> "RecordWeighing":
        return cls(cal, np.zeros(calibration.N_BINS, np.int64), np.zeros(calibration.N_BINS, np.int64))

    def count(self, per_sequence: pd.DataFrame, regions: pd.DataFrame) -> None:
        self.records += calibration.histogram(self.llr(per_sequence))
        self.regions += calibration.histogram(self.llr(regions))

    def finish(self) -> dict:
        self.found = composition(self.records, self.cal.record_prior, calibration.MIN_RECORDS_FOR_ESTIMATE)
        prior = self.found["viral_fraction_estimate"]
        self.shift = logit(prior)
        self.record_q, self.region_q = (
            calibration.qvalues(self.records, prior),
            calibration.qvalues(self.regions, prior),
        )
        return self.found

    def llr(self, table: pd.DataFrame) -> np.ndarray:
        """LLR of records or regions with their scored chunks (n_chunks_scored or n_chunks) and sum_llr."""
        n = table["n_chunks_scored"] if "n_chunks_scored" in table else table["n_chunks"]
        return self.cal.record_llrs(n.to_numpy(dtype=np.float64), table["sum_llr"].to_numpy(dtype=np.float64))

    def weigh_records(self, table: pd.DataFrame) -> None:
        """probability_virus and qvalue of the sequences table's rows (NA where no chunk is scored),
        and whether each record is like the data the classifier learned from and the calibration
        was fitted on: a record with no scored chunk is not (reliable: false), nor one whose median
        chunk is less typical than all but 2% of the calibration's chunks."""
        scored = table["n_chunks_scored"].to_numpy() > 0
        llr = self.llr(table.assign(sum_llr=table["sum_llr"].fillna(0)))
        table["probability_virus"] = np.where(scored, expit(llr + self.shift), np.nan)
        table["qvalue"] = np.where(scored, self.record_q[calibration.bin_of(llr)], np.nan)
        # a record whose scores predate the atypicality (NaN) keeps its flag NA
        atypicality = table["atypicality"].to_numpy(dtype=np.float64)
        reliable = scored & (atypicality <= self.cal.atypicality_limit)
        table["reliable"] = pd.array(np.where(np.isnan(atypicality) & scored, None, reliable), dtype="boolean")

    def tally(
        self, table: pd.DataFrame, regions: pd.DataFrame, max_qvalue: float | None
    ) -> tuple[pd.DataFrame, pd.DataFrame] | None:
        """Count a weighed block's unreliable records, and its records and regions within
        `max_qvalue`; return those (None without a max_qvalue)."""
        self.tallied.update(unreliable_records=int((~table["reliable"]).fillna(False).sum()))
        if max_qvalue is None:
            return None
        passing = table[table["qvalue"] <= max_qvalue], regions[regions["qvalue"] <= max_qvalue]
        self.tallied.update(records_passing=len(passing[0]), regions_passing=len(passing[1]))
        return passing

    def summary(self, chunk_composition: dict | None, max_qvalue: float | None) -> dict:
        """The manifest's `weighing`."""
        passing = {key: self.tallied[key] for key in ("records_passing", "regions_passing")}
        return {
            "composition": {"records": self.found, "chunks": chunk_composition},
            "unreliable_records": self.tallied["unreliable_records"],
            "max_qvalue": max_qvalue,
            "passing": None if max_qvalue is None else passing,
        }

    def weigh_regions(self, regions: pd.DataFrame) -> None:
        llr = self.llr(regions)
        regions["probability_virus"] = expit(llr + self.shift)
        regions["qvalue"] = self.region_q[calibration.bin_of(llr)]
