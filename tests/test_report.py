"""The run summary checked against the tables and model files, the plotting functions on small
tables, and `snakemake --report` opened in real headless Chromium, driven over the DevTools protocol."""

import fcntl
import hashlib
import json
import os
import platform
import re
import select
import shutil
import struct
import subprocess
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import snakemake
import yaml
from helpers import ENV, ROOT, SAMPLES, SNAKEMAKE, read_tsv

from workflow_lib.embed.figures import copies_not_embedded
from workflow_lib.io.seqio import read_records
from workflow_lib.prepare.plan import read_plans
from workflow_lib.report import data as report_data
from workflow_lib.report import figures as report


def merged(base: dict, override: dict) -> dict:
    """Config files merged as Snakemake merges them: nested keys one by one."""
    out = dict(base)
    for key, value in override.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


@pytest.mark.slow
def test_run_summary_agrees_with_tables_and_model_files(workflow_run):
    workdir, config = workflow_run
    run_config = merged(
        yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), yaml.safe_load(config.read_text())
    )
    # settings that cannot change results are not recorded
    del run_config["progress_seconds"], run_config["pending_check_seconds"]
    tuning = ("num_workers", "prefetch_factor", "commit_seconds", "embed_copies", "expandable_segments")
    for key in (*tuning, "compile_cache_dir"):
        del run_config["embedding"][key]
    for model in ("esm", "dnabert"):
        del run_config["models"][model]["token_budget"], run_config["models"][model]["assumed_tokens_per_s"]
    for sample in SAMPLES:
        results = workdir / "results" / sample
        summary = json.loads((results / "run_summary.json").read_text())
        manifest = json.loads((results / "manifest.json").read_text())
        assert summary["sample"] == sample and summary["config"] == run_config
        assert summary["input"] == manifest["input"] and summary["checkpoints"] == manifest["checkpoints"]
        assert_versions_and_checkpoints(summary, workdir)
        assert_counts(summary, results, next((workdir / "inputs").glob(f"{sample}.*")))
        assert_timings(summary, read_plans(workdir / "results" / "plan")[0][sample])


def assert_versions_and_checkpoints(summary: dict, workdir: Path) -> None:
    """The packages that ran, and the SHA-256 of every model file, as they are."""
    versions = summary["versions"]
    assert versions["summarize"]["python"] == platform.python_version()
    assert versions["summarize"]["snakemake"] == snakemake.__version__
    for package in ("torch", "numpy", "pandas", "h5py", "matplotlib"):
        assert versions["summarize"][package] == metadata.version(package)
    assert versions["embed"]["esm"]["torch"] == versions["embed"]["dnabert"]["torch"] == metadata.version("torch")

    checkpoints = summary["checkpoints"]
    classifier = checkpoints["classifier"]
    assert classifier["sha256"] == hashlib.sha256((workdir / classifier["path"]).read_bytes()).hexdigest()
    for model in ("esm", "dnabert"):
        local = workdir / checkpoints[model]["checkpoint"]
        directory = local if local.is_dir() else local.parent
        assert checkpoints[model]["sha256"], model
        for name, digest in checkpoints[model]["sha256"].items():
            assert hashlib.sha256((directory / name).read_bytes()).hexdigest() == digest


def assert_counts(summary: dict, results: Path, reads: Path) -> None:
    """The counts are those of the input and of the sample's tables."""
    prepared, calls = read_tsv(results / "prepare" / "sequences.tsv.gz"), read_tsv(results / "sequences.tsv")
    sequences = [seq for _, _, seq in read_records(reads)]
    counts = summary["counts"]
    assert counts["records"] == len(calls) == len(sequences)
    assert counts["bases"] == sum(len(s) for s in sequences)
    assert counts["ambiguous_bases"] == sum(len(s) - sum(s.count(b) for b in b"ACGT") for s in sequences)
    assert counts["chunks"] == sum(int(r["n_chunks"]) for r in prepared)
    assert counts["chunks_scored"] == len(read_tsv(results / "chunks.tsv"))
    assert counts["frames"] == len(read_tsv(results / "frames.tsv"))
    assert counts["frames_per_record"] == pytest.approx(counts["frames"] / counts["records"], abs=1e-4)
    assert counts["status"] == Counter(r["status"] for r in prepared)
    assert counts["calls"] == Counter(r["call"] for r in calls)


def assert_timings(summary: dict, planned: list[dict]) -> None:
    """A time per stage and per planned shard, and each embed job's figures."""
    counts, timings = summary["counts"], summary["timings"]
    assert timings["prepare"]["seconds"] > 0 and timings["predict"]["seconds"] > 0
    for model in ("esm", "dnabert"):
        shards = timings["embed"][model]["shards"]  # the pooled shards that hold its shards, once each
        assert len(shards) == len({s["pool"] for s in planned}) and all(s["seconds"] > 0 for s in shards)
        assert timings["embed"][model]["seconds"] == pytest.approx(sum(s["seconds"] for s in shards))
        embedded = [s for s in summary["embedding_shards"] if s["model"] == model]
        assert sum(s["frames"] for s in embedded) >= counts["frames"]  # with the frames pooled with its
        for shard in embedded:
            assert shard["device"] == "cpu" and shard["precision"] == "fp32" and 0 < shard["fill"] <= 1
            assert shard["tokens_per_s"] > 0 and shard["tokens"] > 0 and shard["seconds"] > 0


def png_chunks(path: Path) -> list[tuple[bytes, bytes]]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    chunks, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        chunks.append((data[at + 4 : at + 8], data[at + 8 : at + 8 + length]))
        at += 12 + length
    return chunks


def png_size(path: Path) -> tuple[int, int]:
    return struct.unpack(">II", png_chunks(path)[0][1][:8])


def small_tables() -> tuple:
    """A sample of three sequences: its sequences table, their scored chunks and regions, frame scores, prepare's
    sequences table, the run summary's counts and embedding shards."""
    sequences = pd.DataFrame(
        {
            "sequence_id": ["contig$1", "read2", "read3"],
            "length": [1200, 300, 280],
            "n_chunks": [4, 1, 1],
            "n_chunks_scored": [3, 1, 0],
            "max_score_virus": [0.9, 0.2, float("nan")],
            "call": ["virus", "other", "no_coding_frame"],
            "n_regions": [1, 0, 0],
        }
    )
    regions = pd.DataFrame({"sequence_id": ["contig$1"], "start": [1], "end": [600]})
    chunks = pd.DataFrame(
        {
            "sequence_id": ["contig$1"] * 3 + ["read2"],
            "chunk": [1, 2, 4, 1],
            "max_score_virus": [0.9, 0.4, 0.7, 0.2],
            "is_virus": [True, False, True, False],
            "chunk_start": [0, 300, 900, 0],
            "chunk_end": [300, 600, 1200, 300],
        }
    )
    frames = pd.DataFrame({"score_virus": [0.9, 0.1, 0.4, 0.7, 0.2]})
    prepared = sequences.assign(n_frames=[5, 2, 0], ambiguous_fraction=[0.01, 0.0, 0.0])
    counts = {"records": 3, "bases": 1780, "chunks": 6, "frames": 7, "frames_per_record": 7 / 3}
    counts |= {"ambiguous_bases": 12, "ambiguous_fraction": 12 / 1780, "status": {"ok": 3}}
    shards = [
        {"model": m, "shard": s, "tokens_per_s": 1000.0 * (s + 1), "fill": 0.8, "precision": "fp16", "device": "cuda:0"}
        for m in ("esm", "dnabert")
        for s in (0, 1)
    ]
    return sequences, chunks, regions, frames, prepared, counts, shards


def test_the_share_embedded_counts_figures_of_before_it_as_every_frame_embedded():
    """A run summary made again in a directory of earlier results: an embed job's figures without
    distinct counts (written before them) had every frame embedded and saved nothing."""
    now = {"model": "esm", "frames": 10, "tokens": 100, "distinct_frames": 4, "distinct_tokens": 40, "tokens_per_s": 20}
    before = {"model": "esm", "frames": 5, "tokens": 50, "tokens_per_s": 10}
    assert copies_not_embedded([now, before]) == {
        "esm": {
            "frames": 15,
            "tokens": 150,
            "distinct_frames": 9,
            "distinct_tokens": 90,
            "seconds_saved": 3.0,  # 60 tokens not embedded at 20 tokens/s
            "frames_embedded_share": 0.6,
            "tokens_embedded_share": 0.6,
        }
    }


def test_plots_of_small_tables_are_fixed_size_and_reproducible(tmp_path):
    sequences, chunks, regions, frames, prepared, counts, shards = small_tables()
    metrics = {"validation": {"roc_auc": 0.75, "confusion": {"tp": 1}}, "epochs_run": 3, "history": {"loss": [1.0]}}
    metrics["roc_curve"] = {"false_positive_rate": [0, 0, 0.5, 1], "true_positive_rate": [0, 0.5, 1, 1]}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))

    # the tables in two blocks, as tables.read_chunks gives them
    scores, calls, top, shown, _ = report_data.sequence_stats([sequences[:2], sequences[2:]], 12, 2)
    frame_scores = report_data.Histogram(report_data.SCORE_BINS).add(frames["score_virus"])

    def draw(out: Path) -> None:
        out.mkdir()
        report.plot_scores(frame_scores, scores, out / "s.png")
        report.plot_calls(calls, out / "calls.png")
        report.plot_top_sequences(top, chunks, regions, out / "top.png")
        inputs = report_data.input_stats(lambda: [prepared[:1], prepared[1:]])
        report.plot_input(inputs, counts, out / "input.png")
        report.plot_throughput(shards, out / "throughput.png")
        report.training_report(tmp_path / "metrics.json", out / "roc.png", out / "metrics.html")

    draw(tmp_path / "a")
    draw(tmp_path / "b")
    sizes = {"s": (1000, 400), "calls": (700, 300), "top": (800, 280), "input": (1000, 650)}
    sizes |= {"throughput": (1100, 400), "roc": (500, 500)}
    for name, size in sizes.items():
        png = tmp_path / "a" / f"{name}.png"
        assert png_size(png) == size, name
        assert png.read_bytes() == (tmp_path / "b" / png.name).read_bytes(), f"{name}.png differs between runs"
        kinds = {kind for kind, _ in png_chunks(png)}
        assert b"tIME" not in kinds and not any(
            b"Software" in data for kind, data in png_chunks(png) if kind == b"tEXt"
        )
    table = (tmp_path / "a" / "metrics.html").read_text()
    assert "<td>validation confusion tp</td>" in table and "history" not in table
    assert list(report_data.top_sequences(sequences, 3)["sequence_id"]) == ["contig$1", "read2", "read3"]
    assert list(top["sequence_id"]) == ["contig$1", "read2"] and list(shown["sequence_id"]) == ["contig$1", "read2"]
    assert sum(calls.values()) == 3 and scores.n == 2


def test_streamed_figures_are_those_of_the_whole_tables():
    """Histograms added block by block count what numpy counts over all the values; the top rows
    kept block by block are those of sorting the whole table, ties in table order."""
    rng = np.random.default_rng(1)
    values = rng.random(1000)
    streamed = report_data.Histogram(report_data.SCORE_BINS)
    for start in range(0, 1000, 128):
        streamed.add(values[start : start + 128])
    assert streamed.counts.tolist() == np.histogram(values, report_data.SCORE_BINS)[0].tolist() and streamed.n == 1000
    table = pd.DataFrame({"sequence_id": [f"s{i}" for i in range(1000)], "max_score_virus": values.round(1)})
    table.loc[::7, "max_score_virus"] = float("nan")
    top = report_data.TopRows(50)
    for start in range(0, 1000, 128):
        top.add(table[start : start + 128])
    assert top.rows.equals(report_data.top_sequences(table, 50))
    lengths = pd.DataFrame({"length": [5, 300, 90_000], "n_frames": [0, 70, 3], "ambiguous_fraction": [0, 0.5, 1]})
    histogram, length_log, frames, _ = report_data.input_stats(lambda: [lengths[:1], lengths[1:]])
    assert length_log and histogram.counts.sum() == 3 and len(frames.edges) == 61


class Chromium:
    """Headless Chromium on --remote-debugging-pipe: it reads DevTools commands from its fd 3 and
    writes replies and events to its fd 4, each a JSON message ended by a NUL byte."""

    def __init__(self, profile: Path):
        to_child, self._commands = os.pipe()
        self._replies, from_child = os.pipe()
        # copies at fds >= 10, so that placing them at 3 and 4 in the child overwrites neither
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child, from_child)]
        self.process = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe"]
            + [f"--user-data-dir={profile}", "--no-first-run", "about:blank"],
            preexec_fn=lambda: (os.dup2(high[0], 3), os.dup2(high[1], 4)),
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for fd in (to_child, from_child, *high):
            os.close(fd)
        self._buffer, self._id, self.events = b"", 0, []

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            ready = select.select([self._replies], [], [], max(deadline - time.monotonic(), 0))[0]
            chunk = os.read(self._replies, 1 << 20) if ready else None
            assert chunk, "Chromium did not answer in time" if ready == [] else "Chromium closed its pipe"
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: str | None = None, timeout: float = 30, **params) -> dict:
        self._id += 1
        command = {"id": self._id, "method": method, "params": params} | ({"sessionId": session} if session else {})
        os.write(self._commands, json.dumps(command).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while (reply := self._receive(deadline)).get("id") != self._id:
            self.events.append(reply)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return reply["result"]

    def wait_for(self, event: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == event for e in self.events):
            self.events.append(self._receive(deadline))
        return next(e for e in self.events if e.get("method") == event)

    def evaluate(self, session: str, expression: str, **params):
        result = self.send(
            "Runtime.evaluate", session, expression=expression, awaitPromise=True, returnByValue=True, **params
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
            self.process.wait(timeout=10)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            os.close(self._commands)
            os.close(self._replies)


FIGURES = [
    "virus score distributions",
    "calls",
    "top sequences along their length",
    "strongest viral regions along their records",
    "input statistics",
    "throughput per shard",
    "validation ROC curve",
]
TABLES = ["top sequences table", "training metrics"]
# Drive the report as a user does: from the menu, click the category, then the sample (the
# subcategory), then the view button in the row of the item; wait until the app shows it (an <img>
# decoded, or an <iframe>).
SHOW = """(async ([category, subcategory, item]) => {
    const until = async (what, find) => {
        for (let i = 0; i < 400; i++) {
            const found = find();
            if (found) return found;
            await new Promise((resolve) => setTimeout(resolve, 25));
        }
        throw new Error(`${category}/${subcategory}/${item}: no ${what}`);
    };
    const path = categories[category][subcategory].find((p) => results[p].labels.item === item);
    const link = (label) => [...document.querySelectorAll("nav li a")].find((a) => a.textContent === label);
    app.setView({navbarMode: "menu"});
    await until("menu", () => link("Statistics"));  // the menu shows, not the breadcrumbs of the last view
    (await until("menu entry", () => link(category))).click();
    if (Object.keys(categories[category]).length > 1) (await until("sample entry", () => link(subcategory))).click();
    const row = await until("row", () => [...document.querySelectorAll("tr")].find(
        (r) => r.cells.length && r.cells[0].textContent === item));
    row.querySelector("a").click();
    const uri = results[path].data_uri;
    if (results[path].mime_type === "text/html") {
        await until("iframe", () => document.querySelector(`iframe[src="${uri}"]`));
        return {path: path, kind: "html"};
    }
    const img = await until("decoded image", () => {
        const found = document.querySelector(`img[src="${uri}"]`);
        return found && found.complete && found.naturalWidth > 0 && found;
    });
    return {path: path, kind: "img", size: [img.naturalWidth, img.naturalHeight]};
})(%s)"""


def shown_page(browser, session) -> tuple[list[str], str]:
    """The HTML item the report shows in its iframe: the first cell of each table row, and its text."""
    deadline = time.monotonic() + 30
    while True:  # the app's <iframe> is in the page before its frame is attached: wait for the frame
        tree = browser.send("Page.getFrameTree", session)["frameTree"]
        frames = [f["frame"] for f in tree.get("childFrames", []) if f["frame"]["url"].startswith("data:")]
        if len(frames) == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    (frame,) = frames
    world = browser.send("Page.createIsolatedWorld", session, frameId=frame["id"])
    return browser.evaluate(
        session,
        "(async () => { for (let i = 0; i < 400 && !document.querySelector('tbody tr'); i++)"
        " await new Promise((resolve) => setTimeout(resolve, 25));"
        " return [[...document.querySelectorAll('tbody tr')].map((r) => r.cells[0].textContent),"
        " document.body.innerText]; })()",
        contextId=world["executionContextId"],
    )


def open_report(browser: Chromium, html: Path) -> str:
    """Load the report in a new page, its network recorded; its session once the report's app is up."""
    target = browser.send("Target.createTarget", url="about:blank")["targetId"]
    session = browser.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    browser.send("Network.enable", session)
    browser.send("Page.enable", session)
    browser.send("Page.navigate", session, url=html.as_uri())
    browser.wait_for("Page.loadEventFired")
    browser.evaluate(
        session,
        "(async () => { for (let i = 0; i < 400 && typeof app.setView !== 'function'; i++)"
        " await new Promise((resolve) => setTimeout(resolve, 25)); })()",
    )
    return session


def make_report(workdir: Path, config: Path, html: Path) -> None:
    """`snakemake --report` of the finished run in `workdir`, with `config`, written to `html`."""
    result = subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(config), "--report", str(html)],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def report_html(workflow_run, tmp_path_factory) -> Path:
    """The report of the test run with its own config (made once for the tests that read it)."""
    html = tmp_path_factory.mktemp("report") / "report.html"
    make_report(*workflow_run, html)
    return html


@pytest.mark.slow
def test_report_is_self_contained_and_shows_the_plots_in_chromium(workflow_run, report_html, tmp_path):
    assert shutil.which("chromium"), "Chromium is needed: apt-get install chromium (bash run.sh test does)"
    workdir, _ = workflow_run
    text = report_html.read_text()
    external = re.findall(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=[\"'](?:https?:)?//", text)
    assert not external, external

    sample = "reads"
    calls = read_tsv(workdir / "results" / sample / "sequences.tsv")
    scored = [c for c in calls if c["max_score_virus"] != "NA"]
    best = max(scored, key=lambda c: float(c["max_score_virus"]))["sequence_id"]
    browser = Chromium(tmp_path / "profile")
    try:
        session = open_report(browser, report_html)
        # every image and HTML item of the sample, and of the training
        items = browser.evaluate(
            session,
            "Object.entries(categories).flatMap(([category, subcategories]) => Object.entries(subcategories)"
            f".filter(([subcategory]) => subcategory === {json.dumps(sample)} || category === 'Training')"
            ".flatMap(([subcategory, paths]) => paths"
            ".filter((p) => ['image/png', 'text/html'].includes(results[p].mime_type))"
            ".map((p) => [category, subcategory, results[p].labels.item])))",
        )
        assert sorted(item for _, _, item in items) == sorted(FIGURES + TABLES), items
        for item in items:
            shown = browser.evaluate(session, SHOW % json.dumps(item))
            if shown["kind"] == "img":
                assert shown["size"] == list(png_size(workdir / shown["path"])), shown
                continue
            rows, _ = shown_page(browser, session)
            if item[2] == "top sequences table":
                assert len(rows) == min(len(calls), 500) and rows[0] == best, rows[:3]
            else:
                assert "validation roc_auc" in rows, rows
        # the overview, from the run summaries: the demo banner, every sample, the demo models' names
        overview = browser.evaluate(session, "Object.keys(categories['Overview'])[0]")
        browser.evaluate(session, SHOW % json.dumps(["Overview", overview, "samples, models and settings"]))
        rows, text = shown_page(browser, session)
        assert "Demo models: calls carry no meaning" in text
        assert set(SAMPLES) <= set(rows) and "esm2_t2_demo.pt" in text and "dnabert_s_demo" in text
        requested = [
            e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"
        ]
        assert requested and all(url.startswith(("file:", "data:")) for url in requested), requested
    finally:
        browser.close()


@pytest.mark.slow
def test_report_leaves_out_tables_over_the_size_limit(workflow_run, report_html, tmp_path):
    """report.max_attached_mb bounds the tables of all samples together: below their total, though
    above each one, it keeps chunks.tsv and sequences.tsv out of the report; the figures, the top
    sequences and the run summaries stay (against the report made with the run's own config)."""
    workdir, config = workflow_run
    sizes = [(workdir / "results" / s / t).stat().st_size for s in SAMPLES for t in ("chunks.tsv", "sequences.tsv")]
    limit = (max(sizes) + sum(sizes)) / 2 / 2**20
    limited = tmp_path / "limited.yaml"
    settings = merged(yaml.safe_load(config.read_text()), {"report": {"max_attached_mb": limit}})
    limited.write_text(yaml.safe_dump(settings))
    reports = {"default": report_html, "limited": tmp_path / "limited.html"}
    make_report(workdir, limited, reports["limited"])
    default, limited_text = (reports[name].read_text() for name in ("default", "limited"))
    for label in ("chunks table (download)", "sequences table (download)"):
        assert default.count(label) == len(SAMPLES) and label not in limited_text, label
    for label in ("top sequences table", "run summary (download)", "virus score distributions"):
        assert limited_text.count(label) == default.count(label) > 0, label
    assert reports["limited"].stat().st_size < reports["default"].stat().st_size
