"""Throughput of the embed job on frames of 500 bp reads sampled from the bundled genomes. Prints JSON.

(a) loader: the spawn DataLoader alone (read, tokenize, pack; no model), frames/s for ESM-2
    proteins and DNABERT-S nucleotides;
(b) esm: on the same random ESM-2 checkpoint and proteins, in one run: the production embed job
    (`embed_shard`: loader workers, pinned memory, copy stream, events), fair-esm's own batching
    (FastaBatchedDataset.get_batch_indices, its batch converter, padded forward) at the same
    token budget, and the largest difference between the two sets of embeddings;
(c) dnabert: the production embed job on DNABERT-S's architecture, tokens/s.

    python benchmarks/embed_throughput.py                      # CPU, a 6-layer 320-d ESM-2
    python benchmarks/gpu_check.py --part speed                # the GPU figures (see its docstring)
"""

import argparse
import gc
import tempfile
import time
from pathlib import Path

import esm as fair_esm
import h5py
import numpy as np
import torch

from workflow_lib.embed.loader import ShardBatches, ShardIndex, open_loader
from workflow_lib.harness.measure import header, print_figures
from workflow_lib.harness.stages import DEFAULTS, GENOMES, embed_into, embed_settings, prepared_reads
from workflow_lib.models import demo_models, dnabert_loading, esm, esm_loading
from workflow_lib.models.tokens import ESMTokens


def loader_rate(index: ShardIndex, encode, budget: int, workers: int) -> dict:
    """Frames/s of the loader alone; `steady` leaves out the workers' start-up (spawn, imports)."""
    start = time.perf_counter()
    prefetch = DEFAULTS["embedding"]["prefetch_factor"]
    with open_loader(ShardBatches(index, encode, budget), workers, prefetch) as batches:
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


def free(device: torch.device) -> None:
    """Release what the last step left on the device, and restart its peak memory count."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def read_frames(path: Path, n: int) -> Path:
    """The first n records of a shard FASTA (all of them where it holds fewer), as a shard of
    their own beside it."""
    lines = path.read_bytes().rstrip(b"\n").split(b"\n")[: 2 * n]
    subset = path.with_name(f"{path.stem}_{n}{path.suffix}")
    subset.write_bytes(b"\n".join(lines) + b"\n")
    return subset


def sequences(shard: Path) -> list[str]:
    return [s.decode() for s in shard.read_bytes().split(b"\n")[1::2]]


@torch.inference_mode()
def fair_esm_embed(model, alphabet, proteins: list[str], layer: int, budget: int, device) -> tuple[np.ndarray, float]:
    """VirNucPro's recipe (its units.extract_esm): fair-esm's batches (get_batch_indices), its batch
    converter without truncation, a padded forward, the mean of the first 1024 residues. Pooled on
    the device, copied back once at the end. Returns (embeddings, seconds)."""
    dataset = fair_esm.FastaBatchedDataset([str(i) for i in range(len(proteins))], proteins)
    convert = alphabet.get_batch_converter()
    out = torch.zeros(len(proteins), model.embed_dim, device=device)
    sync(device)
    start = time.perf_counter()
    for batch in dataset.get_batch_indices(budget, extra_toks_per_seq=1):
        _, _, tokens = convert([dataset[i] for i in batch])
        hidden = model(tokens.to(device, non_blocking=True), repr_layers=[layer])["representations"][layer]
        lengths = torch.tensor([min(len(proteins[i]), esm.POOLED_RESIDUES) for i in batch], device=device)
        positions = torch.arange(hidden.shape[1], device=device)
        keep = (positions[None] >= 1) & (positions[None] <= lengths[:, None])
        out[batch] = (hidden.float() * keep[..., None]).sum(1) / lengths[:, None]
    sync(device)
    return out.cpu().numpy(), time.perf_counter() - start


def production_embed(shard: Path, output: Path, **settings) -> tuple[np.ndarray, dict]:
    """The embed job itself (`embed_shard`), as the workflow runs it: (embeddings, its stats)."""
    stats = embed_into(shard, output, embed_settings(progress_seconds=600, **settings))
    with h5py.File(output) as h5:
        return h5["embeddings"][()], stats


def esm_checkpoint(directory: Path, layers: int, dim: int, heads: int) -> Path:
    """A random ESM-2 checkpoint of this shape in fair-esm's format (float16, as published), the one
    already in `directory` if there is one (written whole or not at all: 3B-shaped takes minutes)."""
    path = Path(directory) / f"esm2_t{layers}_{dim}x{heads}_random.pt"
    if path.exists():
        return path
    config = {
        "encoder_layers": layers,
        "encoder_embed_dim": dim,
        "encoder_attention_heads": heads,
        "token_dropout": True,
    }
    return demo_models.build_esm(path, 0, config, dtype=torch.float16)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def device_figures(device: torch.device) -> dict:
    """The device and torch that a figure was measured with."""
    found = {"device": str(device), "torch": torch.__version__}
    if device.type == "cuda":
        found["gpu"], found["cuda"] = torch.cuda.get_device_name(device), torch.version.cuda
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reads", type=int, default=100_000, help="500 bp reads for the loader figures")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--esm-proteins", type=int, default=3000, help="proteins for the forward figures")
    parser.add_argument("--dnabert-sequences", type=int, default=300, help="sequences for the DNABERT-S figure")
    parser.add_argument("--esm-arch", default="6,320,20", help="layers,dim,heads of the random ESM-2")
    parser.add_argument("--budget", type=int, default=16384, help="tokens per batch (toks_per_batch for fair-esm)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    result = header("embed_throughput") | device_figures(torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shards = prepared_reads(tmp, args.reads)
        proteins, nucleotides = ShardIndex.read(shards["faa"]), ShardIndex.read(shards["fna"])
        demo = demo_models.build_in(tmp / "models", sorted(GENOMES.glob("*.fasta")), seed=0)
        _, dna_tokens = dnabert_loading.load(str(demo["dnabert"]))
        alphabet = fair_esm.Alphabet.from_architecture("ESM-1b")
        result["loader"] = {
            "workers": args.workers,
            "esm": loader_rate(proteins, ESMTokens.of(alphabet), args.budget, args.workers),
            "dnabert": loader_rate(nucleotides, dna_tokens, args.budget, args.workers),
        }
        result["esm"] = esm_against_fair_esm(tmp, read_frames(proteins.path, args.esm_proteins), args)
        result["dnabert"] = dnabert_job(tmp, read_frames(nucleotides.path, args.dnabert_sequences), args)
    print_figures(result)


def esm_against_fair_esm(tmp: Path, subset: Path, args: argparse.Namespace) -> dict:
    """The same proteins through the embed job and fair-esm's own padded batches, one random model."""
    layers, dim, heads = map(int, args.esm_arch.split(","))
    checkpoint = esm_checkpoint(tmp / "models", layers, dim, heads)
    model, alphabet = esm_loading.load(str(checkpoint))
    model.float()
    ours_s, theirs_s = [], []
    for repeat in range(args.repeats):  # interleaved, best of each: this machine's speed drifts
        ours, stats = production_embed(
            subset, tmp / f"esm_{repeat}.h5", model="esm", checkpoint=str(checkpoint), device="cpu",
            token_budget=args.budget, num_workers=args.workers,
        )  # fmt: skip
        ours_s.append(stats["seconds"])
        theirs, seconds = fair_esm_embed(model, alphabet, sequences(subset), layers, args.budget, torch.device("cpu"))
        theirs_s.append(seconds)
    tokens = stats["n_tokens"]
    return {
        "arch": {"layers": layers, "dim": dim, "heads": heads},
        "proteins": args.esm_proteins,
        "tokens": tokens,
        "mean_tokens_per_protein": round(tokens / args.esm_proteins, 1),
        "attention": stats["attention"],
        "embed_job_tokens_per_s": round(tokens / min(ours_s)),
        "fair_esm_padded_tokens_per_s": round(tokens / min(theirs_s)),
        "embed_job_over_fair_esm": round(min(theirs_s) / min(ours_s), 2),
        "max_abs_diff_vs_fair_esm": float(np.abs(ours - theirs).max()),
        "loader_wait_s": stats["loader_wait_s"],
    }


def dnabert_job(tmp: Path, subset: Path, args: argparse.Namespace) -> dict:
    """The embed job with DNABERT-S's architecture (random weights)."""
    dna = demo_models.build_dnabert(
        tmp / "models" / "dnabert_s", [GENOMES / "lambda_NC_001416.fasta"], 0, demo_models.DNABERT_S
    )
    seconds = []
    for repeat in range(args.repeats):
        _, stats = production_embed(
            subset, tmp / f"dna_{repeat}.h5", model="dnabert", checkpoint=str(dna), device="cpu",
            token_budget=args.budget, num_workers=args.workers,
        )  # fmt: skip
        seconds.append(stats["seconds"])
    return {
        "sequences": args.dnabert_sequences,
        "tokens": stats["n_tokens"],
        "attention": stats["attention"],
        "embed_job_tokens_per_s": round(stats["n_tokens"] / min(seconds)),
    }


if __name__ == "__main__":
    main()
