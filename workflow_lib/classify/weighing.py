"""A calibration (calibration.py) applied to a sample's tables: the probability that each chunk,
record and region is viral at the sample's own estimated viral fraction, and q-values. The tables
are read and written in blocks; what must see the whole sample first (its viral fraction, the
q-values) is taken from histograms of LLRs, so that memory does not grow with the sample."""

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from workflow_lib.classify import calibration
from workflow_lib.classify.calibration import Calibration, expit, logit
from workflow_lib.classify.regions import REGIONS
from workflow_lib.cli.errors import InputError
from workflow_lib.io.outputs import atomic_open
from workflow_lib.io.tables import decimal_text, formatted, read_chunks, read_json, tsv_writer

# columns a calibration adds, after the contract's (docs/outputs.md)
CHUNK_COLUMNS = ("probability_virus", "atypicality")
SEQUENCE_COLUMNS = ("probability_virus", "qvalue", "atypicality", "reliable")
REGION_COLUMNS = ("probability_virus", "qvalue", "in_seq_edge")
# call's scratch regions table, before the regions' q-values are known
WEIGHED_REGION = ("probability_virus", "in_seq_edge", "llr_bin")


def probability_text(values: np.ndarray, encoded: bool = False) -> np.ndarray:
    return decimal_text(values, 4, encoded=encoded)


def atypicality_text(values: np.ndarray, encoded: bool = False) -> np.ndarray:
    return decimal_text(values, 3, limit=10.0, encoded=encoded)  # typical ones about 1


class ChunkWeighing:
    """predict's chunks, counted as they are written to a scratch table (each one's LLR and atypicality
    kept in a scratch file beside it), then the table copied line by line, not parsed again, with
    CHUNK_COLUMNS added. Each record is counted into its bootstrap group's histograms (composition_intervals),
    so that call knows the records' composition and q-values before its one pass."""

    LINES = 1 << 16  # lines copied at a time
    # chunks held before they are added to the groups' histograms: adding to those large arrays for
    # every block would cost more than the rest of the weighing
    PENDING = 1 << 20

    def __init__(self, cal: Calibration, scratch: Path):
        self.cal, self.path = cal, scratch
        self.records = np.zeros(calibration.N_BINS, dtype=np.int64)
        # per bootstrap group of records (calibration.composition_intervals): its records, its chunks'
        # LLRs, and those each weighing 1 / its record's chunks
        groups = calibration.BOOTSTRAP_GROUPS
        self.group_records = np.zeros(groups, dtype=np.int64)
        self.chunks = np.zeros((groups, calibration.N_BINS), dtype=np.int64)
        self.record_chunks = np.zeros((groups, calibration.N_BINS))
        # the last column: chunks without an atypicality (atypicality_bin)
        self.typical = np.zeros((groups, calibration.N_ATYPICALITY_BINS + 1), dtype=np.int64)
        self.pending: list[tuple] = []  # (cell, weight, atypicality's cell) of chunks not yet in them
        self.evidence = open(scratch, "wb")

    def count(self, chunks: pd.DataFrame) -> None:
        """Count a block of whole records' chunks (io.tables.whole_groups)."""
        llr = self.cal.chunk_llrs(chunks["max_score_virus"].to_numpy())
        np.column_stack([llr, chunks["atypicality"].to_numpy()]).astype(np.float32).tofile(self.evidence)
        typical = calibration.atypicality_bin(chunks["atypicality"].to_numpy())
        ids = chunks["sequence_id"].to_numpy()
        starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])  # of each record's run of chunks
        sizes = np.diff(np.r_[starts, llr.size])
        self.records += calibration.histogram(self.cal.record_llrs(sizes, np.add.reduceat(llr, starts)))
        group = calibration.bootstrap_group(self.group_records.sum() + np.arange(sizes.size))
        self.group_records += np.bincount(group, minlength=calibration.BOOTSTRAP_GROUPS)
        chunk_group = np.repeat(group, sizes)
        cell = chunk_group * calibration.N_BINS + calibration.bin_of(llr)
        typical_cell = chunk_group * self.typical.shape[1] + typical
        self.pending.append((cell.astype(np.int32), np.repeat(1.0 / sizes, sizes), typical_cell.astype(np.int32)))
        if sum(c.size for c, _, _ in self.pending) >= self.PENDING:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        cell, weights, typical_cell = (np.concatenate(parts) for parts in zip(*self.pending))
        self.pending = []
        self.chunks += np.bincount(cell, minlength=self.chunks.size).reshape(self.chunks.shape)
        self.record_chunks += np.bincount(cell, weights, minlength=self.chunks.size).reshape(self.chunks.shape)
        self.typical += np.bincount(typical_cell, minlength=self.typical.size).reshape(self.typical.shape)

    def composition(self) -> dict:
        """scoring.json's `chunk_composition` and `record_composition` (the viral fraction of chunks and
        of records, their `interval`, and its `source`: the sample, or the calibration's own fraction
        where too few were counted for an estimate) and `composition_fit` (None without an estimate of
        the records'), once every chunk has come."""
        self.flush()
        n_chunks, n_records = int(self.chunks.sum()), int(self.group_records.sum())
        own = {"source": "sample"}
        if n_records >= calibration.MIN_RECORDS_FOR_ESTIMATE:
            found = calibration.composition_intervals(
                self.chunks, self.record_chunks, self.group_records, self.typical[:, :-1], self.records, self.cal
            )
            return {
                "chunk_composition": found["chunks"] | own | {"counted": n_chunks},
                "record_composition": found["records"] | own | {"counted": n_records},
                "composition_fit": found["fit"],
            }
        if n_chunks >= calibration.MIN_RECORDS_FOR_ESTIMATE:
            chunk = {"viral_fraction_estimate": calibration.estimate_prior(self.chunks.sum(axis=0))} | own
        else:
            chunk = {"viral_fraction_estimate": self.cal.chunk_prior, "source": "calibration"}
        record = {"viral_fraction_estimate": self.cal.record_prior, "source": "calibration"}
        # with so few records no interval is worth its name
        return {
            "chunk_composition": chunk | {"interval": None, "counted": n_chunks},
            "record_composition": record | {"interval": None, "counted": n_records},
            "composition_fit": None,
        }

    def write(self, unweighed: Path, output: Path) -> dict:
        """The chunks table at `unweighed` (CHUNKS' columns, the chunks counted, in order) with
        CHUNK_COLUMNS, to `output`; scoring.json's entries: the compositions (composition) and
        the records' LLRs (a sparse histogram)."""
        self.evidence.close()
        found = self.composition()
        shift = logit(found["chunk_composition"]["viral_fraction_estimate"])
        evidence = np.memmap(self.path, dtype=np.float32, mode="r").reshape(-1, 2) if self.path.stat().st_size else None
        with open(unweighed, "rb") as table, atomic_open(output, "wb") as out:
            out.write(table.readline().rstrip(b"\n") + "".join(f"\t{c}" for c in CHUNK_COLUMNS).encode() + b"\n")
            done = 0
            while lines := list(itertools.islice(table, self.LINES)):
                block = evidence[done : done + len(lines)]
                cells = [None] * (3 * len(lines))  # one format for the block, not one a line
                cells[0::3] = [line[:-1] for line in lines]
                cells[1::3] = probability_text(expit(block[:, 0] + shift), encoded=True).tolist()
                cells[2::3] = atypicality_text(block[:, 1], encoded=True).tolist()
                out.write(b"%s\t%s\t%s\n" * len(lines) % tuple(cells))
                done += len(lines)
        return found | {"record_llrs": calibration.sparse(self.records)}


class RecordWeighing:
    """call's records and regions: each one's probability at the sample's viral fraction of records,
    and its q-value at calibration.qvalue_share, from the histogram of the records' LLRs that predict
    counted (scoring.json); the regions' q-values need every region: call adds them at the end."""

    def __init__(self, cal: Calibration, scoring: dict, scoring_path: Path):
        if "composition_fit" not in scoring:
            raise InputError(
                f"{scoring_path}: written without the records' composition (no calibration, or an older version); "
                "delete the sample's predict outputs and run again"
            )
        self.cal, self.found = cal, scoring["record_composition"]  # predict's (ChunkWeighing.write)
        self.shift = logit(self.found["viral_fraction_estimate"])
        records = calibration.dense(scoring["record_llrs"], calibration.N_BINS)
        # the q-value of each histogram bin of records, and as the table writes it: formatted once per
        # bin, not per record
        self.record_q = calibration.qvalues(records, calibration.qvalue_share(self.found))
        self.record_q_text = np.array(formatted(self.record_q), dtype=object)
        self.regions = np.zeros(calibration.N_BINS, np.int64)  # the regions' LLRs, counted
        self.tallied = Counter()  # unreliable records, and those within max_qvalue

    def weigh_records(self, table: pd.DataFrame, max_qvalue: float | None) -> pd.DataFrame | None:
        """probability_virus and qvalue of the sequences table's rows (NA where no chunk is scored),
        and whether each record is like the data the classifier learned from and the calibration
        was fitted on: a record with no scored chunk is not (reliable: false), nor one whose median
        chunk is above the calibration's limit (calibration.Calibration.atypicality_limit). Count
        the unreliable ones; return those within `max_qvalue` (None without one)."""
        n = table["n_chunks_scored"].to_numpy(dtype=np.float64)
        scored = n > 0
        llr = self.cal.record_llrs(n, np.nan_to_num(table["sum_llr"].to_numpy(dtype=np.float64)))
        bins = calibration.bin_of(llr)
        table["probability_virus"] = np.where(scored, expit(llr + self.shift), np.nan)
        table["qvalue"] = np.where(scored, self.record_q[bins], np.nan)
        atypicality = table["atypicality"].to_numpy(dtype=np.float64)
        table["reliable"] = reliable = scored & (atypicality <= self.cal.atypicality_limit)
        self.tallied.update(unreliable_records=int((~reliable).sum()))
        passing = None
        if max_qvalue is not None:
            passing = table[table["qvalue"] <= max_qvalue]
            self.tallied.update(records_passing=len(passing))
        # the probabilities and q-values as the table writes them
        table["probability_virus"] = probability_text(table["probability_virus"].to_numpy())
        table["atypicality"] = atypicality_text(atypicality)
        table["qvalue"] = np.where(scored, self.record_q_text[bins], "NA")
        return passing

    def weigh_regions(self, regions: pd.DataFrame) -> None:
        """probability_virus of regions, and the bin of their LLRs (`llr_bin`) for their q-values."""
        llr = self.cal.record_llrs(regions["n_chunks"].to_numpy(np.float64), regions["sum_llr"].to_numpy(np.float64))
        regions["probability_virus"] = expit(llr + self.shift)
        regions["llr_bin"] = calibration.bin_of(llr)
        self.regions += np.bincount(regions["llr_bin"], minlength=calibration.N_BINS)

    def weigh_region_table(self, weighed: Path, output: Path, max_qvalue: float | None) -> pd.DataFrame:
        """The regions table at `weighed` (REGIONS, probability_virus, in_seq_edge and llr_bin) with
        their q-values, to `output` (REGIONS and REGION_COLUMNS); the regions within `max_qvalue`
        (sequence_id, region, probability_virus, qvalue), in order."""
        region_q = calibration.qvalues(self.regions, calibration.qvalue_share(self.found))
        passing = []
        with tsv_writer(output, REGIONS + REGION_COLUMNS) as write:
            for block in read_chunks(weighed):
                block["qvalue"] = region_q[block["llr_bin"].to_numpy(dtype=np.int64)]
                written = block.assign(probability_virus=probability_text(block["probability_virus"].to_numpy()))
                write(written)
                if max_qvalue is not None:
                    passing.append(
                        block.loc[block["qvalue"] <= max_qvalue, ["sequence_id", "region", *REGION_COLUMNS[:2]]]
                    )
        passing = pd.concat(passing, ignore_index=True) if passing else None
        if passing is not None:
            self.tallied.update(regions_passing=len(passing))
        return passing

    def summary(self, scoring: dict, max_qvalue: float | None) -> dict:
        """The manifest's `weighing`, with predict's compositions and their fit (`scoring`)."""
        passing = {key: self.tallied[key] for key in ("records_passing", "regions_passing")}
        return {
            "composition": {"records": self.found, "chunks": scoring["chunk_composition"]},
            "composition_fit": scoring["composition_fit"],
            "qvalues_at": calibration.qvalue_share(self.found),
            "unreliable_records": self.tallied["unreliable_records"],
            "max_qvalue": max_qvalue,
            "passing": None if max_qvalue is None else passing,
        }


def fit_line(sample: str, records: dict, fit: dict | None) -> str | None:
    """One line on the sample's composition of records, its fit (`composition_fit`) and what that
    means for its q-values; None where the calibration's own fraction stood in."""
    if fit is None:
        return None
    low, high = records["interval"]
    found = f"viral fraction of records {records['viral_fraction_estimate']:.3f} ({low:.3f}-{high:.3f})"
    if fit["fit"] == "ok":
        return (
            f"{sample}: the calibration fits its scores (fit {fit['statistic']:.1f} <= {fit['limit']:g}), {found}; "
            f"q-values at {low:.3f}, the end of the interval that passes fewer records"
        )
    unlike = "score" if fit["statistics"].get("atypicality", 0) <= fit["limit"] else "look to the classifier"
    return (
        f"{sample}: composition_fit poor ({fit['statistic']:.1f} > {fit['limit']:g}): its sequences {unlike} unlike "
        f"the calibration's classes, {found}: as little as 0 if its non-viral ones score like viral ones; "
        f"q-values at {low:.3f}, which passes only overwhelming evidence"
    )


# at the end of a run, the samples whose fit is ok are listed one a line up to this many, then counted
OK_LINES = 10


def composition_lines(manifests: dict[str, Path]) -> list[str]:
    """For the end of a run: fit_line of each weighed sample (name: its call manifest, where written),
    the poor ones first; beyond OK_LINES samples, those that fit in one line."""
    lines = {"poor": [], "ok": []}
    for sample, path in manifests.items():
        weighing = read_json(path).get("weighing") if Path(path).exists() else None
        if weighing and (fit := weighing["composition_fit"]):
            lines[fit["fit"]].append(fit_line(sample, weighing["composition"]["records"], fit))
    if len(lines["ok"]) > OK_LINES:
        lines["ok"] = [
            f"{len(lines['ok'])} samples fit the calibration: q-values at the lower end of each one's viral "
            "fraction interval (results/report/samples.tsv)"
        ]
    return lines["poor"] + lines["ok"]
