"""The GPU check: the embed job's CUDA paths proven and timed on a GPU, one part per command, each
writing one JSON of figures. On the GPU machine (no network; fair-esm, snakemake and biopython
come as wheels from benchmarks/gpu_wheels.py), from the repository root:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
    python3 benchmarks/gpu_check.py --part equivalence --out $OUT/equivalence.json   # ~3 min on an H100
    python3 benchmarks/gpu_check.py --part model --out $OUT/model.json
    python3 benchmarks/gpu_check.py --part speed --out $OUT/speed.json
    python3 benchmarks/gpu_check.py --part oom --out $OUT/oom.json
    python3 benchmarks/gpu_check.py --part workflow --out $OUT/workflow.json

Parts:
  equivalence  ESM-2 packed in FP16 and BF16 (rotary in the model's dtype and in float32) against
               fair-esm's own FP32 forward per sequence, on 650M- and 3B-shaped random models, with
               read-derived and edge proteins (1 residue, 1022 and 1100 residues, <mask>, X/B/Z/U/O);
               DNABERT-S's shape likewise against its own FP32 per-sequence forward; the shipped
               tiny DNABERT-S fixture against the public code's vectors; the attention kernels used.
  model        the models alone (ESM-2 3B and DNABERT-S shapes, random weights made on the device, FP16)
               on pre-packed batches of read-derived frames already on the device, a warm-up pass
               left out, over a sweep of token budgets (16k to 131k): tokens/s, model FLOPs
               utilisation, peak memory.
  speed        on the same frames of 500 bp reads: the production embed job (ESM-2 3B shape, layer
               36, FP16) with tokens/s, model FLOPs utilisation, peak memory, loader wait share and
               GPU busy share (profiler trace); fair-esm's own batching in FP16 and VirNucPro's
               settings (FP32, toks_per_batch 2048) on a subset, as ratios; DNABERT-S tokens/s.
  oom          the embed job under a memory cap (set_per_process_memory_fraction) that makes its
               batches run out of memory, against the same job uncapped.
  workflow     `snakemake --cores N --resources gpu=1` over 500 bp reads with 3B- and
               DNABERT-S-shaped random checkpoints built on the spot: reads per hour end to end.

Each part rewrites its JSON after every step (`step_seconds`), so one cut off by a time limit keeps
what it measured; a failing step is named in it (`failed_step`, `error`) and the part exits 1.
`--device cpu --tiny` runs the same code on tiny shapes (tests/test_gpu_check.py), so it cannot rot.
Random weights: the figures measure kernels, numerics of the shapes and speed, not biology.
"""

import argparse
import contextlib
import copy
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import esm as fair_esm
import numpy as np
import torch
from embed_throughput import (
    cosines,
    device_figures,
    esm_checkpoint,
    fair_esm_embed,
    free,
    production_embed,
    read_frames,
    sequences,
    sync,
)

from workflow_lib.embed.device_feed import DeviceFeed
from workflow_lib.embed.job import PRECISIONS, set_allocator_conf
from workflow_lib.embed.packing import greedy_batches, pack
from workflow_lib.harness.measure import header, print_figures, snakemake
from workflow_lib.harness.stages import GENOMES, ROOT, prepared_reads, write_reads
from workflow_lib.models import classifier, dnabert, esm, varlen
from workflow_lib.models.tokens import ESMTokens
from workflow_lib.workflow import demo_models

# dense FP16/BF16 tensor cores, by device name (the first that the name holds)
PEAK_TFLOPS = {"H100 PCIe": 756.0, "H100 NVL": 835.0, "H100": 989.0, "H200": 989.0, "A100": 312.0}
TINY_ESM = {
    "t2": {"encoder_layers": 2, "encoder_embed_dim": 64, "encoder_attention_heads": 4, "token_dropout": True},
    "t3": {"encoder_layers": 3, "encoder_embed_dim": 96, "encoder_attention_heads": 6, "token_dropout": True},
}
TOKENIZER_GENOMES = sorted(GENOMES.glob("*.fasta"))
log = logging.getLogger("workflow")


class Record:
    """The part's figures, written to `path` (atomically: a temporary file renamed) after every
    step, so that a part cut off at any moment leaves a JSON holding all it measured. A step that
    fails is named in the JSON (`failed_step`, `error`) and the part exits non-zero."""

    def __init__(self, path: Path | None, figures: dict):
        self.path, self.figures = path, figures
        self.save()

    def save(self) -> None:
        if self.path:
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(json.dumps(self.figures, indent=2) + "\n")
            tmp.replace(self.path)

    @contextlib.contextmanager
    def step(self, name: str):
        log.info("step: %s", name)
        start = time.perf_counter()
        try:
            yield
        except BaseException as error:
            text = " / ".join(line.strip() for line in str(error).strip().splitlines() if line.strip())
            self.figures["failed_step"], self.figures["error"] = name, f"{type(error).__name__}: {text[:1000]}"
            self.save()
            raise
        self.figures.setdefault("step_seconds", {})[name] = round(time.perf_counter() - start, 1)
        self.save()


def shapes(tiny: bool) -> dict:
    """Model shapes: the published ones, or tiny ones for the CPU dry run."""
    if tiny:
        return {
            "esm": TINY_ESM,
            "speed_esm": TINY_ESM["t2"],
            "oom_esm": TINY_ESM["t2"],
            "dnabert": demo_models.DNABERT_CONFIG,
        }
    published = demo_models.ESM2_SHAPES
    return {
        "esm": published,
        "speed_esm": published["3B"],
        "oom_esm": published["650M"],
        "dnabert": demo_models.DNABERT_S,
    }


def peak_tflops(device) -> float | None:
    """The device's dense FP16 tensor-core TFLOP/s; None where not known (a CPU)."""
    gpu = device_figures(device).get("gpu", "")
    return next((tflops for name, tflops in PEAK_TFLOPS.items() if name in gpu), None)


def feed_embeddings(embedder, encoded: list[np.ndarray], budget: int, device: torch.device) -> np.ndarray:
    """Embeddings of token arrays through the embed job's DeviceFeed (copy stream, pinned results)."""
    out = np.zeros((len(encoded), embedder.dim), dtype=np.float32)
    feed = DeviceFeed(embedder, device)
    lengths = np.array([len(e) for e in encoded])
    for rows in greedy_batches(lengths, budget):
        batch = pack(rows, [encoded[i] for i in rows.tolist()], budget).tensors(pin=feed.cuda)
        for done, pooled in feed.compute(*feed.send(batch)):
            out[done] = pooled
    for done, pooled in feed.flush():
        out[done] = pooled
    return out


def agreement(got: np.ndarray, expected: np.ndarray) -> dict:
    cosine = cosines(got, expected)
    return {
        "min_cosine": round(float(cosine.min()), 7),
        "mean_cosine": round(float(cosine.mean()), 7),
        "max_abs_diff": float(np.abs(got - expected).max()),
    }


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
    torch.manual_seed(0)
    layers = config["encoder_layers"]
    model = fair_esm.ESM2(layers, config["encoder_embed_dim"], config["encoder_attention_heads"], "ESM-1b", True)
    model = model.eval()
    alphabet = model.alphabet
    names, encoded = edge_proteins(alphabet, np.random.default_rng(0))
    encoded += ESMTokens.of(alphabet)(proteins)
    start = time.perf_counter()
    reference = fair_esm_reference(copy.deepcopy(model).to(device), encoded, layers, device)
    free(device)
    figures = {"proteins": len(encoded), "reference_seconds": round(time.perf_counter() - start, 1), "runs": {}}
    for precision in precisions:
        dtype = PRECISIONS[precision]
        for rotary in ("model dtype", "float32"):
            embedder = esm.ESMEmbedder(
                copy.deepcopy(model), alphabet, layers, device, dtype, torch.float32 if rotary == "float32" else None
            )
            got = feed_embeddings(embedder, encoded, budget, device)
            run = agreement(got, reference)
            run["edge"] = {name: round(float(c), 7) for name, c in zip(names, cosines(got, reference))}
            run["attention"] = varlen.kernel_name(device, dtype, alibi=False)
            figures["runs"][f"{precision}, rotary in {rotary}"] = run
            del embedder
            free(device)
    return figures


def dnabert_equivalence(directory: Path, sequences_: list[bytes], device, budget: int, precisions) -> dict:
    """Packed half precision against the same model's FP32 forward, one sequence at a time."""
    model, tokens = dnabert.load(str(directory))
    encoded = tokens(sequences_)
    reference_embedder = dnabert.DNABERTEmbedder(copy.deepcopy(model), tokens, device)
    reference = np.concatenate([feed_embeddings(reference_embedder, [e], 1, device) for e in encoded])
    del reference_embedder
    figures = {"sequences": len(encoded), "max_tokens": max(map(len, encoded)), "runs": {}}
    for precision in precisions:
        dtype = PRECISIONS[precision]
        embedder = dnabert.DNABERTEmbedder(copy.deepcopy(model), tokens, device, dtype)
        run = agreement(feed_embeddings(embedder, encoded, budget, device), reference)
        run["attention"] = varlen.kernel_name(device, dtype, alibi=True)
        figures["runs"][precision] = run
        free(device)
    return figures


def fixture_equivalence(device, precisions) -> dict:
    """The shipped tiny DNABERT-S checkpoint against the vectors of the public model code."""
    fixture = ROOT / "tests" / "data" / "dnabert_s_tiny"
    reference = np.load(fixture / "reference.npz", allow_pickle=False)
    model, tokens = dnabert.load(str(fixture))
    encoded = tokens([str(s).encode() for s in reference["sequences"]])
    figures = {}
    for precision in ("fp32", *precisions):
        dtype = PRECISIONS[precision]
        embedder = dnabert.DNABERTEmbedder(copy.deepcopy(model), tokens, device, dtype)
        run = agreement(feed_embeddings(embedder, encoded, 1000, device), reference["embeddings"])
        run["attention"] = varlen.kernel_name(device, dtype, alibi=True)
        figures[precision] = run
    return figures


def equivalence(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    with record.step("frames"):
        shards = prepared_reads(workdir, args.reads)
    proteins = [s.encode() for s in sequences(read_frames(shards["faa"], args.equivalence_frames))]
    nucleotides = [s.encode() for s in sequences(read_frames(shards["fna"], args.equivalence_frames))]
    rng = np.random.default_rng(1)
    nucleotides += [b"A", np.frombuffer(b"ACGT", dtype=np.uint8)[rng.integers(0, 4, 3000)].tobytes()]
    precisions = args.precisions.split(",")
    result["esm"] = {}
    for name, config in shapes["esm"].items():
        if args.esm_shapes and name not in args.esm_shapes.split(","):
            continue
        with record.step(f"ESM-2 {name}"):
            result["esm"][name] = esm_equivalence(config, proteins, device, args.budget, precisions)
    with record.step("DNABERT-S"):
        directory = demo_models.build_dnabert(workdir / "dnabert_s", TOKENIZER_GENOMES, 0, shapes["dnabert"])
        result["dnabert"] = dnabert_equivalence(directory, nucleotides, device, args.budget, precisions)
    with record.step("DNABERT-S fixture"):
        result["dnabert_fixture"] = fixture_equivalence(device, precisions)


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
        model, alphabet = esm.load(str(checkpoint), device=device)  # built on the device: no host copy
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


def model_alone(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    """The model alone on pre-packed batches of read-derived frames already on the device, a
    warm-up pass (kernel check, compile) left out, over a sweep of token budgets."""
    with record.step("frames"):
        shards = prepared_reads(workdir, args.reads)
        frames = {"esm": read_frames(shards["faa"], args.frames), "dnabert": read_frames(shards["fna"], args.frames)}
        tokenizer_dir = demo_models.build_dnabert(workdir / "dnabert_s", TOKENIZER_GENOMES, 0, shapes["dnabert"])
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    peak = peak_tflops(device)
    runs = [("esm", shapes["speed_esm"]), ("dnabert", shapes["dnabert"])]
    if args.compiled:  # the lever: torch.compile fusing the work around ESM-2's attention and GEMMs
        runs.insert(1, ("esm_compiled", shapes["speed_esm"]))
    for run, config in runs:
        model = run.removesuffix("_compiled")
        with record.step(f"{run}: model"):
            free(device)
            if model == "esm":
                embedder = esm_alone(config, device, dtype, compiled=run != model)
            else:
                embedder = dnabert_alone(config, tokenizer_dir, device, dtype)
            encoded = embedder.tokens([s.encode() for s in sequences(frames[model])])
            lengths = np.array([len(e) for e in encoded])
            result[run] = {"frames": len(encoded), "gflop_per_token": round(flop_per_token(model, config) / 1e9, 3)}
            result[run]["budgets"] = {}
        for budget in args.sweep:
            with record.step(f"{run}: budget {budget}"):
                batches = [
                    pack(rows, [encoded[i] for i in rows.tolist()], budget).tensors()
                    for rows in greedy_batches(lengths, budget)
                ]
                batches = [b._replace(tokens=b.tokens.to(device), cu_seqlens=b.cu_seqlens.to(device)) for b in batches]
                start = time.perf_counter()
                embedder(batches[0].tokens, batches[0].layout())  # warm-up: the kernel check, a compile
                sync(device)
                warm_up = time.perf_counter() - start
                free(device)
                start = time.perf_counter()
                for batch in batches:
                    embedder(batch.tokens, batch.layout())
                sync(device)
                seconds = time.perf_counter() - start
                rate = sum(b.n_tokens for b in batches) / seconds
                result[run]["budgets"][str(budget)] = {
                    "tokens_per_s": round(rate),
                    "warm_up_s": round(warm_up, 1),
                    "batches": len(batches),
                    "mfu": round(rate * flop_per_token(model, config) / (peak * 1e12), 3) if peak else None,
                    "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
                    if device.type == "cuda"
                    else None,
                    "attention": varlen.kernel_name(device, dtype, embedder.alibi),
                }
                del batches
        del embedder
        free(device)


# ---------------------------------------------------------------- out of memory


def out_of_memory(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    with record.step("frames and checkpoint"):
        shard = read_frames(prepared_reads(workdir, args.reads)["faa"], args.frames)
        config = shapes["oom_esm"]
        layers = config["encoder_layers"]
        checkpoint = esm_checkpoint(args.models, layers, config["encoder_embed_dim"], config["encoder_attention_heads"])
    settings = dict(model="esm", checkpoint=str(checkpoint), layer=layers, device=device.type, precision="fp16")
    settings |= {"token_budget": args.oom_budget, "num_workers": args.workers}
    with record.step("uncapped"):
        free(device)
        free_run, free_stats = production_embed(shard, workdir / "free.h5", **settings)
        result |= {"frames": len(free_run), "token_budget": args.oom_budget}
        result["uncapped"] = {"oom_splits": free_stats["oom_splits"]}
        result["uncapped"]["peak_memory_gib"] = round(free_stats["peak_memory_bytes"] / 2**30, 2)
    with record.step("capped"):
        capped_run(device, config, layers, shard, workdir, settings, free_run, free_stats, result)


def capped_run(device, config, layers, shard, workdir, settings, free_run, free_stats, result: dict) -> None:
    cap = None
    if device.type == "cuda":
        free(device)
        with torch.device("meta"):  # only counted
            shape = fair_esm.ESM2(layers, config["encoder_embed_dim"], config["encoder_attention_heads"])
        weights = sum(p.numel() for p in shape.parameters()) * 2  # float16
        # room for the weights and a quarter of the activations the uncapped batches needed
        cap = weights + (free_stats["peak_memory_bytes"] - weights) // 4
        torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(device).total_memory, device)
    try:
        capped, capped_stats = production_embed(shard, workdir / "capped.h5", **settings)
    finally:
        if device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, device)
    result["capped"] = {
        "cap_gib": round(cap / 2**30, 2) if cap else None,
        "oom_splits": capped_stats["oom_splits"],
        "peak_memory_gib": round(capped_stats["peak_memory_bytes"] / 2**30, 2),
        "tokens_per_s": capped_stats["tokens_per_s"],
        "all_frames": bool(np.isfinite(capped).all() and len(capped) == len(free_run)),
    }
    result["capped_against_uncapped"] = agreement(capped, free_run)


# ---------------------------------------------------------------- whole workflow


def workflow(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    with record.step("models and reads"):
        setup = workflow_setup(args, shapes, workdir)
    with record.step("snakemake"):
        kept = record.path.with_name(f"{record.path.stem}_logs") if record.path else workdir / "kept_logs"
        kept.mkdir(parents=True, exist_ok=True)
        cores = len(os.sched_getaffinity(0))
        options = ("--configfile", workdir / "config.yaml", "--cores", cores, "--resources", "gpu=1")
        try:
            run, _ = snakemake(workdir, *options, log=kept / "snakemake.log")
        except RuntimeError:
            if (workdir / "logs").is_dir():  # none when Snakemake stops before any job
                shutil.copytree(workdir / "logs", kept, dirs_exist_ok=True)
            raise
    summary = json.loads((workdir / "results" / "reads" / "run_summary.json").read_text())
    result |= {
        "reads": args.workflow_reads,
        "shards": len(summary["timings"]["score"]["shards"]),
        "setup_seconds": round(setup, 1),
        "seconds": run["seconds"],
        "reads_per_hour": round(args.workflow_reads / run["seconds"] * 3600),
        "counts": summary["counts"],
        "timings": summary["timings"],
        "embedding_shards": summary["embedding_shards"],
    }


def workflow_setup(args, shapes: dict, workdir: Path) -> float:
    """The models, reads and config (config.yaml) of the workflow part in `workdir`; the seconds they took."""
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
    write_reads(workdir / "reads.fa", args.workflow_reads, 500, seed=2)
    (workdir / "samples.tsv").write_text(f"sample\tpath\nreads\t{workdir / 'reads.fa'}\n")
    settings = {
        "samples": str(workdir / "samples.tsv"),
        "chunk_length": 500,
        "shard_tokens": args.shard_tokens,
        "models": {
            "esm": {"checkpoint": str(checkpoint), "layer": config["encoder_layers"]},
            "dnabert": {"checkpoint": str(directory)},
            "classifier": str(models / "classifier.pt"),
            "cache_dir": str(models / "cache"),
        },
        "embedding": {
            "precision": "fp16",
            "esm_token_budget": args.budget,
            "dnabert_token_budget": args.dnabert_budget,
        },
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(settings))
    return time.perf_counter() - start


PARTS = {"equivalence": equivalence, "model": model_alone, "speed": speed, "oom": out_of_memory, "workflow": workflow}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=tuple(PARTS), required=True)
    parser.add_argument("--out", type=Path, help="JSON file to write (the figures are printed too)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny model shapes (the CPU dry run)")
    parser.add_argument(
        "--models",
        type=Path,
        default=Path(tempfile.gettempdir()) / "gpu_check_models",
        help="where the random ESM-2 checkpoints are made once for all parts (3B-shaped: 5.7 GB, minutes to make)",
    )
    parser.add_argument("--reads", type=int, default=60_000, help="500 bp reads whose frames are embedded")
    parser.add_argument("--frames", type=int, default=20_000, help="frames for the embed job (speed, oom)")
    parser.add_argument("--equivalence-frames", type=int, default=200, help="read-derived frames for equivalence")
    parser.add_argument("--profile-frames", type=int, default=3000, help="frames of the profiled embed job")
    parser.add_argument("--compare-frames", type=int, default=5000, help="frames for fair-esm's FP16 batching")
    parser.add_argument("--virnucpro-frames", type=int, default=1000, help="frames for VirNucPro's settings")
    parser.add_argument("--esm-shapes", help="ESM-2 shapes for equivalence, e.g. 650M (default: all)")
    parser.add_argument("--precisions", default="fp16,bf16", help="half precisions for equivalence")
    parser.add_argument("--budget", type=int, default=65536, help="ESM-2 token budget")
    parser.add_argument("--dnabert-budget", type=int, default=65536, help="DNABERT-S token budget")
    parser.add_argument("--oom-budget", type=int, default=65536, help="token budget of the out-of-memory part")
    parser.add_argument("--workers", type=int, default=4, help="loader workers of the embed jobs")
    parser.add_argument(
        "--sweep", type=int, nargs="+", default=[16384, 32768, 65536, 131072], help="token budgets of the model part"
    )
    parser.add_argument("--compiled", action="store_true", help="model part: ESM-2 also with its layers compiled")
    parser.add_argument("--workflow-reads", type=int, default=100_000)
    parser.add_argument(
        "--shard-tokens", type=int, default=2_000_000, help="ESM-2 tokens per shard of the workflow's sample"
    )
    args = parser.parse_args()
    args.models.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    set_allocator_conf("expandable_segments:True")  # as the embed job sets it: before anything starts CUDA
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible")
    figures = header("gpu_check") | {"part": args.part, "tiny": args.tiny, **device_figures(device), args.part: {}}
    record = Record(args.out, figures)
    start = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as workdir:
            PARTS[args.part](args, shapes(args.tiny), Path(workdir), device, figures[args.part], record)
    except Exception:
        log.exception("step %r failed; the figures measured before it are in %s", figures.get("failed_step"), args.out)
        sys.exit(1)
    figures["part_seconds"] = round(time.perf_counter() - start, 1)
    record.save()
    print_figures(figures)


if __name__ == "__main__":
    main()
