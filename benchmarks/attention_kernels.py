"""DNABERT-S-shaped attention (12 heads of 64, ALiBi, fp16) through the kernels of
workflow_lib/models/varlen.py and the candidate against its padded path for DNABERT-S on a GPU,
FlexAttention (defined here: a document mask over the packed row and ALiBi as a score_mod, neither
ever materialised), each in a fresh process, so that its first call costs what it would cost an
embed job: FlexAttention's compile with an empty compile cache, then again with the cache that the
first process filled (TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR, as the embed rule sets them);
the other kernels' first launch. Then the steady milliseconds of a packed
batch (its layout made, then one call per layer, as a forward does), attention tokens/s, peak
memory and the lowest cosine against the float32 per-sequence reference. Rows are packed to the
token budget from sequences of random lengths in --lengths (500 bp reads: about 100-130 tokens).
Prints JSON.

    python benchmarks/attention_kernels.py --workdir /tmp/attention                # on a GPU
    python benchmarks/attention_kernels.py --workdir /tmp/attention --device cpu --tiny   # dry run, float32
"""

import argparse
import functools
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

FLEX_BLOCK = 128  # FlexAttention's block size: the packed row is padded to a multiple of it


def block_mask(layout: varlen.Layout):
    """FlexAttention's BlockMask of the row padded to FLEX_BLOCK: a token sees the tokens of its own
    sequence; the padding is a sequence of its own. Built from each block's first and last sequence
    (sequences are contiguous), with no T x T mask."""
    from torch.nn.attention.flex_attention import BlockMask

    # two blocks at least: dynamic shapes keep sizes of 1 static, so a one-block row would compile
    # the kernel a second time
    n_blocks = max(2, -(-layout.n_tokens // FLEX_BLOCK))
    padded = n_blocks * FLEX_BLOCK
    doc = F.pad(layout.seq, (0, padded - layout.n_tokens), value=layout.n_seqs)
    first, last = doc.view(n_blocks, FLEX_BLOCK)[:, 0], doc.view(n_blocks, FLEX_BLOCK)[:, -1]
    shares = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])  # [q block, kv block]
    single = first == last
    full = single[:, None] & single[None, :] & (first[:, None] == first[None, :])

    def ordered(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = dense.sum(-1, dtype=torch.int32)[None, None]
        indices = torch.argsort(dense.to(torch.int8), dim=-1, descending=True, stable=True)
        return counts, indices.to(torch.int32)[None, None]

    def same_sequence(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]

    return BlockMask.from_kv_blocks(
        *ordered(shares & ~full),
        *ordered(full),
        BLOCK_SIZE=FLEX_BLOCK,
        mask_mod=same_sequence,
        seq_lengths=(padded, padded),
        compute_q_blocks=False,  # the backward pass's index: forwards only here
    )


@functools.cache
def flex_kernel(device_type: str):
    """Compiled on CUDA (dynamic: one kernel for every row length); elsewhere eager (it
    materialises the scores: for the dry run only)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=True) if device_type == "cuda" else flex_attention


def flex(q, k, v, layout: varlen.Layout, slopes=None) -> torch.Tensor:
    """FlexAttention over the row padded to FLEX_BLOCK, [1, H, T', dh]."""
    mask = block_mask(layout)
    pad = mask.seq_lengths[0] - layout.n_tokens
    q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).transpose(0, 1)[None] for t in (q, k, v))
    score_mod = None
    if slopes is not None:

        def score_mod(score, b, h, q_idx, kv_idx):  # within one sequence |q_idx - kv_idx| is its own |i - j|
            return score - slopes[h] * (q_idx - kv_idx).abs()

    return flex_kernel(q.device.type)(q, k, v, score_mod=score_mod, block_mask=mask)[0].transpose(0, 1)[
        : layout.n_tokens
    ]


KERNELS = {
    varlen.PADDED: varlen.padded_attention,
    varlen.GROUPED: varlen.grouped_attention,
    "flex_attention": flex,
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
        for compile_cache in ("empty", "warm") if kernel == "flex_attention" else ("empty",):
            name = f"{kernel}, compile cache {compile_cache}" if kernel == "flex_attention" else kernel
            result[name] = run(args, kernel, cache)
            print_progress({name: result[name]})
    print_figures(result)


if __name__ == "__main__":
    main()
