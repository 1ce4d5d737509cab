"""The figures and tables of the Snakemake report (their captions: report/*.rst). PNGs are
deterministic: fixed sizes, no timestamps or software names in their metadata. data.py reads
the tables block by block; this module gathers what each page shows and draws it."""

import html
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # after the backend is chosen
import numpy as np
import pandas as pd

from workflow_lib.cli.settings import PlotSampleSettings, config_value
from workflow_lib.io.outputs import atomic_path
from workflow_lib.io.tables import read_chunks, read_json, write_json, write_tsv
from workflow_lib.models.checkpoints import DEMO_FILES
from workflow_lib.report import data


class SampleFigures(NamedTuple):
    scores: Path  # PNG: score distributions
    calls: Path  # PNG: sequences per call
    top_sequences: Path  # PNG: the top sequences chunk by chunk
    top_regions: Path  # PNG: the records with the strongest regions, chunk by chunk, regions marked
    table: Path  # HTML: the top sequences table
    input: Path  # PNG: input statistics
    throughput: Path  # PNG: embedding figures per shard


WEIGHED_SAMPLES_SHOWN = 30  # samples drawn in the weighing figure
CALLS = dict(zip(data.CALL_NAMES, ("#c0392b", "#2e86c1", "#95a5a6")))
MODEL_COLORS = ("#16a085", "#8e44ad", "#d35400", "#2c3e50")  # the embedding models', in input order
TABLE_STYLE = (
    "body{font-family:sans-serif;font-size:13px;margin:1em}table{border-collapse:collapse}"
    "th,td{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}th{background:#eee;position:sticky;top:0}"
    "td:first-child,th:first-child{text-align:left}"
)


def save(figure, path: str | Path) -> None:
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100, metadata={"Software": None})
    plt.close(figure)


def draw(histogram: data.Histogram, ax, **style) -> None:
    # one value per bin (its left edge) weighted by its count: the bars of the values themselves
    ax.hist(histogram.edges[:-1], bins=histogram.edges, weights=histogram.counts, **style)


def _text(value) -> str:
    """A sequence ID as matplotlib text: a `$` would start math mode."""
    return str(value).replace("$", r"\$")


def plot_scores(frame_scores: data.Histogram, sequence_scores: data.Histogram, path: str | Path) -> None:
    """Histograms of the frames' score_virus and the sequences' max_score_virus."""
    figure, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for ax, histogram, what in (
        (axes[0], frame_scores, "frames"),
        (axes[1], sequence_scores, "sequences (highest chunk score)"),
    ):
        draw(histogram, ax, color=CALLS["virus"], alpha=0.8)
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


def plot_top_sequences(
    top: pd.DataFrame,
    scored: pd.DataFrame,
    regions: pd.DataFrame,
    path: str | Path,
    empty: str = "no sequence has a scored chunk",
) -> None:
    """Per-chunk max_score_virus along each of the `top` sequences, in their order: one segment
    per `scored` chunk from its chunk_start to its chunk_end (bp), red when the chunk is called
    viral, and the sequence's viral `regions` shaded. The tables need hold only those sequences."""
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


def plot_input(stats: tuple, counts: dict, path: str | Path, record: str = "record") -> None:
    """Totals of the input, and per record (a paired sample's: per fragment, both mates) its length,
    frames and share of ambiguous bases (data.input_stats)."""
    lengths, length_log, frames, ambiguous = stats
    figure, axes = plt.subplots(2, 2, figsize=(10, 6.5), layout="constrained")
    totals = [
        (f"{record}s", f"{counts['records']:,}"),
        ("bases", f"{counts['bases']:,}"),
        ("chunks", f"{counts['chunks']:,}"),
        ("frames (stop-free)", f"{counts['frames']:,}"),
        (f"frames per {record}", f"{counts['frames_per_record']:.2f}"),
        ("ambiguous (non-ACGT) bases", f"{counts['ambiguous_bases']:,} ({counts['ambiguous_fraction']:.3%})"),
        *((f"status {status}", f"{n:,}") for status, n in counts["status"].items()),
    ]
    axes[0, 0].axis("off")
    table = axes[0, 0].table(cellText=totals, loc="center", cellLoc="left", edges="horizontal")
    table.auto_set_font_size(False)
    table.set_fontsize(10)
    table.scale(1, 1.4)
    both = " (both mates)" if record == "fragment" else ""
    draw(lengths, axes[0, 1], color="#34495e")
    axes[0, 1].set(xscale="log" if length_log else "linear", xlabel=f"{record} length{both} (bp)", ylabel=f"{record}s")
    draw(frames, axes[1, 0], color="#16a085")
    axes[1, 0].set(xlabel=f"stop-free frames per {record}", ylabel=f"{record}s")
    draw(ambiguous, axes[1, 1], color="#7f8c8d")
    axes[1, 1].set(xlabel=f"ambiguous (non-ACGT) fraction of the {record}", ylabel=f"{record}s", xlim=(0, 1))
    save(figure, path)


def plot_throughput(shards: list[dict], path: str | Path, names: dict[str, str] | None = None) -> None:
    """Tokens/s and packing fill of each embedding shard, per model (by its name in `names`),
    labelled with precision and device."""
    table = pd.DataFrame(shards)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    n_shards = table["shard"].max() + 1
    n_models = table["model"].nunique()
    width = 0.8 / n_models
    for i, (model, own) in enumerate(table.groupby("model", sort=False)):
        name, color = (names or {}).get(model, model), MODEL_COLORS[i % len(MODEL_COLORS)]
        labels = [f"{p}\n{d}" for p, d in zip(own["precision"], own["device"])]
        for ax, column in ((axes[0], "tokens_per_s"), (axes[1], "fill")):
            bars = ax.bar(own["shard"] + (i - (n_models - 1) / 2) * width, own[column], width, label=name, color=color)
            ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    axes[0].set(ylabel="tokens/s", title="embedding throughput", ylim=(0, axes[0].get_ylim()[1] * 1.15))
    axes[1].set(ylabel="real tokens / batch slots", title="packing fill", ylim=(0, 1.15))
    for ax in axes:
        ax.set_xticks(range(n_shards), [f"shard {s}" for s in range(n_shards)])
    figure.legend(*axes[0].get_legend_handles_labels(), loc="outside upper center", ncols=n_models)
    save(figure, path)


def _table(table: pd.DataFrame) -> str:
    return table.to_html(index=False, na_rep="NA", float_format=lambda v: f"{v:.4g}", border=0)


def html_page(title: str, body: str, path: str | Path, note: str = "") -> None:
    """A self-contained HTML page (the report shows HTML inline); `body` is HTML, after `note` (text)."""
    body = f"<p>{html.escape(note)}</p>\n{body}" if note else body
    page = (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{TABLE_STYLE}</style></head>\n<body><h3>{html.escape(title)}</h3>\n{body}\n</body></html>\n"
    )
    with atomic_path(path) as tmp:
        Path(tmp).write_text(page, encoding="utf-8")


def overview(summaries: list[str | Path], path: str | Path, table: str | Path, recorded: str | Path) -> None:
    """One page across all samples, from their run summaries (what made the results, not the
    config at hand): a banner when the demo models made them, a row per sample (also written as the
    TSV `table`, data.samples_table), and per model and setting the values the samples were made
    with. `recorded`: the recorded settings of the results (JSON, data.recorded_settings), for later
    runs to compare."""
    runs = [read_json(p) for p in summaries]
    counts = data.samples_table(runs)
    write_tsv(counts, table)
    samples_of = {}  # {what: {its value: the samples made with it}}
    for run in runs:
        for key, value in data.made_by(run).items():
            samples_of.setdefault(key, {}).setdefault(str(value), []).append(run["sample"])
    made_with = pd.DataFrame(
        [
            {"made with": key, "value": value, "samples": "all" if len(names) == len(runs) else ", ".join(names)}
            for key, values in samples_of.items()
            for value, names in values.items()
        ]
    )
    demo = sorted(
        {
            made["checkpoint"]
            for run in runs
            for model, made in run["checkpoints"].items()
            if model != "classifier" and Path(made["checkpoint"]).name in DEMO_FILES
        }
    )
    weighed = [
        c
        for c in ("viral_fraction_estimate", "composition_fit", "unreliable_records", "records_passing_qvalue")
        if c in counts
    ]
    rows = counts[["sample", "records", "bases", *CALLS, "regions"]].assign(
        **{"viral fraction": counts["virus"] / counts["records"].clip(lower=1)}
    )
    rows = rows.join(counts[weighed])  # with a calibration: the sample's own estimate, and more
    banner = (
        '<p style="background:#c0392b;color:white;padding:8px;font-weight:bold">Demo models: calls carry no '
        f"meaning. These results were made by the tiny random demo models ({html.escape(', '.join(demo))}).</p>\n"
        if demo
        else ""
    )
    body = (
        f"{banner}<p>From the run summaries of {len(runs)} samples: what made these results.</p>\n"
        f"{_table(rows)}\n<h4>Models, settings and versions</h4>\n{_table(made_with)}"
    )
    html_page("Overview", body, path)
    keys = dict.fromkeys(key for run in runs for key in data.recorded_settings(run["config"]))
    values = {key: sorted({config_value(run["config"], key, optional=True) for run in runs}) for key in keys}
    write_json(values, recorded)


def sample_report(sample: str, tables: data.SampleTables, figures: SampleFigures, settings: PlotSampleSettings) -> None:
    """All figures of a sample, from one pass over each of its tables (the frames, sequences and
    regions tables; the chunks and prepare's frames for the plotted sequences only; prepare's
    sequences twice): the top sequences and the records of the strongest regions plotted chunk by
    chunk, the top rows in the HTML table."""
    frame_scores = data.Histogram(data.SCORE_BINS)
    for block in read_chunks(tables.frames, ["score_virus"]):
        frame_scores.add(block["score_virus"])
    strongest = data.strongest_regions(tables.regions, settings.top_regions)
    scores, calls, top, shown, picked = data.sequence_stats(
        read_chunks(tables.sequences), settings.top_sequences, settings.table_rows, set(strongest)
    )
    ids = set(top["sequence_id"]) | set(strongest)
    scored = data.rows_of(
        tables.chunks, ids, ["sequence_id", "chunk", "max_score_virus", "is_virus", "chunk_start", "chunk_end"]
    )
    regions = data.rows_of(tables.regions, ids, ["sequence_id", "start", "end"])
    plot_scores(frame_scores, scores, figures.scores)
    plot_calls(calls, figures.calls)
    plot_top_sequences(top, scored, regions, figures.top_sequences)
    records = picked.set_index("sequence_id").loc[strongest].reset_index()  # strongest first
    plot_top_sequences(records, scored, regions, figures.top_regions, "no viral region inside a record")
    total = sum(calls.values())
    html_page(
        f"{sample}: sequences with the highest virus scores",
        _table(shown[["sequence_id", "call", *(c for c in shown.columns if c not in ("sequence_id", "call"))]]),
        figures.table,
        f"{min(settings.table_rows, total):,} of {total:,} sequences, highest max_score_virus first; "
        f"the whole table is {Path(tables.sequences).name}.",
    )
    prepared = tables.prepared_sequences
    inputs = data.input_stats(lambda: read_chunks(prepared, data.PREPARED_COLUMNS))
    run = read_json(tables.summary)
    plot_input(inputs, run["counts"], figures.input, data.record_word(prepared))
    names = {s["model"]: data.display_name(run["config"], s["model"]) for s in run["embedding_shards"]}
    plot_throughput(run["embedding_shards"], figures.throughput, names)


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
    scalars = data.flatten(metrics)
    table = pd.DataFrame(
        {"metric": list(scalars), "value": [f"{v:.4g}" if isinstance(v, float) else str(v) for v in scalars.values()]}
    )
    html_page("classifier training", _table(table), table_path, f"from {Path(metrics_path).name}")


# bars of the samples' viral fractions, by composition_fit
FIT_COLORS = {"ok": "#c0392b", "poor": "#e67e22"}


def calibration_report(calibration_path: str | Path, samples: list[tuple[str, str, str]], path: str | Path) -> None:
    """Weighing the calls, in three panels: the calibration's reliability diagram on held-out chunks
    (the observed viral share against the score and against the calibrated probability; a dot's
    area follows its chunks); each sample's estimated viral fraction with its interval and fit; and
    per sample the records called viral at each q-value cutoff against VirNucPro's calls (a cross).
    `samples`: (name, sequences table, manifest)."""
    fitted = read_json(calibration_path)
    curves, errors = fitted["fitted_on"]["reliability"], fitted["fitted_on"]["held_out_calibration_error"]
    figure, axes = plt.subplots(1, 3, figsize=(16, 4.8), layout="constrained")
    ax = axes[0]
    ax.plot([0, 1], [0, 1], color="black", linestyle="--", linewidth=1, label="perfect")
    for name, color in (("scores", "#95a5a6"), (fitted["method"], "#c0392b")):
        rows = np.array(curves[name]["rows"])
        kept = rows > 0
        x, y = np.array(curves[name]["mean_probability"])[kept], np.array(curves[name]["observed_share"])[kept]
        label = "virus score" if name == "scores" else f"calibrated ({name})"
        ax.plot(x, y, color=color, label=f"{label}: error {errors[name]:.3f}")
        ax.scatter(x, y, s=20 + 200 * rows[kept] / rows.max(), color=color, alpha=0.7)
    held_out = f"{fitted['fitted_on']['chunks']:,} held-out chunks of {fitted['fitted_on']['records']:,} records"
    ax.set(xlabel="predicted probability of virus", ylabel="observed viral share", xlim=(0, 1), ylim=(0, 1))
    ax.set_title(held_out)
    ax.legend(loc="upper left", fontsize=9)
    shown = samples[:WEIGHED_SAMPLES_SHOWN]
    weighed = [data.weighed_calls(sequences, manifest) for _, sequences, manifest in shown]
    names = [_text(name) for name, _, _ in shown]
    fractions = np.array([w["viral_fraction_estimate"] for w in weighed])
    # the interval as error bars; none where the calibration's fraction stood in
    ends = np.array([w["interval"] or [f, f] for w, f in zip(weighed, fractions)])
    bars = np.abs(ends - fractions[:, None]).T
    colors = [FIT_COLORS[w["fit"]] if w["from_sample"] else "#95a5a6" for w in weighed]
    axes[1].barh(names[::-1], fractions[::-1], color=colors[::-1], xerr=bars[:, ::-1], capsize=3)
    axes[1].set(xlabel="estimated viral fraction of records, 95% interval", xlim=(0, 1))
    axes[1].set_title("per sample; orange: the calibration fits poorly\n(q-values at the interval's lower end)")
    for name, w in zip(names, weighed):
        line = axes[2].plot(data.QVALUE_CUTOFFS, w["passing"], marker="o", markersize=3, label=name)
        axes[2].scatter([0.5], [w["virnucpro"]], marker="x", color=line[0].get_color())
    axes[2].set(xscale="log", xlabel="q-value cutoff", ylabel="records called viral")
    more = f" (first {len(shown)} of {len(samples)})" if len(samples) > len(shown) else ""
    axes[2].set_title(f"calls within a q-value; x: VirNucPro's{more}")
    if len(shown) <= 12:
        axes[2].legend(fontsize=8)
    save(figure, path)
