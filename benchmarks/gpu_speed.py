"""The GPU check's speed parts (benchmarks/gpu_check.py runs them): `model`, the models alone on
batches already on the device; `speed`, the production embed job against fair-esm's batching and
VirNucPro's settings; `workflow`, the whole workflow under Snakemake."""

import copy
import json
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import NamedTuple

import esm as fair_esm
import numpy as np
import pandas as pd
import torch
from embed_throughput import (
    device_figures,
    esm_checkpoint,
    fair_esm_embed,
    free,
    production_embed,
    read_frames,
    sequences,
    sync,
)
from gpu_correctness import agreement, feed_embeddings

from workflow_lib.embed.packing import greedy_batches, pack
from workflow_lib.harness.measure import snakemake
from workflow_lib.harness.stages import GENOMES, prepared_reads, write_reads
from workflow_lib.models import classifier, demo_models, dnabert, esm, esm_loading, varlen
from workflow_lib.models.tokens import ESMTokens

# dense FP16/BF16 tensor cores, by device name (the first that the name holds)
PEAK_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0, "H200": 989.0, "A100": 312.0}
TOKENIZER_GENOMES = sorted(GENOMES.glob("*.fasta"))


def peak_tflops(device) -> float | None:
    """The device's dense FP16 tensor-core TFLOP/s; None where not known (a CPU)."""
    gpu = device_figures(device).get("gpu", "")
    return next((tflops for name, tflops in PEAK_TFLOPS.items() if name in gpu), None)


# ---------------------------------------------------------------- speed


def gpu_busy_share(profile, seconds: float) -> dict:
    """Share of the wall time in which a CUDA kernel ran (union of kernel intervals), and the
    kernels that took the most time."""
    kernels = sorted(
        (e.time_range.start, e.time_range.end, e.name)
        for e in profile.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    )
    busy, end, totals = 0.0, -1.0, {}
    for start, stop, name in kernels:
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
        totals[name] = totals.get(name, 0.0) + stop - start
    top = sorted(totals.items(), key=lambda item: -item[1])[:8]
    return {
        "gpu_busy_share": round(busy / 1e6 / seconds, 3) if kernels else None,
        "top_kernels_ms": {name[:80]: round(us / 1e3, 1) for name, us in top},
    }


def profiled_embed(shard: Path, output: Path, **settings) -> dict:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if settings["device"] == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profile:
        _, stats = production_embed(shard, output, **settings)
    return {"frames": len(sequences(shard)), **gpu_busy_share(profile, stats["seconds"])}


def esm_tokens(proteins: list[str]) -> int:
    return sum(len(p) + 2 for p in proteins)


def embed_job_figures(stats: dict, frames: int, device, config: dict) -> dict:
    """The ESM-2 embed job's figures: rates, start-up, model FLOPs utilisation, memory."""
    flop, peak = flop_per_token("esm", config), peak_tflops(device)
    job = {key: stats[key] for key in ("tokens_per_s", "n_tokens", "seconds", "load_seconds", "precision")}
    job |= {key: stats[key] for key in ("attention", "fill", "batches", "num_workers", "oom_splits")}
    job["frames"] = frames
    # tokens_per_s is the steady rate; the gap to the whole job's is start-up (workers, kernel check, compile)
    job["startup_s"] = stats["startup_s"]
    job["whole_job_tokens_per_s"] = round(stats["n_tokens"] / stats["seconds"])
    job["gflop_per_token"] = round(flop / 1e9, 2)
    job["mfu"] = round(stats["tokens_per_s"] * flop / (peak * 1e12), 3) if peak else None
    job["peak_memory_gib"] = round(stats["peak_memory_bytes"] / 2**30, 2)
    job["loader_wait_share"] = round(stats["loader_wait_s"] / stats["seconds"], 3)
    return job


def against_fair_esm(args, proteins_path: Path, checkpoint: Path, device, ours: float, result, record) -> None:
    """fair-esm's own batching in FP16, and VirNucPro's settings (FP32, toks_per_batch 2048), against
    the embed job's `ours` tokens/s."""
    with record.step("fair-esm FP16"):
        model, alphabet = esm_loading.load(str(checkpoint), device=device)  # built on the device: no host copy
        layers = model.num_layers
        subset = sequences(read_frames(proteins_path, args.compare_frames))
        half = copy.deepcopy(model).to(dtype=torch.float16 if device.type == "cuda" else torch.float32)
        _, seconds = fair_esm_embed(half, alphabet, subset, layers, args.budget, device)
        del half
        free(device)
        fair = {"frames": len(subset), "tokens_per_s": round(esm_tokens(subset) / seconds)}
        fair |= {"toks_per_batch": args.budget, "embed_job_over_it": round(ours / fair["tokens_per_s"], 2)}
        result["fair_esm_fp16"] = fair
    with record.step("VirNucPro's settings, FP32"):
        subset = sequences(read_frames(proteins_path, args.virnucpro_frames))
        _, seconds = fair_esm_embed(model, alphabet, subset, layers, 2048, device)
        virnucpro = {"frames": len(subset), "tokens_per_s": round(esm_tokens(subset) / seconds), "toks_per_batch": 2048}
        virnucpro["embed_job_over_it"] = round(ours / virnucpro["tokens_per_s"], 2)
        result["virnucpro_fp32"] = virnucpro
        del model
        free(device)


def speed(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    with record.step("frames and checkpoint"):
        shards = prepared_reads(workdir, args.reads)
        shard = read_frames(shards["faa"], args.frames)
        config = shapes["speed_esm"]
        layers = config["encoder_layers"]
        start = time.perf_counter()
        checkpoint = esm_checkpoint(args.models, layers, config["encoder_embed_dim"], config["encoder_attention_heads"])
        result["checkpoint_build_seconds"] = round(time.perf_counter() - start, 1)
    common = {"device": device.type, "num_workers": args.workers, "precision": "fp16"}
    with record.step("embed job, ESM-2"):
        free(device)
        embeddings, stats = production_embed(
            shard, workdir / "esm.h5", model="esm", checkpoint=str(checkpoint), layer=layers,
            token_budget=args.budget, **common,
        )  # fmt: skip
        result["embed_job"] = job = embed_job_figures(stats, len(embeddings), device, config)
    with record.step("embed job, ESM-2, profiled"):
        job["profile"] = profiled_embed(
            read_frames(shards["faa"], args.profile_frames), workdir / "profiled.h5", model="esm",
            checkpoint=str(checkpoint), layer=layers, token_budget=args.budget, **common,
        )  # fmt: skip
        free(device)

    against_fair_esm(args, shards["faa"], checkpoint, device, stats["tokens_per_s"], result, record)
    with record.step("embed job, DNABERT-S"):
        directory = demo_models.build_dnabert(workdir / "dnabert_s", TOKENIZER_GENOMES, 0, shapes["dnabert"])
        _, stats = production_embed(
            read_frames(shards["fna"], args.frames), workdir / "dnabert.h5", model="dnabert",
            checkpoint=str(directory), token_budget=args.dnabert_budget, **common,
        )  # fmt: skip
        keys = ("tokens_per_s", "n_tokens", "seconds", "attention", "fill", "peak_memory_bytes")
        result["dnabert_job"] = {key: stats[key] for key in keys}


# ---------------------------------------------------------------- the model alone


def random_on(module: torch.nn.Module, device, dtype) -> torch.nn.Module:
    """`module` (built on the meta device) with random weights made on `device`: no host copy."""
    module = module.to_empty(device=device)
    generator = torch.Generator(device).manual_seed(0)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0, 0.02, generator=generator)
    return module.to(dtype).eval()


def esm_alone(config: dict, device, dtype, compiled: bool = False) -> esm.ESMEmbedder:
    layers, dim, heads = config["encoder_layers"], config["encoder_embed_dim"], config["encoder_attention_heads"]
    with torch.device("meta"):
        model = fair_esm.ESM2(layers, dim, heads, "ESM-1b", True)
    model = random_on(model, device, dtype)
    half = dim // heads // 2
    inv_freq = 1.0 / 10000 ** (torch.arange(half, device=device, dtype=torch.float32) * 2 / (dim // heads))
    model.layers[0].self_attn.rot_emb.inv_freq = inv_freq  # a buffer: to_empty left it unset
    return esm.ESMEmbedder(model, model.alphabet, layers, device, dtype, compiled=compiled)


def dnabert_alone(config: dict, directory: Path, device, dtype) -> dnabert.DNABERTEmbedder:
    with torch.device("meta"):
        model = dnabert.DNABERT(config)
    model = random_on(model, device, dtype)
    model.slopes = torch.tensor(dnabert.alibi_slopes(config["num_attention_heads"]), device=device)
    return dnabert.DNABERTEmbedder(model, dnabert.DNABERTTokens(directory / "tokenizer.json"), device, dtype)


def flop_per_token(model: str, config: dict) -> int:
    """The GEMMs' FLOPs a token (attention adds about 1% at these lengths)."""
    if model == "esm":
        return 24 * config["encoder_embed_dim"] ** 2 * config["encoder_layers"]  # q, k, v, out, fc1, fc2 (4d)
    d, inner = config["hidden_size"], config["intermediate_size"]
    return 2 * (4 * d * d + 3 * d * inner) * config["num_hidden_layers"]  # Wqkv, out, gated MLP


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
    """The model alone on pre-packed batches of read-derived frames already on the device, a
    warm-up pass (kernel check, compile) left out, over a sweep of token budgets."""
    with record.step("frames"):
        shards = prepared_reads(workdir, args.reads)
        frames = {"esm": read_frames(shards["faa"], args.frames), "dnabert": read_frames(shards["fna"], args.frames)}
        tokenizer_dir = demo_models.build_dnabert(workdir / "dnabert_s", TOKENIZER_GENOMES, 0, shapes["dnabert"])
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    peak = peak_tflops(device)
    # the embed job's forward first (compiled, where --compiled), then DNABERT-S, then ESM-2 eager
    runs = [("esm_compiled", shapes["speed_esm"])] if args.compiled else []
    runs += [("dnabert", shapes["dnabert"]), ("esm", shapes["speed_esm"])]
    for run, config in runs:
        model = run.removesuffix("_compiled")
        with record.step(f"{run}: model"):
            free(device)
            if model == "esm":
                embedder = esm_alone(config, device, dtype, compiled=run != model)
            else:
                embedder = dnabert_alone(config, tokenizer_dir, device, dtype)
            encoded = embedder.tokens([s.encode() for s in sequences(frames[model])])
            result[run] = {"frames": len(encoded), "gflop_per_token": round(flop_per_token(model, config) / 1e9, 3)}
            result[run]["budgets"] = {}
        for budget in args.sweep:
            with record.step(f"{run}: budget {budget}"):
                batches = device_batches(encoded, budget, device)
                figures = timed(embedder, batches, device)
                rate = figures["tokens_per_s"]
                result[run]["budgets"][str(budget)] = {
                    **figures,
                    "batches": len(batches),
                    "mfu": round(rate * flop_per_token(model, config) / (peak * 1e12), 3) if peak else None,
                    "attention": varlen.kernel_name(device, dtype, embedder.alibi),
                }
                del batches
        del embedder
        free(device)
    if args.levers:
        esm_levers(args, shapes, frames["esm"], device, dtype, result.setdefault("levers", {}), record)


LEVER_MIN_COSINE = 0.99999  # against FP32, at every shape: what a lever kept on must reach
LEVER_MIN_GAIN = 1.005  # over none: more than the spread of repeated runs (docs/gpu-check.md: 0.2%)


def esm_random(config: dict, device) -> fair_esm.ESM2:
    """A random ESM-2 of `config`'s shape in FP32, made on the device with fair-esm's own
    initialisation (LayerNorms at 1, as trained models have them), the same for every call."""
    torch.manual_seed(0)
    with torch.device(device):
        model = fair_esm.ESM2(config["encoder_layers"], config["encoder_embed_dim"], config["encoder_attention_heads"])
    return model.eval()


def lever_embedder(config: dict, device, dtype, plan: "LeverPlan", compiled=False) -> esm.ESMEmbedder:
    torch._dynamo.reset()  # each run compiles its own graphs, within Dynamo's limit of recompiles
    model = esm_random(config, device)
    layers = config["encoder_layers"]
    return esm.ESMEmbedder(
        model, model.alphabet, layers, device, dtype, compiled=compiled, levers=plan.levers, fp8=plan.fp8,
        fast_accum=plan.fast_accum,
    )  # fmt: skip


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


def calls(embeddings: np.ndarray) -> np.ndarray:
    """The class a fixed random linear head gives each embedding: a stand-in for a classifier's call,
    to count the calls a lever changes (random weights: not a biological figure)."""
    head = np.random.default_rng(0).standard_normal((embeddings.shape[1], 2))
    return (embeddings @ head).argmax(axis=1)


def esm_levers(args, shapes: dict, frames: Path, device, dtype, result: dict, record) -> None:
    """ESM-2's levers toward 100,000 tokens/s (esm.LEVERS) and FP8, in LEVER_PLANS' order (or
    --lever-runs'): each timed on the speed shape at --budget (the layers compiled with --compiled),
    and its embeddings of --lever-frames frames compared with the same model's FP32 forward at each
    ESM-2 shape (650M and 3B): cosines and the share of calls that change."""
    encoded = ESMTokens.of(fair_esm.Alphabet.from_architecture("ESM-1b"))([s.encode() for s in sequences(frames)])
    subset = encoded[: args.lever_frames]
    references = {}
    for shape, config in shapes["esm"].items():
        with record.step(f"levers: {shape} FP32 reference"):
            free(device)
            reference = lever_embedder(config, device, torch.float32, LEVER_PLANS["none"])
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
                embedder = lever_embedder(config, device, dtype, plan, args.compiled)
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


# ---------------------------------------------------------------- whole workflow


# How the workflow part lets the embed jobs use its one GPU: sharing it by memory, as profiles/local
# does (each job asks for its gpu_mem_mb, no whole GPU), or a whole GPU each (one after the other).
GPU_SETTINGS = {"shared": ("--set-resources", "embed:gpu=0"), "whole": ("--set-resources", "embed:gpu=1")}


def workflow_runs(args) -> list[tuple[str, int, str]]:
    """(name, reads, GPU setting) of the workflow part's runs, in order: a small run with every cache
    empty (`cold`: the compile, the ESM-2 copy and the model check's hashes all made), the first of
    --workflow-reads on the caches it left (a second run of the same models, as a user's), shared and
    then a whole GPU each, and each further --workflow-reads shared."""
    first, *more = args.workflow_reads
    runs = [("cold", args.cold_reads, "shared")] if args.cold_reads else []
    runs += [(f"warm_{first}", first, "shared"), (f"warm_{first}_whole", first, "whole")]
    return runs + [(f"warm_{n}", n, "shared") for n in more]


def workflow(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    """The whole workflow over 500 bp reads, run after run on one model cache (workflow_runs), each in
    a fresh run directory: reads per hour, the model check's and embed jobs' start-up, and the GPU's
    SM busy share between the first embed job's start and the last one's end; shared against whole."""
    with record.step("models and reads"):
        setup = workflow_setup(args, shapes, workdir)
    memory_mb = torch.cuda.get_device_properties(device).total_memory // 2**20 if device.type == "cuda" else 80000
    result["setup_seconds"] = round(setup, 1)
    kept = record.path.with_name(f"{record.path.stem}_logs") if record.path else workdir / "kept_logs"
    result["runs"] = {}
    for name, reads, setting in workflow_runs(args):
        with record.step(f"snakemake, {name}"):
            folder = workdir / name
            run = workflow_run(workdir, folder, reads, GPU_SETTINGS[setting], memory_mb, kept / name)
            result["runs"][name] = {"reads": reads, "gpu": setting, **run, **run_figures(folder, reads, run)}
    runs = result["runs"]
    first = args.workflow_reads[0]
    shared, whole = runs.get(f"warm_{first}"), runs.get(f"warm_{first}_whole")
    if shared and whole:
        result["shared_over_whole"] = {
            key: round(shared[key] / whole[key], 3) for key in ("seconds", "embed_seconds") if whole[key]
        }


def workflow_run(workdir: Path, folder: Path, reads: int, options: tuple, memory_mb: int, kept: Path) -> dict:
    """One run of the workflow part's config in `folder` over `reads` reads with Snakemake `options`;
    its wall time, its embed jobs' span (from their logs) and the GPU's busy share over that span;
    Snakemake's output kept in `kept` (and the job logs, if it fails)."""
    import yaml

    folder.mkdir()
    reads_path = workdir / f"reads_{reads}.fa"
    if not reads_path.exists():
        write_reads(reads_path, reads, 500, seed=2)
    (folder / "samples.tsv").write_text(f"sample\tpath\nreads\t{reads_path}\n")
    config = yaml.safe_load((workdir / "config.yaml").read_text()) | {"samples": str(folder / "samples.tsv")}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    kept.mkdir(parents=True, exist_ok=True)
    cores = len(os.sched_getaffinity(0))
    options = ("--configfile", folder / "config.yaml", "--cores", cores, *options)
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
    """A finished run's reads per hour, its model check's seconds (Snakemake's benchmark file) and
    each embed job's start-up, load, steady rate and seconds (the job's own figures)."""
    check = pd.read_csv(folder / "results" / "benchmarks" / "check_models.tsv", sep="\t")["s"].iloc[0]
    jobs = {}
    for path in sorted((folder / "results" / "shards" / "embeddings").glob("*/shard_*.json")):
        stats = json.loads(path.read_text())
        keys = ("startup_s", "load_seconds", "tokens_per_s", "seconds", "attention", "peak_memory_bytes")
        jobs[f"{path.parent.name}_{path.stem}"] = {key: stats.get(key) for key in keys}
    return {"reads_per_hour": round(reads / run["seconds"] * 3600), "model_check_s": float(check), "embed_job": jobs}


def log_span(path: Path) -> tuple[float, float]:
    """A job log's first and last line times (HH:MM:SS, to the second) as epoch seconds, the last
    one to the end of its second."""
    stamps = re.findall(r"^(\d\d:\d\d:\d\d) ", path.read_text(), re.M)
    day = time.strftime("%Y-%m-%d", time.localtime(path.stat().st_mtime))
    first, last = (
        time.mktime(time.strptime(f"{day} {stamp}", "%Y-%m-%d %H:%M:%S")) for stamp in (stamps[0], stamps[-1])
    )
    return first, last + 1


class GpuBusy:
    """The GPU's SM busy share (nvidia-smi's utilization.gpu: the share of the last sample period
    in which a kernel ran), sampled every second while in the context; nothing where there is no
    nvidia-smi (a CPU)."""

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


def workflow_setup(args, shapes: dict, workdir: Path) -> float:
    """The models and config (config.yaml, less its samples) of the workflow part in `workdir`, the
    model cache that its runs share in it; the seconds they took."""
    import yaml

    models = workdir / "models"
    models.mkdir()
    config = shapes["speed_esm"]
    start = time.perf_counter()
    checkpoint = esm_checkpoint(
        args.models, config["encoder_layers"], config["encoder_embed_dim"], config["encoder_attention_heads"]
    )
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
    return time.perf_counter() - start
