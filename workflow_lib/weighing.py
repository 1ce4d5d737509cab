"""A calibration (calibration.py) applied to a sample's tables: the probability that each chunk,
record and region is viral at the sample's own estimated viral fraction, and q-values. The tables
are read and written in blocks; what must see the whole sample first (its viral fraction, the
q-values) is taken from histograms of LLRs, so that memory does not grow with the sample."""

import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import calibration
from .calibration import Calibration, expit, logit
from .outputs import atomic_open
from .regions import RegionSettings, regions_table
from .tables import formatted, read_chunks, whole_groups

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
    """predict's chunks: counted as they are written to a scratch table, each one's LLR and
    atypicality kept in a scratch file beside it (8 bytes a chunk, on disk), then the table copied
    line by line with their columns added: its probability at the sample's viral fraction of chunks
    and its atypicality. Copying lines, not parsing them again, keeps the cost of weighing small."""

    LINES = 1 << 16  # lines copied at a time

    def __init__(self, cal: Calibration, scratch: Path):
        self.cal, self.path = cal, scratch
        self.counts = np.zeros(calibration.N_BINS, dtype=np.int64)
        self.evidence = open(scratch, "wb")

    def count(self, chunks: pd.DataFrame) -> None:
        llr = self.cal.chunk_llrs(chunks["max_score_virus"].to_numpy())
        self.counts += calibration.histogram(llr)
        np.column_stack([llr, chunks["atypicality"].to_numpy()]).astype(np.float32).tofile(self.evidence)

    def write(self, unweighed: Path, output: Path) -> dict:
        """The chunks table at `unweighed` (CHUNKS' columns, the chunks counted, in order) with
        CHUNK_COLUMNS, to `output`; the composition used."""
        self.evidence.close()
        found = composition(self.counts, self.cal.chunk_prior, calibration.MIN_RECORDS_FOR_ESTIMATE)
        shift = logit(found["viral_fraction_estimate"])
        evidence = np.memmap(self.path, dtype=np.float32, mode="r").reshape(-1, 2) if self.path.stat().st_size else None
        with open(unweighed, "rb") as table, atomic_open(output, "wb") as out:
            out.write(table.readline().rstrip(b"\n") + "".join(f"\t{c}" for c in CHUNK_COLUMNS).encode() + b"\n")
            done = 0
            while lines := list(itertools.islice(table, self.LINES)):
                block = evidence[done : done + len(lines)]
                added = zip(formatted(expit(block[:, 0] + shift)), formatted(block[:, 1]))
                out.write(
                    b"".join(
                        b"%s\t%s\t%s\n" % (line[:-1], p.encode(), a.encode()) for line, (p, a) in zip(lines, added)
                    )
                )
                done += len(lines)
        return found


@dataclass
class RecordWeighing:
    """call's records and regions: their LLRs counted in a first pass over the chunks table, then
    each one's probability and q-value."""

    cal: Calibration
    records: np.ndarray  # histogram of records' LLRs
    regions: np.ndarray  # of regions'
    found: dict | None = None  # the records' composition, once counted (finish)
    shift: float = 0.0  # then logit of the records' viral fraction
    record_q: np.ndarray | None = None  # and the q-value of each histogram bin, of records
    region_q: np.ndarray | None = None  # and of regions
    tallied: Counter = field(default_factory=Counter)  # unreliable records, and those within max_qvalue

    @classmethod
    def of(cls, cal: Calibration) -> "RecordWeighing":
        return cls(cal, np.zeros(calibration.N_BINS, np.int64), np.zeros(calibration.N_BINS, np.int64))

    def count(self, chunks_path: Path, settings: RegionSettings, rows: int) -> None:
        """Count the LLRs of the records and regions of predict's chunks table, reading only the
        columns they need."""
        columns = ["sequence_id", "chunk_start", "chunk_end", "is_virus", "max_score_virus"]
        for chunks in whole_groups(read_chunks(chunks_path, columns, rows), ["sequence_id"]):
            chunks["llr"] = self.cal.chunk_llrs(chunks["max_score_virus"].to_numpy())
            per_record = chunks.groupby("sequence_id", sort=False)["llr"].agg(["size", "sum"])
            self.records += calibration.histogram(self.cal.record_llrs(per_record["size"], per_record["sum"]))
            self.regions += calibration.histogram(self.llr(regions_table(chunks, settings)))

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
        chunk is above the calibration's limit (calibration.Calibration.atypicality_limit)."""
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
