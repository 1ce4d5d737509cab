"""The figures and tables of the Snakemake report: an overview of all samples built from their run
summaries; per sample, virus-score distributions, calls, the top-scoring sequences chunk by
chunk, the records with the strongest viral regions, input statistics and embedding throughput;
for the `train` target, the validation ROC curve and metrics. PNGs are deterministic: fixed
sizes, no timestamps or software names in their metadata.

A sample's tables are read block by block, only the columns a figure needs: histograms over fixed
bins, counts and the top-scoring sequences are accumulated as the blocks go by, so that memory stays
bounded (a few hundred MB) whatever the number of reads."""

import html
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .models.checkpoints import DEMO_FILES  # noqa: E402
from .outputs import atomic_path  # noqa: E402
from .settings import PlotSampleSettings  # noqa: E402
from .tables import read_chunks, read_json, write_json, write_tsv  # noqa: E402


class SampleTables(NamedTuple):
    """What a sample's figures are drawn from."""

    frames: Path  # predict's frames table
    chunks: Path  # predict's chunks table
    sequences: Path  # call's sequences table
    regions: Path  # call's regions table
    prepared_frames: Path  # prepare's frames table (chunk positions)
    prepared_sequences: Path  # prepare's sequences table (input statistics)
    summary: Path  # the run summary (counts, embedding figures)


class SampleFigures(NamedTuple):
    scores: Path  # PNG: score distributions
    calls: Path  # PNG: sequences per call
    top_sequences: Path  # PNG: the top sequences chunk by chunk
    top_regions: Path  # PNG: the records with the strongest regions, chunk by chunk, regions marked
    table: Path  # HTML: the top sequences table
    input: Path  # PNG: input statistics
    throughput: Path  # PNG: embedding figures per shard


CALLS = {"virus": "#c0392b", "other": "#2e86c1", "no_coding_frame": "#95a5a6"}
MODELS = {"esm": ("ESM-2", "#8e44ad"), "dnabert": ("DNABERT-S", "#16a085")}
SCORE_BINS = np.linspace(0, 1, 41)
TABLE_STYLE = (
    "body{font-family:sans-serif;font-size:13px;margin:1em}table{border-collapse:collapse}"
    "th,td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}th{background:#eee;position:sticky;top:0}"
    "td:first-child,th:first-child{text-align:left}"
)


def save(figure, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)


def _text(value) -> str:
    """A sequence ID as matplotlib text: a `$` would start math mode."""
    return str(value).replace("$", r"\$")


class Histogram:
    """Counts of values in fixed bins, added block by block: drawn, the same bars as `ax.hist` of
    all the values at once (a value outside the bins, or NA, is counted in `n` only)."""

    def __init__(self, edges):
        self.edges = np.asarray(edges, dtype=float)
        self.counts = np.zeros(len(self.edges) - 1, dtype=np.int64)
        self.n = 0

    def add(self, values) -> "Histogram":
        values = np.asarray(values, dtype=float)
        self.n += len(values)
        self.counts += np.histogram(values, bins=self.edges)[0]
        return self

    def draw(self, ax, **style) -> None:
        # one value per bin (its left edge) weighted by its count: the bars of the values themselves
        ax.hist(self.edges[:-1], bins=self.edges, weights=self.counts, **style)


class TopRows:
    """The n rows of a table with the highest max_score_virus (unscored ones last), ties in table
    order, kept while the table goes by block by block: at most n rows held besides the block."""

    def __init__(self, n: int):
        self.n, self.rows = n, None

    def add(self, block: pd.DataFrame) -> "TopRows":
        held = self.rows is not None and len(self.rows)
        self.rows = top_sequences(pd.concat([self.rows, block]) if held else block, self.n)
        return self


class SequenceStats(NamedTuple):
    """What a sample's figures need from call's sequences table, gathered in one pass."""

    scores: Histogram  # max_score_virus of the scored sequences
    calls: Counter  # sequences per call
    top: pd.DataFrame  # the `top` highest-scoring sequences with a scored chunk
    shown: pd.DataFrame  # the `rows` highest-scoring sequences, scored or not (the HTML table)
    picked: pd.DataFrame  # the rows of the sequences asked for by ID, in table order

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def sequence_stats(blocks: Iterable[pd.DataFrame], top: int, rows: int, ids: set[str] = frozenset()) -> SequenceStats:
    """`ids`: sequences whose rows to keep as well (`picked`)."""
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
    return SequenceStats(scores, calls, *kept, pd.concat(picked) if picked else empty)


def plot_scores(frame_scores: Histogram, sequence_scores: Histogram, path: str | Path) -> None:
    """Histograms of the frames' score_virus and the sequences' max_score_virus."""
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for ax, histogram, what in (
        (axes[0], frame_scores, "frames"),
        (axes[1], sequence_scores, "sequences (highest chunk score)"),
    ):
        histogram.draw(ax, color=CALLS["virus"], alpha=0.8)
        ax.axvline(0.5, color="black", linestyle="--", linewidth=1)
        ax.set(xlabel="virus score", ylabel="count", title=f"{histogram.n:,} {what}", xlim=(0, 1))
    save(figure, path)


def plot_calls(calls: Counter, path: str | Path) -> None:
    """Sequences per call, with the share of all sequences."""
    counts = pd.Series({call: calls.get(call, 0) for call in CALLS})
    sequences = sum(calls.values())
    total = max(sequences, 1)
    figure, ax = plt.subplots(figsize=(7, 3), layout="constrained")
    bars = ax.barh(counts.index[::-1], counts.to_numpy()[::-1], color=[CALLS[c] for c in counts.index[::-1]])
    ax.bar_label(bars, labels=[f"{n:,} ({n / total:.1%})" for n in counts.to_numpy()[::-1]], padding=3)
    ax.set(xlabel="sequences", title=f"{counts['virus'] / total:.1%} of {sequences:,} sequences called viral")
    ax.set_xlim(0, max(counts.max(), 1) * 1.3)
    save(figure, path)


def chunk_positions(prepared_frames: str | Path, ids: set[str]) -> pd.DataFrame:
    """chunk_start and chunk_end of the chunks of `ids`, read in slices: the table has a row per frame."""
    columns = ["sequence_id", "chunk", "chunk_start", "chunk_end"]
    parts = [part[part["sequence_id"].isin(ids)].drop_duplicates() for part in read_chunks(prepared_frames, columns)]
    return pd.concat(parts or [pd.DataFrame(columns=columns)]).drop_duplicates(["sequence_id", "chunk"])


def rows_of(table: str | Path, ids: set[str], columns: list[str] | None = None) -> pd.DataFrame:
    """The rows of a table of this workflow for the sequences `ids`, in table order, read in slices
    (a table holding only its header gives one empty block)."""
    return pd.concat(part[part["sequence_id"].isin(ids)] for part in read_chunks(table, columns))


def strongest_regions(regions: str | Path, n: int) -> list[str]:
    """The records of the n strongest regions (highest mean_score_virus, then longest), best first,
    read block by block."""
    best = None
    for block in read_chunks(regions, ["sequence_id", "length", "mean_score_virus"]):
        best = block if best is None else pd.concat([best, block])
        best = best.sort_values(["mean_score_virus", "length"], ascending=False, kind="stable").head(n)
    return [] if best is None else list(dict.fromkeys(best["sequence_id"]))


def top_sequences(sequences: pd.DataFrame, n: int) -> pd.DataFrame:
    """The n sequences with the highest max_score_virus (unscored ones last), ties in table order."""
    return sequences.sort_values("max_score_virus", ascending=False, kind="stable", na_position="last").head(n)


def plot_top_sequences(
    top: pd.DataFrame,
    chunks: pd.DataFrame,
    positions: pd.DataFrame,
    regions: pd.DataFrame,
    path: str | Path,
    empty: str = "no sequence has a scored chunk",
) -> None:
    """Per-chunk max_score_virus along each of the `top` sequences, in their order: one segment
    per scored chunk from its start to its end (bp), red when the chunk is called viral, and the
    sequence's viral regions shaded. `chunks`, `positions` and `regions` need hold only those sequences."""
    scored = chunks.merge(positions, on=["sequence_id", "chunk"], how="left")
    columns = min(max(len(top), 1), 3)
    rows = max(1, -(-len(top) // columns))
    figure, axes = plt.subplots(
        rows, columns, figsize=(4 * columns, 2.2 * rows + 0.6), layout="constrained", squeeze=False
    )
    # positions in kb once a sequence passes 10 kb: bp tick labels of long contigs run together
    scale, unit = (1000, "kb") if len(top) and top["length"].max() > 10_000 else (1, "bp")
    for ax, (_, record) in zip(axes.flat, top.iterrows()):
        own = scored[scored["sequence_id"] == record["sequence_id"]]
        colors = np.where(own["is_virus"], CALLS["virus"], CALLS["other"])
        starts, ends = own["chunk_start"] / scale, own["chunk_end"] / scale
        for _, region in regions[regions["sequence_id"] == record["sequence_id"]].iterrows():
            ax.axvspan(region["start"] / scale, region["end"] / scale, color=CALLS["virus"], alpha=0.12, linewidth=0)
        ax.hlines(own["max_score_virus"], starts, ends, colors=colors, linewidth=2.5)
        ax.scatter((starts + ends) / 2, own["max_score_virus"], s=6, c=colors)  # short chunks
        ax.axhline(0.5, color="black", linestyle=":", linewidth=0.8)
        name = record["sequence_id"] if len(record["sequence_id"]) <= 40 else record["sequence_id"][:37] + "..."
        ax.set_title(f"{_text(name)} ({record['call']}, {record['n_regions']} regions)", fontsize=9)
        ax.set(xlim=(0, record["length"] / scale), ylim=(-0.03, 1.03))
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(5))
        ax.tick_params(labelsize=8)
    for ax in axes.flat[len(top) :]:
        ax.axis("off")
    if len(top) == 0:
        axes.flat[0].text(0.5, 0.5, empty, ha="center", va="center")
    figure.supxlabel(f"position in the sequence ({unit}); viral regions shaded", fontsize=9)
    figure.supylabel("chunk virus score", fontsize=9)
    save(figure, path)


class InputStats(NamedTuple):
    """Histograms of prepare's sequences table: record lengths, frames per record, ambiguous fraction."""

    lengths: Histogram
    length_log: bool  # lengths span more than a factor 100: log-spaced bins on a log axis
    frames: Histogram
    ambiguous: Histogram


PREPARED_COLUMNS = ["length", "n_frames", "ambiguous_fraction"]


def input_stats(blocks: Callable[[], Iterable[pd.DataFrame]]) -> InputStats:
    """Two passes over the table's blocks (`blocks()` gives them anew): the bins of the lengths and
    frames depend on their range, as those of `ax.hist(values, bins=30)` would."""
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
    stats = InputStats(Histogram(length_edges), wide, Histogram(frame_edges), Histogram(np.linspace(0, 1, 41)))
    for block in blocks():
        stats.lengths.add(block["length"].clip(lower=1))
        stats.frames.add(block["n_frames"])
        stats.ambiguous.add(block["ambiguous_fraction"])
    return stats


def plot_input(stats: InputStats, counts: dict, path: str | Path) -> None:
    """Totals of the input, and per record its length, frames and share of ambiguous bases."""
    figure, axes = plt.subplots(2, 2, figsize=(10, 6.5), layout="constrained")
    totals = [
        ("records", f"{counts['records']:,}"),
        ("bases", f"{counts['bases']:,}"),
        ("chunks", f"{counts['chunks']:,}"),
        ("frames (stop-free)", f"{counts['frames']:,}"),
        ("frames per record", f"{counts['frames_per_record']:.2f}"),
        ("ambiguous (non-ACGT) bases", f"{counts['ambiguous_bases']:,} ({counts['ambiguous_fraction']:.3%})"),
        *((f"status {status}", f"{n:,}") for status, n in counts["status"].items()),
    ]
    axes[0, 0].axis("off")
    table = axes[0, 0].table(cellText=totals, loc="center", cellLoc="left", edges="horizontal")
    table.auto_set_font_size(False)
    table.set_fontsize(10)
    table.scale(1, 1.4)
    stats.lengths.draw(axes[0, 1], color="#34495e")
    axes[0, 1].set(xscale="log" if stats.length_log else "linear", xlabel="record length (bp)", ylabel="records")
    stats.frames.draw(axes[1, 0], color="#16a085")
    axes[1, 0].set(xlabel="stop-free frames per record", ylabel="records")
    stats.ambiguous.draw(axes[1, 1], color="#7f8c8d")
    axes[1, 1].set(xlabel="ambiguous (non-ACGT) fraction of the record", ylabel="records", xlim=(0, 1))
    save(figure, path)


def plot_throughput(shards: list[dict], path: str | Path) -> None:
    """Tokens/s and packing fill of each embedding shard, per model, labelled with precision and device."""
    table = pd.DataFrame(shards)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    n_shards = table["shard"].max() + 1
    n_models = table["model"].nunique()
    width = 0.8 / n_models
    for i, (model, own) in enumerate(table.groupby("model", sort=False)):
        name, color = MODELS.get(model, (model, None))
        labels = [f"{p}\n{d}" for p, d in zip(own["precision"], own["device"])]
        for ax, column in ((axes[0], "tokens_per_s"), (axes[1], "fill")):
            bars = ax.bar(own["shard"] + (i - (n_models - 1) / 2) * width, own[column], width, label=name, color=color)
            ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    axes[0].set(ylabel="tokens/s", title="embedding throughput", ylim=(0, axes[0].get_ylim()[1] * 1.15))
    axes[1].set(ylabel="real tokens / batch slots", title="packing fill", ylim=(0, 1.15))
    for ax in axes:
        ax.set_xticks(range(n_shards), [f"shard {s}" for s in range(n_shards)])
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside upper center", ncols=len(MODELS))
    save(figure, path)


def _table(table: pd.DataFrame) -> str:
    return table.to_html(index=False, na_rep="NA", float_format=lambda v: f"{v:.4g}", border=0)


def html_page(title: str, body: str, path: str | Path) -> None:
    """A self-contained HTML page (the report shows HTML inline); `body` is HTML."""
    page = (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{TABLE_STYLE}</style></head>\n<body><h3>{html.escape(title)}</h3>\n{body}\n</body></html>\n"
    )
    with atomic_path(path) as tmp:
        Path(tmp).write_text(page, encoding="utf-8")


def html_table(table: pd.DataFrame, title: str, note: str, path: str | Path) -> None:
    """A page holding one table."""
    html_page(title, f"<p>{html.escape(note)}</p>\n{_table(table)}", path)


# results/report/samples.tsv: a row per sample
SAMPLE_COUNTS = (
    "records", "bases", *CALLS, "chunks", "chunks_scored", "viral_chunks", "viral_bases", "regions", "region_bases"
)  # fmt: skip


def samples_table(runs: list[dict]) -> pd.DataFrame:
    """Per sample (run summaries): its records and bases, the calls of each kind, its chunks, the
    chunks scored and called viral, the bases of the records called virus, and the viral regions
    inside records and their bases."""
    rows = []
    for run in runs:
        counts = {**run["counts"], **{call: run["counts"]["calls"].get(call, 0) for call in CALLS}}
        rows.append({"sample": run["sample"], **{key: counts[key] for key in SAMPLE_COUNTS}})
    return pd.DataFrame(rows, columns=["sample", *SAMPLE_COUNTS])


def made_by(run: dict) -> dict:
    """{what: its value} of what made a sample's results, from its run summary: models, classifier,
    precision and device, settings and versions."""
    checkpoints, config, shards = run["checkpoints"], run["config"], run["embedding_shards"]
    versions = {
        f"{v.get('torch')}, {v.get('fair-esm')}, CUDA {v.get('cuda')}, {v.get('device_name')}"
        for v in run["versions"]["embed"].values()
    }
    return {
        "ESM-2": f"{checkpoints['esm']['checkpoint']}, layer {checkpoints['esm']['layer']}",
        "DNABERT-S": checkpoints["dnabert"]["checkpoint"],
        "classifier": f"{checkpoints['classifier']['path']} (SHA-256 {checkpoints['classifier']['sha256'][:12]})",
        "precision, device, attention": ", ".join(
            sorted({f"{s['model']}: {s['precision']} on {s['device']}, {s['attention']}" for s in shards})
        ),
        "chunk_length": config["chunk_length"],
        "predict.min_viral_fraction": config["predict"]["min_viral_fraction"],
        "workflow version": run["workflow_version"],
        "torch, fair-esm, CUDA, device": ", ".join(sorted(versions)),
    }


def overview(summaries: list[str | Path], path: str | Path, table: str | Path, recorded: str | Path) -> None:
    """One page across all samples, from their run summaries (what made the results, not the
    config at hand): a banner when the demo models made them, a row per sample (records, bases,
    calls, viral fraction; also written as the TSV `table`), and per model and setting the values
    the samples were made with. `recorded`: the RECORDED_SETTINGS of the results (JSON), for later
    runs to compare."""
    runs = [read_json(p) for p in summaries]
    counts = samples_table(runs)
    write_tsv(counts, table)
    rows = counts[["sample", "records", "bases", *CALLS, "regions"]].assign(
        **{"viral fraction": counts["virus"] / counts["records"].clip(lower=1)}
    )
    made_with = {}
    for run in runs:
        for key, value in made_by(run).items():
            made_with.setdefault(key, {}).setdefault(str(value), []).append(run["sample"])
    demo = sorted(
        {
            checkpoints[model]["checkpoint"]
            for checkpoints in (run["checkpoints"] for run in runs)
            for model in ("esm", "dnabert")
            if Path(checkpoints[model]["checkpoint"]).name in DEMO_FILES
        }
    )
    banner = (
        '<p style="background:#c0392b;color:white;padding:8px;font-weight:bold">Demo models: calls carry no '
        f"meaning. These results were made by the tiny random demo models ({html.escape(', '.join(demo))}).</p>\n"
        if demo
        else ""
    )
    settings = pd.DataFrame(
        [
            {"made with": key, "value": value, "samples": "all" if len(names) == len(runs) else ", ".join(names)}
            for key, values in made_with.items()
            for value, names in values.items()
        ]
    )
    body = (
        f"{banner}<p>From the run summaries of {len(runs)} samples: what made these results.</p>\n"
        f"{_table(rows)}\n<h4>Models, settings and versions</h4>\n{_table(settings)}"
    )
    html_page("Overview", body, path)
    write_json({key: sorted({_setting(run["config"], key) for run in runs}) for key in RECORDED_SETTINGS}, recorded)


# Settings whose values made the results: the overview records them, and a later run whose config
# names others is told so at start-up (config_check.recorded_differences).
RECORDED_SETTINGS = (
    "models.esm.checkpoint",
    "models.esm.layer",
    "models.dnabert.checkpoint",
    "models.classifier",
    "chunk_length",
    "predict.min_viral_fraction",
)


def _setting(config: dict, key: str):
    for part in key.split("."):
        config = config[part]
    return config


def sample_report(sample: str, tables: SampleTables, figures: SampleFigures, settings: PlotSampleSettings) -> None:
    """All figures of a sample: the top sequences and the records of the strongest regions plotted
    chunk by chunk, the top rows in the HTML table. Every table is read block by block
    (tables.read_chunks), only the columns that are drawn."""
    top, rows = settings.top_sequences, settings.table_rows
    run = read_json(tables.summary)
    frame_scores = Histogram(SCORE_BINS)
    for block in read_chunks(tables.frames, ["score_virus"]):
        frame_scores.add(block["score_virus"])
    strongest = strongest_regions(tables.regions, settings.top_regions)
    sequences = sequence_stats(read_chunks(tables.sequences), top, rows, set(strongest))
    plot_scores(frame_scores, sequences.scores, figures.scores)
    plot_calls(sequences.calls, figures.calls)
    # the chunks, positions and regions of both track figures' sequences, each table read once
    ids = set(sequences.top["sequence_id"]) | set(strongest)
    tracks = (
        rows_of(tables.chunks, ids, ["sequence_id", "chunk", "max_score_virus", "is_virus"]),
        chunk_positions(tables.prepared_frames, ids),
        rows_of(tables.regions, ids, ["sequence_id", "start", "end"]),
    )
    plot_top_sequences(sequences.top, *tracks, figures.top_sequences)
    records = sequences.picked.set_index("sequence_id").loc[strongest].reset_index()
    plot_top_sequences(records, *tracks, figures.top_regions, "no viral region inside a record")
    shown = sequences.shown
    html_table(
        shown[["sequence_id", "call", *(c for c in shown.columns if c not in ("sequence_id", "call"))]],
        f"{sample}: sequences with the highest virus scores",
        f"{min(rows, sequences.total):,} of {sequences.total:,} sequences, highest max_score_virus first; "
        f"the whole table is {Path(tables.sequences).name}.",
        figures.table,
    )
    plot_input(
        input_stats(lambda: read_chunks(tables.prepared_sequences, PREPARED_COLUMNS)), run["counts"], figures.input
    )
    plot_throughput(run["embedding_shards"], figures.throughput)


def _flatten(values: dict, prefix: str = "") -> dict:
    """Nested dicts of scalars as {"outer inner": value}; lists (curves, histories) left out."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat |= _flatten(value, f"{prefix}{key} ")
        elif not isinstance(value, list):
            flat[f"{prefix}{key}"] = value
    return flat


def training_report(metrics_path: str | Path, roc_path: str | Path, table_path: str | Path) -> None:
    """The validation ROC curve (when metrics.json holds one) and the metrics as a table."""
    metrics = read_json(metrics_path)
    figure, ax = plt.subplots(figsize=(5, 5), layout="constrained")
    ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    curve, auc = metrics.get("roc_curve"), metrics.get("validation", {}).get("roc_auc")
    if curve:
        ax.plot(curve["false_positive_rate"], curve["true_positive_rate"], color=CALLS["virus"], marker=".")
        ax.set_title(f"validation ROC curve, AUC {auc:.3f}" if auc is not None else "validation ROC curve")
    else:
        ax.set_title("no ROC curve: the validation split holds one class only")
    ax.set(xlabel="false positive rate", ylabel="true positive rate", xlim=(0, 1), ylim=(0, 1.01), aspect="equal")
    save(figure, roc_path)
    scalars = _flatten(metrics)
    table = pd.DataFrame(
        {"metric": list(scalars), "value": [f"{v:.4g}" if isinstance(v, float) else str(v) for v in scalars.values()]}
    )
    html_table(table, "classifier training", f"from {Path(metrics_path).name}", table_path)
