"""DNABERT-S-shaped attention (12 heads of 64, ALiBi, fp16) through each kernel that
workflow_lib/models/varlen.py can run on a GPU, each in a fresh process, so that its first call
costs what it costs an embed job: FlexAttention's compile with an empty compile cache, then again
with the cache that the first process filled (TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR, as the
embed rule sets them); the other kernels' first launch. Then the steady milliseconds of a packed
batch (its layout made, then one call per layer, as a forward does), attention tokens/s, peak
memory and the lowest cosine against the float32 per-sequence reference. Rows are packed to the
token budget from sequences of random lengths in --lengths (500 bp reads: about 100-130 tokens).
Prints JSON.

    python benchmarks/attention_kernels.py --workdir /tmp/attention                # on a GPU
    python benchmarks/attention_kernels.py --workdir /tmp/attention --device cpu --tiny   # dry run, float32
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from embed_throughput import device_figures, sync

from workflow_lib.embed.packing import greedy_batches
from workflow_lib.harness.measure import header, print_figures, print_progress
from workflow_lib.models import dnabert, varlen

KERNELS = {
    "padded sdpa": varlen.padded_attention,
    "sdpa by sequence length": varlen.grouped_attention,
    "flex_attention": varlen._flex,
    "flash-attn varlen": varlen._flash,
}
SHAPE = ("workdir", "device", "budget", "lengths", "sequences", "heads", "head_dim", "layers")  # what a child is given


def rows(args, device) -> list[torch.Tensor]:
    """cu_seqlens of each packed row: random lengths, sorted and packed greedily as the embed job packs."""
    rng = np.random.default_rng(0)
    low, high = map(int, args.lengths.split("-"))
    lengths = np.sort(rng.integers(low, high + 1, args.sequences))
    return [
        F.pad(torch.from_numpy(lengths[batch]).cumsum(0), (1, 0)).to(device=device, dtype=torch.int32)
        for batch in greedy_batches(lengths, args.budget)
    ]


def layout_of(cu_seqlens: torch.Tensor) -> varlen.Layout:
    lengths = cu_seqlens.diff()
    return varlen.Layout(cu_seqlens, int(lengths.max()), int(cu_seqlens[-1]))


def child(args) -> dict:
    """One kernel in this process: its first call, then the steady batches."""
    device = torch.device(args.device)
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    kernel = KERNELS[args.kernel]
    slopes = torch.tensor(dnabert.alibi_slopes(args.heads), device=device)
    cu = rows(args, device)
    generator = torch.Generator(device).manual_seed(0)
    longest = max(int(c[-1]) for c in cu)
    q, k, v = torch.randn(3, longest, args.heads, args.head_dim, generator=generator, device=device)
    first = layout_of(cu[0])
    n = first.n_tokens
    expected = varlen.grouped_attention(q[:n], k[:n], v[:n], first, slopes)  # float32, per sequence
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    sync(device)
    start = time.perf_counter()
    got = kernel(q[:n], k[:n], v[:n], layout_of(cu[0]), slopes)
    sync(device)
    first_call = time.perf_counter() - start
    cosine = float(F.cosine_similarity(got.float(), expected, dim=-1).min())
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for c in cu:
        layout = layout_of(c)  # as a forward makes it, once for all its layers
        for _ in range(args.layers):
            kernel(q[: layout.n_tokens], k[: layout.n_tokens], v[: layout.n_tokens], layout, slopes)
    sync(device)
    seconds = time.perf_counter() - start
    return {
        "first_call_s": round(first_call, 3),
        "ms_per_batch": round(seconds / len(cu) * 1e3, 3),
        "attention_tokens_per_s": round(sum(int(c[-1]) for c in cu) / seconds),
        "batches": len(cu),
        "min_cosine": round(cosine, 7),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 3) if device.type == "cuda" else None,
    }


def run(args, kernel: str, cache: Path) -> dict:
    """`kernel` in a fresh process, with `cache` as its compile cache: its figures, or its error's last line."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"), "TRITON_CACHE_DIR": str(cache / "triton")}
    options = [f"--{key.replace('_', '-')}={getattr(args, key)}" for key in SHAPE]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, __file__, *options, f"--kernel={kernel}"], capture_output=True, text=True, env=env
    )
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]}
    return json.loads(done.stdout) | {"process_s": round(time.perf_counter() - start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True, help="the compile cache goes here (emptied first)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a tiny shape (the CPU dry run)")
    parser.add_argument("--budget", type=int, default=65536, help="tokens per packed row")
    parser.add_argument("--lengths", default="100-130", help="sequence lengths in tokens, low-high")
    parser.add_argument("--sequences", type=int, default=20_000)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=12, help="attention calls per batch")
    parser.add_argument("--kernel", choices=tuple(KERNELS), help=argparse.SUPPRESS)  # in the child
    args = parser.parse_args()
    if args.tiny:
        args.budget, args.lengths, args.sequences, args.head_dim, args.layers = 300, "5-40", 60, 4, 2
    if args.kernel:
        print(json.dumps(child(args)))
        return
    device = torch.device(args.device)
    result = header("attention_kernels") | device_figures(device) | {key: getattr(args, key) for key in SHAPE[2:]}
    cache = args.workdir / "compile_cache"
    shutil.rmtree(cache, ignore_errors=True)
    for kernel in KERNELS:
        if kernel == "flash-attn varlen" and not varlen._importable("flash_attn"):
            result[kernel] = {"error": "flash_attn is not installed"}
            continue
        for compile_cache in ("empty", "warm") if kernel == "flex_attention" else ("empty",):
            name = f"{kernel}, compile cache {compile_cache}" if kernel == "flex_attention" else kernel
            result[name] = run(args, kernel, cache)
            print_progress({name: result[name]})
    print_figures(result)


if __name__ == "__main__":
    main()
