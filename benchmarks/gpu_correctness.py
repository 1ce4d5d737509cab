"""The GPU check's correctness parts (benchmarks/gpu_check.py runs them): `equivalence`, the packed
half-precision paths against FP32 references, and `oom`, the embed job under a memory cap against
the same job uncapped."""

import copy
import time
from pathlib import Path

import esm as fair_esm
import numpy as np
import torch
from embed_throughput import cosines, esm_checkpoint, free, production_embed, read_frames, sequences

from workflow_lib.embed.device_feed import DeviceFeed
from workflow_lib.embed.job import PRECISIONS
from workflow_lib.embed.packing import greedy_batches, pack
from workflow_lib.harness.stages import GENOMES, ROOT, prepared_reads
from workflow_lib.models import demo_models, dnabert, dnabert_loading, esm, varlen
from workflow_lib.models.tokens import ESMTokens


def feed_embeddings(embedder, encoded: list[np.ndarray], budget: int, device: torch.device) -> np.ndarray:
    """Embeddings of token arrays through the embed job's DeviceFeed (copy stream, pinned results)."""
    out = np.zeros((len(encoded), embedder.dim), dtype=np.float32)
    feed = DeviceFeed(embedder, device)
    lengths = np.array([len(e) for e in encoded])
    for rows in greedy_batches(lengths, budget):
        batch = pack(rows, [encoded[i] for i in rows.tolist()], budget).tensors(pin=feed.cuda)
        feed.submit(batch)
        for done, _, pooled in feed.ready():
            out[done] = pooled
    for done, _, pooled in feed.drain():
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
    model, tokens = dnabert_loading.load(str(directory))
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
    model, tokens = dnabert_loading.load(str(fixture))
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
    # DNABERT-S in both half precisions whatever ESM-2's: bf16 rounds its ALiBi bias more coarsely
    half = ("fp16", "bf16")
    result["esm"] = {}
    for name, config in shapes["esm"].items():
        if args.esm_shapes and name not in args.esm_shapes.split(","):
            continue
        with record.step(f"ESM-2 {name}"):
            result["esm"][name] = esm_equivalence(config, proteins, device, args.budget, precisions)
    with record.step("DNABERT-S"):
        genomes = sorted(GENOMES.glob("*.fasta"))
        directory = demo_models.build_dnabert(workdir / "dnabert_s", genomes, 0, shapes["dnabert"])
        result["dnabert"] = dnabert_equivalence(directory, nucleotides, device, args.budget, half)
    with record.step("DNABERT-S fixture"):
        result["dnabert_fixture"] = fixture_equivalence(device, half)


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
