"""The readers and accumulators of what the report shows (figures.py gathers and draws it). A
sample's tables are read block by block, only the columns a figure needs: histograms over fixed bins, counts and the
top-scoring sequences are accumulated as the blocks go by, so that memory stays bounded whatever
the number of reads."""

from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from workflow_lib.io.tables import MATE_LENGTHS, read_chunks, read_json

CALL_NAMES = ("virus", "other", "no_coding_frame")


class SampleTables(NamedTuple):
    frames: Path  # predict's frames table
    chunks: Path  # predict's chunks table
    sequences: Path  # call's sequences table
    regions: Path  # call's regions table
    prepared_sequences: Path  # prepare's sequences table (input statistics)
    summary: Path  # the run summary (counts, embedding figures)


SCORE_BINS = np.linspace(0, 1, 41)


class Histogram:
    """Counts of values in fixed bins, added block by block: drawn, the same bars as `ax.hist` of
    all the values at once (a value outside the bins, or NA, is counted in `n` only; figures.draw)."""

    def __init__(self, edges):
        self.edges = np.asarray(edges, dtype=float)
        self.counts = np.zeros(len(self.edges) - 1, dtype=np.int64)
        self.n = 0

    def add(self, values) -> "Histogram":
        values = np.asarray(values, dtype=float)
        self.n += len(values)
        self.counts += np.histogram(values, bins=self.edges)[0]
        return self


class TopRows:
    """The n rows of a table with the highest values of `by` (top_sequences), kept while the table
    goes by block by block: at most n rows held besides the block."""

    def __init__(self, n: int, by: tuple[str, ...] = ("max_score_virus",)):
        self.n, self.by, self.rows = n, by, None

    def add(self, block: pd.DataFrame) -> None:
        held = self.rows is not None and len(self.rows)
        self.rows = top_sequences(pd.concat([self.rows, block]) if held else block, self.n, self.by)


def sequence_stats(blocks: Iterable[pd.DataFrame], top: int, rows: int, ids: set[str] = frozenset()) -> tuple:
    """What a sample's figures need from call's sequences table, in one pass: a Histogram of the
    scored sequences' max_score_virus, the sequences per call (Counter), the `top` highest-scoring
    sequences with a scored chunk, the `rows` highest-scoring ones, scored or not (the HTML table),
    and the rows of the sequences `ids`, in table order."""
    scores, calls, best, shown = Histogram(SCORE_BINS), Counter(), TopRows(top), TopRows(rows)
    empty, picked = None, []
    for block in blocks:
        empty = block.head(0)
        scores.add(block["max_score_virus"].dropna())
        calls.update(block["call"].value_counts().to_dict())
        best.add(block[block["n_chunks_scored"] > 0])
        shown.add(block)
        picked.append(block[block["sequence_id"].isin(ids)])
    kept = (t.rows if t.rows is not None else empty for t in (best, shown))
    return scores, calls, *kept, pd.concat(picked) if picked else empty


def rows_of(table: str | Path, ids: set[str], columns: list[str] | None = None) -> pd.DataFrame:
    """The rows of the sequences `ids`, in table order (a table holding only its header gives one empty block)."""
    return pd.concat(part[part["sequence_id"].isin(ids)] for part in read_chunks(table, columns))


def strongest_regions(regions: str | Path, n: int) -> list[str]:
    """The records of the n strongest regions (highest mean_score_virus, then longest), best first."""
    best = TopRows(n, ("mean_score_virus", "length"))
    for block in read_chunks(regions, ["sequence_id", "length", "mean_score_virus"]):
        best.add(block)
    return [] if best.rows is None else list(dict.fromkeys(best.rows["sequence_id"]))


def top_sequences(sequences: pd.DataFrame, n: int, by: tuple[str, ...] = ("max_score_virus",)) -> pd.DataFrame:
    """The n rows with the highest values of `by` (unscored ones last), ties in table order."""
    return sequences.sort_values(list(by), ascending=False, kind="stable", na_position="last").head(n)


PREPARED_COLUMNS = ["length", "n_frames", "ambiguous_fraction"]


def record_word(prepared_sequences: Path) -> str:
    """What a record of the sample is: "fragment" where its sequences table gives the mates' lengths."""
    columns = pd.read_csv(prepared_sequences, sep="\t", nrows=0).columns
    return "fragment" if set(MATE_LENGTHS) <= set(columns) else "record"


def input_stats(blocks: Callable[[], Iterable[pd.DataFrame]]) -> tuple[Histogram, bool, Histogram, Histogram]:
    """Histograms of prepare's sequences table: lengths, whether they span more than a factor 100
    (then log-spaced bins on a log axis), frames and ambiguous fractions. Two passes over the
    table's blocks (`blocks()` gives them anew): the bins of the lengths and frames depend on their
    range, as those of `ax.hist(values, bins=30)` would."""
    low, high, fewest, most = np.inf, -np.inf, np.inf, -np.inf
    for block in blocks():
        if len(block):
            lengths = block["length"].clip(lower=1)
            low, high = min(low, lengths.min()), max(high, lengths.max())
            fewest, most = min(fewest, block["n_frames"].min()), max(most, block["n_frames"].max())
    if low > high:  # no record
        low, high, fewest, most = 1, 1, 0, 0
    wide = high > 100 * low
    length_edges = np.geomspace(low, high + 1, 31) if wide else np.histogram_bin_edges([low, high], 30)
    frame_edges = np.arange(most + 2) - 0.5 if most < 60 else np.histogram_bin_edges([fewest, most], 60)
    lengths, frames, ambiguous = Histogram(length_edges), Histogram(frame_edges), Histogram(np.linspace(0, 1, 41))
    for block in blocks():
        lengths.add(block["length"].clip(lower=1))
        frames.add(block["n_frames"])
        ambiguous.add(block["ambiguous_fraction"])
    return lengths, wide, frames, ambiguous


# results/report/samples.tsv: a row per sample
SAMPLE_COUNTS = (
    "records", "bases", *CALL_NAMES, "chunks", "chunks_scored", "viral_chunks", "viral_bases", "regions", "region_bases"
)  # fmt: skip


def samples_table(runs: list[dict]) -> pd.DataFrame:
    """Per sample (run summaries): SAMPLE_COUNTS; with a calibration, its estimated viral fraction
    of records (and whether it comes from the sample or, with too few scored records, the
    calibration), the records and regions within call.max_qvalue, the estimate's interval and
    whether the calibration fits the sample (empty where the calibration's fraction stood in); last,
    each model's share of its pooled shards' tokens embedded and the seconds their copies would have
    taken (embed/figures.copies_not_embedded)."""
    rows = []
    for run in runs:
        counts = {**run["counts"], **{call: run["counts"]["calls"].get(call, 0) for call in CALL_NAMES}}
        row = {"sample": run["sample"], **{key: counts[key] for key in SAMPLE_COUNTS}}
        if "weighing" in run:
            records = run["weighing"]["composition"]["records"]
            passing = run["weighing"]["passing"] or {}
            row |= {
                "viral_fraction_estimate": records["viral_fraction_estimate"],
                "viral_fraction_from": records["source"],
                "unreliable_records": run["weighing"]["unreliable_records"],
                "records_passing_qvalue": passing.get("records_passing"),
                "regions_passing_qvalue": passing.get("regions_passing"),
            }
            fit = run["weighing"]["composition_fit"]
            if fit is not None:
                row["viral_fraction_low"], row["viral_fraction_high"] = records["interval"]
                row |= {"composition_fit": fit["fit"], "composition_fit_statistic": fit["statistic"]}
        for model, embedded in run.get("embedded", {}).items():  # summaries of before it: none
            row[f"{model}_tokens_embedded_share"] = embedded["tokens_embedded_share"]
            row[f"{model}_seconds_saved"] = embedded["seconds_saved"]
        rows.append(row)
    # the weighing's columns follow the counts, in the order above: the order they first appear in
    return pd.DataFrame(rows)


def made_by(run: dict) -> dict:
    """{what: its value} of what made a sample's results, from its run summary."""
    checkpoints, config, shards = run["checkpoints"], run["config"], run["embedding_shards"]
    versions = {
        f"{v.get('torch')}, {v.get('fair-esm')}, CUDA {v.get('cuda')}, {v.get('device_name')}"
        for v in run["versions"]["embed"].values()
    }
    return {
        # a model's checkpoint, and its layer where one was chosen (the embeddings' attribute: -1 or the layer)
        **{
            display_name(config, model): made["checkpoint"]
            if made["layer"] < 0
            else f"{made['checkpoint']}, layer {made['layer']}"
            for model, made in checkpoints.items()
            if model != "classifier"
        },
        "classifier": f"{checkpoints['classifier']['path']} (SHA-256 {checkpoints['classifier']['sha256'][:12]})",
        "precision, device, attention": ", ".join(
            sorted({f"{s['model']}: {s['precision']} on {s['device']}, {s['attention']}" for s in shards})
        ),
        "chunk_length": config["chunk_length"],
        "predict.min_viral_fraction": config["predict"]["min_viral_fraction"],
        "workflow version": run["workflow_version"],
        "torch, fair-esm, CUDA, device": ", ".join(sorted(versions)),
    }


def display_name(config: dict, model: str) -> str:
    return config["models"][model].get("display_name", model)


def recorded_settings(config: dict) -> tuple[str, ...]:
    """Settings whose values made the results: the overview records them, and a later run whose
    config names others is told so at start-up (config_check.recorded_differences)."""
    per_model = [f"models.{m}.{key}" for m in config["models"]["embedders"] for key in ("checkpoint", "layer")]
    return (*per_model, "models.classifier", "chunk_length", "predict.min_viral_fraction")


def flatten(values: dict, prefix: str = "") -> dict:
    """Nested dicts of scalars as {"outer inner": value}; lists (curves, histories) left out."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat |= flatten(value, f"{prefix}{key} ")
        elif not isinstance(value, list):
            flat[f"{prefix}{key}"] = value
    return flat


QVALUE_CUTOFFS = np.array([0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5])


def weighed_calls(sequences: str | Path, manifest: str | Path) -> dict:
    """A weighed sample's records within each of QVALUE_CUTOFFS, its records called virus, its
    estimated viral fraction with its interval and fit (None where the calibration's stood in)."""
    passing, virnucpro = np.zeros(QVALUE_CUTOFFS.size, dtype=np.int64), 0
    for block in read_chunks(sequences, ["call", "qvalue"]):
        q = pd.to_numeric(block["qvalue"], errors="coerce").to_numpy()
        passing += (q[:, None] <= QVALUE_CUTOFFS).sum(axis=0)
        virnucpro += int((block["call"] == "virus").sum())
    weighing = read_json(manifest)["weighing"]
    records = weighing["composition"]["records"]
    return {
        "passing": passing.tolist(),
        "virnucpro": virnucpro,
        "viral_fraction_estimate": records["viral_fraction_estimate"],
        "interval": records["interval"],
        "fit": weighing["composition_fit"] and weighing["composition_fit"]["fit"],
        "from_sample": records["source"] == "sample",
    }
