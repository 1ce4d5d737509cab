"""The GPU check: the embed job's CUDA paths timed and proven on a GPU, each part writing one JSON
of figures after every step. docs/gpu-check.md gives a GPU session's one command (`--part all`)
and what each part measures:
  model        ESM-2 (3B shape, as the embed job runs it) and DNABERT-S alone over --sweep's token
               budgets; with --levers, the runs of LEVER_PLANS against the same model's FP32 forward.
  workflow     Snakemake over 500 bp reads with 3B- and DNABERT-S-shaped random models, run after
               run on one model cache, the embed jobs sharing the GPU and with a whole GPU each.
  equivalence  the packed half-precision forwards against FP32 references, one sequence at a time.
--deadline-seconds, counted from the process's start, ends the command within 15 s of it: each part
may take its share of the time left (ALL), and a SIGALRM at the part's deadline stops the step it
finds. `--device cpu --tiny` runs the same code on tiny shapes (tests/test_gpu_check.py).
"""

import argparse
import contextlib
import copy
import gc
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

import esm as fair_esm
import numpy as np
import pandas as pd
import psutil
import torch
import yaml

from harness.measure import header, print_figures, snakemake
from harness.stages import GENOMES, ROOT, prepared_reads, write_reads
from workflow_lib.embed.device_feed import DeviceFeed
from workflow_lib.embed.job import PRECISIONS, set_allocator_conf
from workflow_lib.embed.packing import greedy_batches, pack
from workflow_lib.io.tables import read_json
from workflow_lib.models import classifier, demo_models, dnabert, dnabert_loading, esm, varlen
from workflow_lib.models.tokens import ESMTokens

TINY_ESM = {
    "t2": {"encoder_layers": 2, "encoder_embed_dim": 64, "encoder_attention_heads": 4, "token_dropout": True},
    "t3": {"encoder_layers": 3, "encoder_embed_dim": 96, "encoder_attention_heads": 6, "token_dropout": True},
}
# dense FP16/BF16 tensor cores, by device name (the first that the name holds)
PEAK_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0, "H200": 989.0, "A100": 312.0}
TOKENIZER_GENOMES = sorted(GENOMES.glob("*.fasta"))
log = logging.getLogger("workflow")


# ---------------------------------------------------------------- deadline and record


class Deadline(BaseException):
    """The time given ran out. A BaseException, as KeyboardInterrupt: no `except Exception` on the
    way (a kernel's fallback, a compile's) takes it for a failure of its own and carries on."""


def _raise_deadline(signum, frame):
    raise Deadline("the deadline")


def arm(deadline: float) -> None:
    """SIGALRM at `deadline` (time.time()'s clock) raises Deadline wherever the main thread is."""
    signal.signal(signal.SIGALRM, _raise_deadline)
    signal.setitimer(signal.ITIMER_REAL, max(deadline - time.time(), 0.001))


def disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


class Record:
    """The part's figures, written to `path` (a temporary file renamed) after every step, and
    `parent` (all.json's record) with them. A step that fails is named (`failed_step`, `error`);
    one that the deadline cut, or that starts after it, in `cut_by_deadline`."""

    def __init__(self, path: Path | None, figures: dict, deadline: float = math.inf, parent: "Record | None" = None):
        self.path, self.figures, self.deadline, self.parent = path, figures, deadline, parent
        self.save()

    def save(self) -> None:
        if self.path:
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(json.dumps(self.figures, indent=2) + "\n")
            tmp.replace(self.path)
        if self.parent:
            self.parent.save()

    @contextlib.contextmanager
    def step(self, name: str):
        if time.time() >= self.deadline:
            self.figures["cut_by_deadline"] = name
            self.save()
            raise Deadline(name)
        log.info("step: %s", name)
        start = time.perf_counter()
        try:
            yield
        except Deadline:
            self.figures["cut_by_deadline"] = name
            self.save()
            raise
        except BaseException as error:
            text = " / ".join(line.strip() for line in str(error).strip().splitlines() if line.strip())
            self.figures["failed_step"], self.figures["error"] = name, f"{type(error).__name__}: {text[:1000]}"
            self.save()
            raise
        self.figures.setdefault("step_seconds", {})[name] = round(time.perf_counter() - start, 1)
        self.save()


# ---------------------------------------------------------------- common


def device_figures(device: torch.device) -> dict:
    """The device and torch that a figure was measured with."""
    found = {"device": str(device), "torch": torch.__version__}
    if device.type == "cuda":
        found["gpu"], found["cuda"] = torch.cuda.get_device_name(device), torch.version.cuda
    return found


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    """Release what the last step left on a GPU (cycles too), restart its peak count. A CPU needs no such pass."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def first_sequences(path: Path, n: int) -> list[bytes]:
    """The sequences of the first n records of a shard FASTA (all of them where it holds fewer)."""
    return path.read_bytes().split(b"\n")[1::2][:n]


def feed_embeddings(embedder, encoded: list[np.ndarray], budget: int, device: torch.device) -> np.ndarray:
    """Embeddings of token arrays through the embed job's DeviceFeed (copy stream, pinned results)."""
    out = np.zeros((len(encoded), embedder.dim), dtype=np.float32)
    feed = DeviceFeed(embedder, device)
    lengths = np.array([len(e) for e in encoded])
    for rows in greedy_batches(lengths, budget):
        feed.submit(pack(rows, [encoded[i] for i in rows.tolist()], budget).tensors(pin=feed.cuda))
        for done, _, pooled in feed.ready():
            out[done] = pooled
    for done, _, pooled in feed.drain():
        out[done] = pooled
    return out


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def agreement(got: np.ndarray, expected: np.ndarray) -> dict:
    cosine = cosines(got, expected)
    return {
        "min_cosine": round(float(cosine.min()), 7),
        "mean_cosine": round(float(cosine.mean()), 7),
        "max_abs_diff": float(np.abs(got - expected).max()),
    }


def esm_random(config: dict, device) -> fair_esm.ESM2:
    """A random ESM-2 of `config`'s shape in FP32, made on the device with fair-esm's own
    initialisation (LayerNorms at 1, as trained models have them), the same for every call."""
    torch.manual_seed(0)
    with torch.device(device):
        model = fair_esm.ESM2(config["encoder_layers"], config["encoder_embed_dim"], config["encoder_attention_heads"])
    return model.eval()


# ---------------------------------------------------------------- model


class LeverPlan(NamedTuple):
    levers: frozenset | None  # None: those kept (paying alone, exact enough)
    fp8: bool = False
    fast_accum: bool = False


# The lever runs, most decisive first: the default forward and the plain one (together, what the
# default levers are worth), FP8 without and with fast accumulation, the default levers alone, the
# levers off by default, those kept, and the plain forward again (the card's drift over the runs).
LEVER_PLANS = {
    "default": LeverPlan(esm.DEFAULT_LEVERS),
    "none": LeverPlan(frozenset()),
    "fp8": LeverPlan(esm.DEFAULT_LEVERS, fp8=True),
    "fp8, fast accumulation": LeverPlan(esm.DEFAULT_LEVERS, fp8=True, fast_accum=True),
    **{name: LeverPlan(frozenset({name})) for name in sorted(esm.DEFAULT_LEVERS)},
    **{name: LeverPlan(frozenset({name})) for name in sorted(esm.LEVERS - esm.DEFAULT_LEVERS)},
    "kept": LeverPlan(None),
    "none, again": LeverPlan(frozenset()),
}
LEVER_MIN_COSINE = 0.99999  # against FP32, at every shape: what a lever kept on must reach
LEVER_MIN_GAIN = 1.005  # over none: more than the spread of repeated runs


def esm_embedder(config: dict, device, dtype, plan: LeverPlan, compiled=False) -> esm.ESMEmbedder:
    torch._dynamo.reset()  # each run compiles its own graphs, within Dynamo's limit of recompiles
    model = esm_random(config, device)
    layers = config["encoder_layers"]
    return esm.ESMEmbedder(
        model, model.alphabet, layers, device, dtype, compiled=compiled, levers=plan.levers, fp8=plan.fp8,
        fast_accum=plan.fast_accum,
    )  # fmt: skip


def dnabert_embedder(config: dict, directory: Path, device, dtype) -> dnabert.DNABERTEmbedder:
    torch.manual_seed(0)
    with torch.device(device):
        model = dnabert.DNABERT(config)
    return dnabert.DNABERTEmbedder(model.eval(), dnabert.DNABERTTokens(directory / "tokenizer.json"), device, dtype)


def flop_per_token(model: str, config: dict) -> int:
    """The GEMMs' FLOPs a token (attention adds about 1% at these lengths)."""
    if model == "esm":
        return 24 * config["encoder_embed_dim"] ** 2 * config["encoder_layers"]  # q, k, v, out, fc1, fc2 (4d)
    d, inner = config["hidden_size"], config["intermediate_size"]
    return 2 * (4 * d * d + 3 * d * inner) * config["num_hidden_layers"]  # Wqkv, out, gated MLP


def mfu(tokens_per_s: float, model: str, config: dict, device) -> float | None:
    """Model FLOPs utilisation against the device's dense FP16 peak; None where not known (a CPU)."""
    gpu = device_figures(device).get("gpu", "")
    peak = next((tflops for name, tflops in PEAK_TFLOPS.items() if name in gpu), None)
    return round(tokens_per_s * flop_per_token(model, config) / (peak * 1e12), 3) if peak else None


def timed(embedder, batches: list, device) -> dict:
    """Tokens/s of `embedder` over batches already on the device, a warm-up pass on the first (the
    kernel check, a compile) timed apart, and the peak memory."""
    start = time.perf_counter()
    embedder(batches[0].tokens, batches[0].layout())
    sync(device)
    warm_up = time.perf_counter() - start
    free(device)
    start = time.perf_counter()
    for batch in batches:
        embedder(batch.tokens, batch.layout())
    sync(device)
    return {
        "tokens_per_s": round(sum(b.n_tokens for b in batches) / (time.perf_counter() - start)),
        "warm_up_s": round(warm_up, 1),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2) if device.type == "cuda" else None,
    }


def device_batches(encoded: list, budget: int, device) -> list:
    """Greedy packed batches of token arrays, their tensors on the device."""
    lengths = np.array([len(e) for e in encoded])
    batches = [
        pack(rows, [encoded[i] for i in rows.tolist()], budget).tensors() for rows in greedy_batches(lengths, budget)
    ]
    return [b._replace(tokens=b.tokens.to(device), cu_seqlens=b.cu_seqlens.to(device)) for b in batches]


def model_alone(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    """ESM-2 (the embed job's forward) and DNABERT-S alone over --sweep, then ESM-2's levers."""
    with record.step("frames"):
        shards = prepared_reads(workdir, args.reads)
        frames = {
            model: first_sequences(shards[suffix], args.frames)
            for model, suffix in (("esm", "faa"), ("dnabert", "fna"))
        }
        tokenizer_dir = demo_models.build_dnabert(workdir / "dnabert_s", TOKENIZER_GENOMES, 0, shapes["dnabert"])
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    for model, config in (("esm", shapes["speed_esm"]), ("dnabert", shapes["dnabert"])):
        with record.step(f"{model}: model"):
            free(device)
            if model == "esm":
                embedder = esm_embedder(config, device, dtype, LEVER_PLANS["default"], args.compiled)
            else:
                embedder = dnabert_embedder(config, tokenizer_dir, device, dtype)
            encoded = embedder.tokens(frames[model])
            result[model] = {"frames": len(encoded), "compiled": getattr(embedder, "compiled", False), "budgets": {}}
        for budget in args.sweep:
            with record.step(f"{model}: budget {budget}"):
                batches = device_batches(encoded, budget, device)
                figures = timed(embedder, batches, device)
                figures |= {"batches": len(batches), "mfu": mfu(figures["tokens_per_s"], model, config, device)}
                figures["attention"] = varlen.kernel_name(device, dtype, embedder.alibi)
                result[model]["budgets"][str(budget)] = figures
                del batches
        del embedder
        free(device)
    if args.levers:
        esm_levers(args, shapes, frames["esm"], device, dtype, result.setdefault("levers", {}), record)


def calls(embeddings: np.ndarray) -> np.ndarray:
    """The class a fixed random linear head gives each embedding: a stand-in for a classifier's call,
    to count the calls a lever changes (random weights: not a biological figure)."""
    head = np.random.default_rng(0).standard_normal((embeddings.shape[1], 2))
    return (embeddings @ head).argmax(axis=1)


def esm_levers(args, shapes: dict, frames: list[bytes], device, dtype, result: dict, record) -> None:
    """The runs of LEVER_PLANS (or --lever-runs), each timed on the speed shape at --budget and its
    embeddings of --lever-frames frames compared with the same model's FP32 forward at each shape."""
    encoded = ESMTokens.of(fair_esm.Alphabet.from_architecture("ESM-1b"))(frames)
    subset = encoded[: args.lever_frames]
    references = {}
    for shape, config in shapes["esm"].items():
        with record.step(f"levers: {shape} FP32 reference"):
            free(device)
            reference = esm_embedder(config, device, torch.float32, LEVER_PLANS["none"])
            references[shape] = feed_embeddings(reference, subset, args.budget, device)
            del reference
            free(device)
    with record.step("levers: batches"):
        batches = device_batches(encoded, args.budget, device)
    result |= {"frames": len(encoded), "cosine_frames": len(subset), "budget": args.budget, "compiled": args.compiled}
    result["runs"] = runs = {}
    for run in args.lever_runs or LEVER_PLANS:
        plan = LEVER_PLANS[run]
        if plan.levers is None:
            kept = (n for n in esm.LEVERS if runs.get(n, {}).get("pays") and runs[n]["min_cosine"] >= LEVER_MIN_COSINE)
            plan = plan._replace(levers=frozenset(kept))
        runs[run] = {"levers": sorted(plan.levers), "fp8": plan.fp8, "fast_accum": plan.fast_accum}
        for shape, config in sorted(shapes["esm"].items(), key=lambda item: item[1] != shapes["speed_esm"]):
            with record.step(f"levers: {run}, {shape}"):
                free(device)
                embedder = esm_embedder(config, device, dtype, plan, args.compiled)
                if config == shapes["speed_esm"]:
                    runs[run] |= timed(embedder, batches, device)
                    if "none" in runs:
                        runs[run]["over_none"] = round(runs[run]["tokens_per_s"] / runs["none"]["tokens_per_s"], 3)
                got = feed_embeddings(embedder, subset, args.budget, device)
                runs[run][shape] = agreement(got, references[shape])
                runs[run][shape]["calls_changed"] = round(float((calls(got) != calls(references[shape])).mean()), 4)
                runs[run][shape]["compiled"] = embedder.compiled  # false: a compile failed, the layers ran eager
                del embedder
                free(device)
        runs[run]["min_cosine"] = min(runs[run][shape]["min_cosine"] for shape in shapes["esm"])
        if "over_none" in runs[run]:
            runs[run]["pays"] = runs[run]["over_none"] >= LEVER_MIN_GAIN if plan.levers or plan.fp8 else None
        record.save()
    if "none" in runs and "default" in runs:  # measured before "none": what the default levers are worth
        runs["default"]["over_none"] = round(runs["default"]["tokens_per_s"] / runs["none"]["tokens_per_s"], 3)
        runs["default"]["pays"] = runs["default"]["over_none"] >= LEVER_MIN_GAIN
        record.save()


# ---------------------------------------------------------------- workflow


# How the embed jobs use the one GPU: sharing it by memory, as profiles/local does (each job asks
# for its gpu_mem_mb, no whole GPU), or a whole GPU each (one after the other).
GPU_SETTINGS = {"shared": ("--set-resources", "embed:gpu=0"), "whole": ("--set-resources", "embed:gpu=1")}


def workflow_runs(args) -> list[tuple[str, int, str]]:
    """(name, reads, GPU setting) of the runs, in order: a small run with every cache empty (`cold`:
    the compile, the ESM-2 copy and the model check's hashes all made), then the first of
    --workflow-reads on the caches it left, shared and then a whole GPU each, then the others shared."""
    first, *more = args.workflow_reads
    runs = [("cold", args.cold_reads, "shared")] if args.cold_reads else []
    runs += [(f"warm_{first}", first, "shared"), (f"warm_{first}_whole", first, "whole")]
    return runs + [(f"warm_{n}", n, "shared") for n in more]


def workflow(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    """The whole workflow, run after run on one model cache, each in a fresh run directory."""
    with record.step("models and reads"):
        start = time.perf_counter()
        workflow_setup(args, shapes, workdir)
        result["setup_seconds"] = round(time.perf_counter() - start, 1)
    memory_mb = torch.cuda.get_device_properties(device).total_memory // 2**20 if device.type == "cuda" else 80000
    kept = record.path.with_name(f"{record.path.stem}_logs") if record.path else workdir / "kept_logs"
    result["runs"] = {}
    for name, reads, setting in workflow_runs(args):
        with record.step(f"snakemake, {name}"):
            folder = workdir / name
            run = workflow_run(workdir, folder, reads, GPU_SETTINGS[setting], memory_mb, kept / name)
            result["runs"][name] = {"reads": reads, "gpu": setting, **run, **run_figures(folder, reads, run)}
    first = args.workflow_reads[0]
    shared, whole = result["runs"].get(f"warm_{first}"), result["runs"].get(f"warm_{first}_whole")
    if shared and whole:
        result["shared_over_whole"] = {
            key: round(shared[key] / whole[key], 3) for key in ("seconds", "embed_seconds") if whole[key]
        }
    with record.step("snakemake, preflight"):  # the GPU node's check, as docs/cluster.md runs it
        folder = workdir / "preflight"
        folder.mkdir()
        write_reads(folder / "reads.fa", 10, 500, seed=2)  # a sample, for the start-up checks: not read
        (folder / "samples.tsv").write_text(f"sample\tpath\nreads\t{folder / 'reads.fa'}\n")
        config = yaml.safe_load((workdir / "config.yaml").read_text()) | {"samples": str(folder / "samples.tsv")}
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        options = ("--configfile", folder / "config.yaml", "--cores", len(os.sched_getaffinity(0)))
        run, _ = snakemake(folder, "preflight", *options, "--resources", "gpu=1", log=kept / "preflight.log")
        result["preflight"] = {"seconds": run["seconds"], **read_json(folder / "results" / "preflight.json")}


def workflow_setup(args, shapes: dict, workdir: Path) -> None:
    """The random models (ESM-2's checkpoint made once in --models) and the config, less its samples."""
    models = workdir / "models"
    config = shapes["speed_esm"]
    checkpoint = args.models / "esm2_t{encoder_layers}_{encoder_embed_dim}x{encoder_attention_heads}.pt".format(
        **config
    )
    if not checkpoint.exists():  # float16, as published; written whole or not at all (3B-shaped: minutes)
        demo_models.build_esm(checkpoint, 0, {**config, "token_dropout": True}, dtype=torch.float16)
    directory = demo_models.build_dnabert(models / "dnabert_s", TOKENIZER_GENOMES, 0, shapes["dnabert"])
    torch.manual_seed(0)
    dims = shapes["dnabert"]["hidden_size"] + config["encoder_embed_dim"]
    classifier.save(classifier.MLPClassifier(dims), models / "classifier.pt", chunk_length=500)
    settings = {
        "chunk_length": 500,
        "shard_tokens": args.shard_tokens,
        "models": {
            "esm": {"checkpoint": str(checkpoint), "layer": config["encoder_layers"], "token_budget": args.budget},
            "dnabert": {"checkpoint": str(directory), "token_budget": args.dnabert_budget},
            "classifier": str(models / "classifier.pt"),
            "cache_dir": str(models / "cache"),
        },
        "embedding": {"precision": "fp16"},
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(settings))


def workflow_run(workdir: Path, folder: Path, reads: int, options: tuple, memory_mb: int, kept: Path) -> dict:
    """One run over `reads` reads with Snakemake `options`: its wall time, its embed jobs' span (from
    their logs) and the GPU's busy share over it; Snakemake's output kept in `kept` (the job logs too
    if it fails)."""
    folder.mkdir()
    reads_path = workdir / f"reads_{reads}.fa"
    if not reads_path.exists():
        write_reads(reads_path, reads, 500, seed=2)
    (folder / "samples.tsv").write_text(f"sample\tpath\nreads\t{reads_path}\n")
    config = yaml.safe_load((workdir / "config.yaml").read_text()) | {"samples": str(folder / "samples.tsv")}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    kept.mkdir(parents=True, exist_ok=True)
    options = ("--configfile", folder / "config.yaml", "--cores", len(os.sched_getaffinity(0)), *options)
    options += ("--resources", "gpu=1", f"gpu_mem_mb={memory_mb}")
    try:
        with GpuBusy() as busy:
            run, _ = snakemake(folder, *options, log=kept / "snakemake.log")
    except RuntimeError:
        if (folder / "logs").is_dir():  # none when Snakemake stops before any job
            shutil.copytree(folder / "logs", kept, dirs_exist_ok=True)
        raise
    spans = [log_span(path) for path in sorted((folder / "logs" / "embed").glob("*.log"))]
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    overlap = sum(max(0, min(a[1], b[1]) - max(a[0], b[0])) for i, a in enumerate(spans) for b in spans[i + 1 :])
    return {
        "snakemake_options": [str(option) for option in options[2:]],
        "seconds": run["seconds"],
        "embed_jobs": len(spans),
        "embed_seconds": end - start,  # the first embed job's first log line to the last one's last
        "embed_jobs_overlap_seconds": overlap,  # summed over pairs of jobs
        **busy.between(start, end),
    }


def run_figures(folder: Path, reads: int, run: dict) -> dict:
    """A finished run's reads per hour, its model check's seconds and each embed job's figures."""
    check = pd.read_csv(folder / "results" / "benchmarks" / "check_models.tsv", sep="\t")["s"].iloc[0]
    jobs = {}
    for path in sorted((folder / "results" / "shards" / "embeddings").glob("*/shard_*.json")):
        stats = json.loads(path.read_text())
        keys = ("startup_s", "load_seconds", "tokens_per_s", "seconds", "attention", "peak_memory_bytes")
        jobs[f"{path.parent.name}_{path.stem}"] = {key: stats.get(key) for key in keys}
    return {"reads_per_hour": round(reads / run["seconds"] * 3600), "model_check_s": float(check), "embed_job": jobs}


def log_span(path: Path) -> tuple[float, float]:
    """A job log's first and last line times (HH:MM:SS) as epoch seconds, the last to the end of its second."""
    stamps = re.findall(r"^(\d\d:\d\d:\d\d) ", path.read_text(), re.M)
    day = time.strftime("%Y-%m-%d", time.localtime(path.stat().st_mtime))
    first, last = (time.mktime(time.strptime(f"{day} {s}", "%Y-%m-%d %H:%M:%S")) for s in (stamps[0], stamps[-1]))
    return first, last + 1


class GpuBusy:
    """The GPU's SM busy share (nvidia-smi's utilization.gpu), sampled every second while in the
    context; nothing where there is no nvidia-smi (a CPU)."""

    def __enter__(self):
        self.samples, self.process = [], None
        if shutil.which("nvidia-smi"):
            query = ["nvidia-smi", "-i", "0", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
            self.process = subprocess.Popen([*query, "-lms", "1000"], stdout=subprocess.PIPE, text=True)
            self.reader = threading.Thread(target=self._read, daemon=True)
            self.reader.start()
        return self

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.strip().isdigit():
                self.samples.append((time.time(), int(line)))

    def __exit__(self, *exc) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.reader.join(timeout=30)

    def between(self, start: float, end: float) -> dict:
        busy = [value for at, value in self.samples if start <= at <= end]
        share = round(sum(busy) / len(busy) / 100, 3) if busy else None
        return {"gpu_sm_busy_share": share, "gpu_busy_samples": len(busy)}


# ---------------------------------------------------------------- equivalence


def edge_proteins(alphabet, rng: np.random.Generator) -> tuple[list[str], list[np.ndarray]]:
    """Names and token arrays of the edge cases: 1 residue, 1022 and 1100 residues (past fair-esm's
    usual truncation and VirNucPro's 1024-residue pooling), ambiguous and rare letters, <mask>."""
    letters = np.frombuffer(b"ACDEFGHIKLMNPQRSTVWY", dtype=np.uint8)
    proteins = {
        "1 residue": b"M",
        "1022 residues": letters[rng.integers(0, 20, 1022)].tobytes(),
        "1100 residues": letters[rng.integers(0, 20, 1100)].tobytes(),
        "X/B/Z/U/O": b"MKXBZUOLLVAGXXKZ" * 4,
        "<mask>": letters[rng.integers(0, 20, 150)].tobytes(),
    }
    encoded = ESMTokens.of(alphabet)(list(proteins.values()))
    encoded[-1][[5, 40, 41, 90]] = alphabet.mask_idx
    return list(proteins), encoded


@torch.inference_mode()
def fair_esm_reference(model, encoded: list[np.ndarray], layer: int, device: torch.device) -> np.ndarray:
    """fair-esm's own FP32 forward, one sequence at a time, VirNucPro's pooling."""
    out = np.zeros((len(encoded), model.embed_dim), dtype=np.float32)
    for i, tokens in enumerate(encoded):
        hidden = model(torch.from_numpy(tokens)[None].to(device), repr_layers=[layer])["representations"][layer]
        out[i] = hidden[0, 1 : min(len(tokens) - 2, esm.POOLED_RESIDUES) + 1].mean(0).cpu().numpy()
    return out


def esm_equivalence(config: dict, proteins: list[bytes], device, budget: int, precisions) -> dict:
    model = esm_random(config, "cpu")
    layers = config["encoder_layers"]
    names, encoded = edge_proteins(model.alphabet, np.random.default_rng(0))
    encoded += ESMTokens.of(model.alphabet)(proteins)
    reference = fair_esm_reference(copy.deepcopy(model).to(device), encoded, layers, device)
    free(device)
    figures = {"proteins": len(encoded), "runs": {}}
    for precision in precisions:
        dtype = PRECISIONS[precision]
        embedder = esm.ESMEmbedder(copy.deepcopy(model), model.alphabet, layers, device, dtype)
        got = feed_embeddings(embedder, encoded, budget, device)
        run = agreement(got, reference)
        run["edge"] = {name: round(float(c), 7) for name, c in zip(names, cosines(got, reference))}
        run["attention"] = varlen.kernel_name(device, dtype, alibi=False)
        figures["runs"][precision] = run
        del embedder
        free(device)
    return figures


def dnabert_equivalence(directory: Path, sequences: list[bytes], device, budget: int, reference=None) -> dict:
    """Packed FP16 and BF16 (and FP32 where `reference` is given) against `reference`: by default the
    same model's FP32 forward, one sequence at a time."""
    model, tokens = dnabert_loading.load(str(directory))
    encoded = tokens(sequences)
    precisions = ("fp16", "bf16") if reference is None else ("fp32", "fp16", "bf16")
    if reference is None:
        embedder = dnabert.DNABERTEmbedder(copy.deepcopy(model), tokens, device)
        reference = np.concatenate([feed_embeddings(embedder, [e], 1, device) for e in encoded])
        del embedder
    figures = {"sequences": len(encoded), "max_tokens": max(map(len, encoded)), "runs": {}}
    for precision in precisions:
        dtype = PRECISIONS[precision]
        embedder = dnabert.DNABERTEmbedder(copy.deepcopy(model), tokens, device, dtype)
        run = agreement(feed_embeddings(embedder, encoded, budget, device), reference)
        figures["runs"][precision] = run | {"attention": varlen.kernel_name(device, dtype, alibi=True)}
        free(device)
    return figures


def equivalence(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    with record.step("frames"):
        shards = prepared_reads(workdir, args.reads)
    proteins = first_sequences(shards["faa"], args.equivalence_frames)
    nucleotides = first_sequences(shards["fna"], args.equivalence_frames)
    rng = np.random.default_rng(1)
    nucleotides += [b"A", np.frombuffer(b"ACGT", dtype=np.uint8)[rng.integers(0, 4, 3000)].tobytes()]
    result["esm"] = {}
    for name, config in shapes["esm"].items():
        if args.esm_shapes and name not in args.esm_shapes.split(","):
            continue
        with record.step(f"ESM-2 {name}"):
            result["esm"][name] = esm_equivalence(config, proteins, device, args.budget, args.precisions.split(","))
    # DNABERT-S in both half precisions whatever ESM-2's: bf16 rounds its ALiBi bias more coarsely
    with record.step("DNABERT-S"):
        directory = demo_models.build_dnabert(workdir / "dnabert_s", TOKENIZER_GENOMES, 0, shapes["dnabert"])
        result["dnabert"] = dnabert_equivalence(directory, nucleotides, device, args.budget)
    with record.step("DNABERT-S fixture"):  # the shipped tiny checkpoint against the public code's vectors
        fixture = ROOT / "tests" / "data" / "dnabert_s_tiny"
        vectors = np.load(fixture / "reference.npz", allow_pickle=False)
        sequences = [str(s).encode() for s in vectors["sequences"]]
        result["dnabert_fixture"] = dnabert_equivalence(fixture, sequences, device, 1000, vectors["embeddings"])


# ---------------------------------------------------------------- the command

PARTS = {"model": model_alone, "workflow": workflow, "equivalence": equivalence}
# --part all: (part, the share of the time left that it may take when it starts, its options).
# The model part's layers compiled where the embed job compiles them (CUDA).
ALL = (
    ("model", 0.5, {"levers": True, "compiled": "cuda"}),
    ("workflow", 0.8, {}),
    ("equivalence", 1.0, {}),
)


def shapes(tiny: bool) -> dict:
    """Model shapes: the published ones, or tiny ones for the CPU dry run."""
    if tiny:
        return {"esm": TINY_ESM, "speed_esm": TINY_ESM["t2"], "dnabert": demo_models.DNABERT_CONFIG}
    published = demo_models.ESM2_SHAPES
    return {"esm": published, "speed_esm": published["3B"], "dnabert": demo_models.DNABERT_S}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=(*PARTS, "all"), required=True)
    parser.add_argument("--out", type=Path, help="JSON file to write (the figures are printed too)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny model shapes (the CPU dry run)")
    parser.add_argument(
        "--models",
        type=Path,
        default=Path(tempfile.gettempdir()) / "gpu_check_models",
        help="where the random ESM-2 checkpoint of the workflow part is made once (3B-shaped: minutes)",
    )
    parser.add_argument("--reads", type=int, default=60_000, help="500 bp reads whose frames are embedded")
    parser.add_argument("--frames", type=int, default=20_000, help="frames of the model part")
    parser.add_argument("--equivalence-frames", type=int, default=200, help="read-derived frames for equivalence")
    parser.add_argument("--esm-shapes", help="ESM-2 shapes for equivalence, e.g. 650M (default: all)")
    parser.add_argument("--precisions", default="fp16,bf16", help="half precisions of ESM-2's equivalence")
    parser.add_argument("--budget", type=int, default=16384, help="ESM-2 token budget")
    parser.add_argument("--dnabert-budget", type=int, default=32768, help="DNABERT-S token budget")
    parser.add_argument("--sweep", type=int, nargs="+", default=[16384, 32768, 65536], help="model part's budgets")
    parser.add_argument("--compiled", action="store_true", help="model part: ESM-2's layers compiled")
    parser.add_argument("--levers", action="store_true", help="model part: ESM-2's lever runs (LEVER_PLANS)")
    parser.add_argument("--lever-frames", type=int, default=200, help="frames of the levers' cosine against FP32")
    parser.add_argument(
        "--lever-runs", nargs="+", choices=list(LEVER_PLANS), metavar="RUN", help="the lever runs to make, in order"
    )
    parser.add_argument("--workflow-reads", type=int, nargs="+", default=[100_000], help="reads of the warm runs")
    parser.add_argument("--cold-reads", type=int, default=10_000, help="reads of the run on empty caches (0: none)")
    parser.add_argument("--shard-tokens", type=int, default=2_000_000, help="ESM-2 tokens per shard (workflow)")
    parser.add_argument(
        "--deadline-seconds", type=float, help="of the whole command, from its start: it ends within 15 s of it"
    )
    args = parser.parse_args()
    # the deadline counts from the process's start, as the `timeout` in front of the command does
    deadline = psutil.Process().create_time() + args.deadline_seconds if args.deadline_seconds else math.inf
    args.models.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    set_allocator_conf("expandable_segments:True")  # as the embed job sets it: after torch's import, before CUDA's
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    if args.part != "all":
        sys.exit(run_part(args, args.part, args.out, device, deadline) == "failed")
    summary = Record(args.out, header("gpu_check") | {"part": "all", **device_figures(device), "parts": {}})
    summary.figures["allocator_settings"] = allocator_settings(device)
    for part, share, overrides in ALL:
        status = "skipped: the deadline"
        if time.time() < deadline:
            out = args.out.with_name(f"{part}.json") if args.out else None
            overrides = {key: value == device.type if value == "cuda" else value for key, value in overrides.items()}
            ends = min(deadline, time.time() + share * (deadline - time.time()))
            try:
                status = run_part(argparse.Namespace(**vars(args) | overrides), part, out, device, ends, summary)
            except Deadline:  # fired while the part was ending (its failure being logged)
                status = "cut: the deadline"
        summary.figures["parts"][part] = status
        summary.save()  # a part skipped too: all.json lists every part
    print_figures(summary.figures)
    sys.exit(int("failed" in summary.figures["parts"].values()))


def allocator_settings(device) -> str | None:
    """The CUDA allocator's settings in force (PYTORCH_ALLOC_CONF is set after torch's import, as the
    embed job sets it, and must still give expandable segments)."""
    if device.type != "cuda":
        return None
    torch.empty(1, device=device)
    return str(torch.cuda.memory._snapshot().get("allocator_settings"))


def run_part(args, part: str, out: Path | None, device, deadline: float, summary: Record | None = None) -> str:
    """One part, its figures in `out` (and in all.json's `summary`): "done", "failed" or "cut: the deadline"."""
    figures = header("gpu_check") | {"part": part, "tiny": args.tiny, **device_figures(device), part: {}}
    if summary:
        summary.figures[part] = figures
    record = Record(out, figures, deadline, summary)
    start = time.perf_counter()
    status = "done"
    try:
        if deadline < math.inf:
            arm(deadline)
        with tempfile.TemporaryDirectory() as workdir:
            PARTS[part](args, shapes(args.tiny), Path(workdir), device, figures[part], record)
    except Deadline:
        status = "cut: the deadline"
        log.info("part %s: the deadline cut step %r", part, figures.get("cut_by_deadline"))
    except Exception:
        log.exception("step %r failed; the figures measured before it are in %s", figures.get("failed_step"), out)
        status = "failed"
    finally:
        disarm()
    figures["part_seconds"] = round(time.perf_counter() - start, 1)
    record.save()
    print_figures(figures)
    return status


if __name__ == "__main__":
    main()
