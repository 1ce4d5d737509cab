"""Throughput of the embed job's parts on 500 bp reads sampled from the bundled genomes. Prints JSON.

(a) loader: the spawn DataLoader alone (read, tokenize, pack; no model), frames/s for ESM-2
    proteins and DNABERT-S nucleotides;
(b) esm: the packed ESM-2 forward against fair-esm's own padded batching (FastaBatchedDataset
    .get_batch_indices with toks_per_batch, its batch converter and forward, mean over residues)
    on the same randomly initialised model and proteins, in one run, with the largest difference
    between the two sets of embeddings;
(c) dnabert: the packed DNABERT-S forward, tokens/s.

    python benchmarks/embed_throughput.py                      # CPU, a 6-layer 320-d ESM-2
    python benchmarks/embed_throughput.py --device cuda --precision fp16 --esm-arch 36,2560,40 \\
        --esm-proteins 20000 --budget 65536 --peak-tflops 989  # ESM-2 3B on one H100
"""

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import esm as fair_esm
import numpy as np
import torch
from reads import GENOMES, write_reads

from workflow_lib import demo_models
from workflow_lib.embedding import PRECISIONS
from workflow_lib.loader import ShardBatches, ShardIndex, open_loader
from workflow_lib.models import dnabert, esm, varlen
from workflow_lib.prepare import Policy, prepare
from workflow_lib.tokens import MAX_RESIDUES, ESMTokens

# DNABERT-S's architecture (hidden 768, 12 layers, 12 heads, GLU 3072), random weights.
DNABERT_S = {**demo_models.DNABERT_CONFIG, "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12}


def loader_rate(index: ShardIndex, encode, budget: int, workers: int) -> dict:
    """Frames/s of the loader alone; `steady` leaves out the workers' start-up (spawn, imports)."""
    start = time.perf_counter()
    with open_loader(ShardBatches(index, encode, budget), workers) as batches:
        first = next(batches)
        started, frames, tokens, slots = time.perf_counter(), 0, first.n_tokens, first.slots
        for batch in batches:
            frames, tokens, slots = frames + len(batch.rows), tokens + batch.n_tokens, slots + batch.slots
    end = time.perf_counter()
    return {
        "frames": len(first.rows) + frames,
        "fill": round(tokens / slots, 4),
        "frames_per_s": round(frames / (end - started)),
        "frames_per_s_with_startup": round((len(first.rows) + frames) / (end - start)),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def packed_embed(embedder, index: ShardIndex, budget: int) -> tuple[np.ndarray, int]:
    out, tokens = np.zeros((len(index), embedder.dim), dtype=np.float32), 0
    for batch in ShardBatches(index, embedder.tokens, budget):
        batch = batch.tensors()
        moved = batch._replace(tokens=batch.tokens.to(embedder.device), cu_seqlens=batch.cu_seqlens.to(embedder.device))
        out[batch.rows.numpy()] = embedder(moved).cpu().numpy()
        tokens += batch.n_tokens
    return out, tokens


@torch.inference_mode()
def fair_esm_embed(model, alphabet, proteins: list[str], layer: int, budget: int, device) -> np.ndarray:
    """fair-esm's own recipe (its scripts/extract.py): batches by get_batch_indices, padded forward."""
    dataset = fair_esm.FastaBatchedDataset([str(i) for i in range(len(proteins))], proteins)
    convert = alphabet.get_batch_converter(truncation_seq_length=MAX_RESIDUES)
    out = np.zeros((len(proteins), model.embed_dim), dtype=np.float32)
    for batch in dataset.get_batch_indices(budget, extra_toks_per_seq=1):
        _, _, tokens = convert([dataset[i] for i in batch])
        hidden = model(tokens.to(device), repr_layers=[layer])["representations"][layer]
        for row, i in enumerate(batch):
            length = min(len(proteins[i]), MAX_RESIDUES)
            out[i] = hidden[row, 1 : length + 1].float().mean(0).cpu().numpy()
    return out


def timed(function, device, *args):
    sync(device)
    start = time.perf_counter()
    result = function(*args)
    sync(device)
    return time.perf_counter() - start, result


def peak(device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reads", type=int, default=100_000, help="500 bp reads for the loader figures")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--esm-proteins", type=int, default=3000, help="proteins for the forward figures")
    parser.add_argument("--dnabert-sequences", type=int, default=300, help="sequences for the DNABERT-S figure")
    parser.add_argument("--esm-arch", default="6,320,20", help="layers,dim,heads of the random ESM-2")
    parser.add_argument("--budget", type=int, default=16384, help="tokens per batch (toks_per_batch for fair-esm)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32")
    parser.add_argument("--peak-tflops", type=float, help="the device's dense peak, for model FLOPs utilisation")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    device, dtype = torch.device(args.device), PRECISIONS[args.precision]
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    layers, dim, heads = map(int, args.esm_arch.split(","))
    result = {"benchmark": "embed_throughput", "device": str(device), "precision": args.precision}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    result["machine"] = f"{platform.machine()}, {len(os.sched_getaffinity(0))} cpus, torch {torch.__version__}"

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_reads(tmp / "reads.fa", args.reads, 500, seed=1)
        prepare(tmp / "reads.fa", tmp / "prepared", 1, Policy(chunk_length=500))
        proteins, nucleotides = (ShardIndex.read(tmp / "prepared" / f"shard_0.{s}") for s in ("faa", "fna"))
        demo = demo_models.build(tmp / "models", sorted(GENOMES.glob("*.fasta")))
        _, dna_tokens = dnabert.load(str(demo["dnabert"]))
        alphabet = fair_esm.Alphabet.from_architecture("ESM-1b")
        result["loader"] = {
            "workers": args.workers,
            "esm": loader_rate(proteins, ESMTokens.of(alphabet), args.budget, args.workers),
            "dnabert": loader_rate(nucleotides, dna_tokens, args.budget, args.workers),
        }

        # (b) the same proteins and random model through both forwards
        subset = tmp / "subset.faa"
        head = proteins.path.read_bytes().split(b"\n")[: 2 * args.esm_proteins]
        subset.write_bytes(b"\n".join(head) + b"\n")
        index = ShardIndex.read(subset)
        sequences = [s.decode() for s in head[1::2]]
        torch.manual_seed(0)
        model = fair_esm.ESM2(layers, dim, heads, alphabet, token_dropout=True).eval()
        embedder = esm.ESMEmbedder(model, alphabet, layers, device, dtype)
        theirs_s, ours_s = [], []
        for _ in range(args.repeats):  # interleaved, best of each: this machine's speed drifts
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            seconds, (ours, tokens) = timed(packed_embed, device, embedder, index, args.budget)
            ours_s.append(seconds)
            our_peak = peak(device)
            seconds, theirs = timed(fair_esm_embed, device, model, alphabet, sequences, layers, args.budget, device)
            theirs_s.append(seconds)
        reference = theirs
        if dtype != torch.float32:  # fair-esm in fp32 as well, for the ratio and the cosine figure
            model32 = fair_esm.ESM2(layers, dim, heads, alphabet, token_dropout=True).eval()
            model32.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
            model32.to(device)
            seconds, reference = timed(
                fair_esm_embed, device, model32, alphabet, sequences, layers, args.budget, device
            )
            result_fp32 = {"fair_esm_fp32_tokens_per_s": round(tokens / seconds)}
        else:
            result_fp32 = {}
        cosine = (ours * reference).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1))
        best = min(ours_s)
        result["esm"] = {
            "arch": {"layers": layers, "dim": dim, "heads": heads},
            "proteins": len(sequences),
            "tokens": tokens,
            "mean_tokens_per_protein": round(tokens / len(sequences), 1),
            "attention": varlen.kernel_name(embedder.device, dtype, alibi=False),
            "packed_tokens_per_s": round(tokens / best),
            "fair_esm_padded_tokens_per_s": round(tokens / min(theirs_s)),
            "packed_over_fair_esm": round(min(theirs_s) / best, 2),
            **result_fp32,
            "max_abs_diff_vs_fair_esm": float(np.abs(ours - theirs).max()),
            "min_cosine_vs_fair_esm_fp32": float(cosine.min()),
            "peak_memory_bytes": our_peak,
        }
        if args.peak_tflops:
            flop_per_token = 24 * dim**2 * layers  # plus attention, small at these lengths
            result["esm"]["gflop_per_token"] = round(flop_per_token / 1e9, 2)
            result["esm"]["mfu"] = round(tokens / best * flop_per_token / (args.peak_tflops * 1e12), 3)

        # (c) DNABERT-S architecture, packed
        torch.manual_seed(0)
        dna_model = dnabert.DNABERT(DNABERT_S).eval()
        dna = dnabert.DNABERTEmbedder(dna_model, dna_tokens, device, dtype)
        subset = tmp / "subset.fna"
        subset.write_bytes(b"\n".join(nucleotides.path.read_bytes().split(b"\n")[: 2 * args.dnabert_sequences]) + b"\n")
        runs = [timed(packed_embed, device, dna, ShardIndex.read(subset), args.budget) for _ in range(args.repeats)]
        seconds, dna_total = min(r[0] for r in runs), runs[0][1][1]
        result["dnabert"] = {
            "sequences": args.dnabert_sequences,
            "tokens": dna_total,
            "attention": varlen.kernel_name(dna.device, dtype, alibi=True),
            "packed_tokens_per_s": round(dna_total / seconds),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
