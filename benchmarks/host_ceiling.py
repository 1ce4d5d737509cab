"""The host ceiling of the embed job: how fast its host side goes when the model costs nothing.

The production job (`embed_shard`: spawn loader workers reading, tokenising and packing the
shard; the main process converting batches, storing results, writing HDF5 and committing) runs
with a stand-in model: the real tokenizer and the production output width (ESM-2 3B 2560,
DNABERT-S 768), and no compute (it hands back a block of zeros). Frames of 500 bp reads sampled
from the bundled genomes, one shard per model; the rule's CPUs (3 threads) and loader workers (2).
DNABERT-S's workers read the tokens that its tokenize job made first, as in the workflow (that
job's own rate is reported apart, as `tokenize_job`).

Where the time goes: the main process's shares (waiting for the loader, tensors from the
loader's arrays, storing results, commits: HDF5 writes included), timed around those calls in
the same run; the workers' (reading, tokenising or reading tokens, packing), timed in a second pass over the same
shard in one process, as frames/s of one worker.

With --one-layer, also the same job with 1-layer models (real attention, little else): the
rate of the CPU path. Run it alone on a quiet machine (a busy one cut these rates by 4): prints JSON and
writes it to --out.

    python benchmarks/host_ceiling.py --out host.json --frames 60000 --one-layer
"""

import argparse
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import esm as fair_esm
import torch

from workflow_lib.cli.threads import use_threads
from workflow_lib.embed import job as embed
from workflow_lib.embed import loader, resume, rows
from workflow_lib.embed.loader import ShardBatches, ShardIndex
from workflow_lib.embed.packing import PackedBatch
from workflow_lib.embed.stored_tokens import StoredTokens
from workflow_lib.harness.measure import header, print_figures, print_progress
from workflow_lib.harness.stages import (
    GENOMES,
    READS_PER_FRAME,
    embed_into,
    embed_settings,
    prepared_reads,
    tokenize_into,
)
from workflow_lib.io import h5store
from workflow_lib.models import demo_models
from workflow_lib.models.tokens import DNABERTTokens, ESMTokens

WIDTH = {"esm": 2560, "dnabert": 768}  # the production models'
# --one-layer: models with real attention and almost no other compute
ONE_LAYER = {
    "esm": {**demo_models.ESM_CONFIG, "encoder_layers": 1, "encoder_embed_dim": 32, "encoder_attention_heads": 2},
    "dnabert": {**demo_models.DNABERT_CONFIG, "num_hidden_layers": 1, "hidden_size": 48, "intermediate_size": 96},
}
SUFFIX = {"esm": "faa", "dnabert": "fna"}


class FreeEmbedder:
    """The embedder interface with no model behind it: real tokens in, zeros of the right width out."""

    layer, pooling, alibi = -1, "stand-in: none", False

    def __init__(self, tokens, dim: int):
        self.tokens, self.dim = tokens, dim
        self.zeros = torch.zeros(1 << 16, dim)

    def __call__(self, tokens: torch.Tensor, layout) -> torch.Tensor:
        return self.zeros[: layout.n_seqs]


class Timers:
    """Seconds spent in wrapped functions, by name."""

    def __init__(self):
        self.seconds = defaultdict(float)

    def wrap(self, name: str, function):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start

        return timed

    @contextmanager
    def patched(self, targets: dict):
        """{name: (owner, attribute)}: each wrapped while the block runs."""
        saved = {name: getattr(owner, attribute) for name, (owner, attribute) in targets.items()}
        for name, (owner, attribute) in targets.items():
            setattr(owner, attribute, self.wrap(name, saved[name]))
        try:
            yield self
        finally:
            for name, (owner, attribute) in targets.items():
                setattr(owner, attribute, saved[name])


def tokenizers(models: dict) -> dict:
    """The real tokenizers: ESM-2's alphabet (fair-esm), the demo DNABERT-S's BPE tokenizer file."""
    return {
        "esm": ESMTokens.of(fair_esm.Alphabet.from_architecture("ESM-1b")),
        "dnabert": DNABERTTokens(Path(models["dnabert"]) / "tokenizer.json"),
    }


def job(
    model: str, shard: Path, checkpoint: Path, tokens, output: Path, threads: int, workers: int, stored=None
) -> dict:
    """The production job with the stand-in model (with the checkpoint's own model when `tokens`
    is None), reading the tokenize job's file `stored` if given; its figures and the main
    process's shares."""
    settings = embed_settings(model, checkpoint, num_workers=workers, progress_seconds=600)
    use_threads(threads)
    main = {
        "tensors (loader arrays to torch)": (PackedBatch, "tensors"),
        "check_finite": (rows, "check_finite"),
        "writer.put (into the write buffer)": (h5store.Writer, "put"),
        "writer.flush (HDF5 writes)": (h5store.Writer, "flush"),
        "commits.commit (the resume log)": (resume.Commits, "commit"),
    }
    original = embed.build_embedder
    if tokens is not None:
        embed.build_embedder = lambda settings, device, precision, digests=None: FreeEmbedder(tokens, WIDTH[model])
    try:
        with Timers().patched(main) as timers:
            stats = embed_into(shard, output, settings, stored)
    finally:
        embed.build_embedder = original
    seconds = stats["seconds"]
    shares = {name: round(s, 2) for name, s in timers.seconds.items()}
    shares["waiting for the loader"] = stats["loader_wait_s"]
    shares["the rest of the loop"] = round(seconds - sum(shares.values()), 2)
    return {
        # the job's own rate: from the end of its first batch, the loader's start-up (spawning workers) left out
        "tokens_per_s": stats["tokens_per_s"],
        "startup_s": stats.get("startup_s"),  # None from code before it was reported
        "whole_job_tokens_per_s": round(stats["n_tokens"] / seconds),
        "frames_per_s": round(ShardIndex.read(shard).ids.n / seconds),
        "frames": ShardIndex.read(shard).ids.n,
        "tokens": stats["n_tokens"],
        "seconds": seconds,
        "threads": threads,
        "loader_workers": stats["num_workers"],
        "fill": stats["fill"],
        "main_process_s": shares,
    }


def worker_shares(shard: Path, tokens, budget: int, stored=None) -> dict:
    """One worker's work on the whole shard, in this process: seconds and frames/s of each step
    (reading the tokenize job's file `stored` instead of tokenising, if given)."""
    loader.init_worker(0)  # one thread, as in a worker (the tokenizer would use every core here)
    index = ShardIndex.read(shard)
    if stored is not None:
        stored = StoredTokens(stored, index.blocks.size)
    steps = {
        "read": (loader.ShardBlocks, "read"),
        "pack (greedy_batches, pack)": (loader, "pack"),
        "greedy_batches": (loader, "greedy_batches"),
    }
    with Timers().patched(steps) as timers:
        timed_tokens = timers.wrap("tokenise", tokens)
        timed_stored = stored and timers.wrap("read the stored tokens", stored)
        start = time.perf_counter()
        for _ in ShardBatches(index, timed_tokens, budget, stored=timed_stored):
            pass
        total = time.perf_counter() - start
    timers.seconds["pack (greedy_batches, pack)"] += timers.seconds.pop("greedy_batches")
    frames = len(index)
    shares = {name: {"seconds": round(s, 2), "frames_per_s": round(frames / s)} for name, s in timers.seconds.items()}
    return {"one_worker_frames_per_s": round(frames / total), "seconds": round(total, 2), "steps": shares}


def tokenized(shard: Path, checkpoint: Path, output: Path) -> tuple[Path, dict]:
    """The tokenize job on the shard: its file and its rate."""
    start = time.perf_counter()
    n_tokens = tokenize_into(shard, checkpoint, output)
    seconds = time.perf_counter() - start
    return output, {"tokens": n_tokens, "seconds": round(seconds, 2), "tokens_per_s": round(n_tokens / seconds)}


def one_layer_model(model: str, folder: Path) -> Path:
    if model == "esm":
        return demo_models.build_esm(folder / "esm2_t1_small.pt", 0, ONE_LAYER["esm"])
    return demo_models.build_dnabert(
        folder / "dnabert_small", [GENOMES / "lambda_NC_001416.fasta"], 0, ONE_LAYER["dnabert"]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where the JSON goes")
    parser.add_argument("--frames", type=int, default=60_000, help="frames per shard (at least 50,000)")
    parser.add_argument("--threads", type=int, default=3, help="the rule's CPUs: embedding.num_workers + 1")
    parser.add_argument("--workers", type=int, default=2, help="loader workers (the rule's default)")
    parser.add_argument("--models", nargs="+", default=list(WIDTH), choices=list(WIDTH))
    parser.add_argument(
        "--one-layer", action="store_true", help="also the job with 1-layer models of real attention (ONE_LAYER)"
    )
    args = parser.parse_args()
    result = header("host_ceiling") | {"torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shards = prepared_reads(tmp, round(args.frames * READS_PER_FRAME))
        models = demo_models.build_in(tmp / "models", sorted(GENOMES.glob("*.fasta")), seed=0)
        encoders = tokenizers(models)
        for model in args.models:
            lines = shards[SUFFIX[model]].read_bytes().split(b"\n")
            if len(lines) // 2 < args.frames:
                raise SystemExit(f"the reads gave {len(lines) // 2} frames, fewer than {args.frames}")
            shard = tmp / f"{model}.{SUFFIX[model]}"
            shard.write_bytes(b"\n".join(lines[: 2 * args.frames]) + b"\n")
            figures, stored = {}, None
            if model == "dnabert":  # as the workflow runs it: tokenised by the tokenize job first
                stored, figures["tokenize_job"] = tokenized(shard, models[model], tmp / "tokens.h5")
            run = (tmp / f"{model}.h5", args.threads, args.workers, stored)
            figures |= job(model, shard, models[model], encoders[model], *run)
            budget = embed_settings(model, models[model]).token_budget
            figures["worker"] = worker_shares(shard, encoders[model], budget, stored)
            if args.one_layer:
                small = one_layer_model(model, tmp / "models")
                if stored is not None:  # its own tokenizer
                    stored, _ = tokenized(shard, small, tmp / "small_tokens.h5")
                figures["one_layer_model"] = job(model, shard, small, None, tmp / "small.h5", *run[1:3], stored)
                figures["one_layer_model"]["config"] = ONE_LAYER[model]
            result[model] = figures
            print_progress({model: figures})
    print_figures(result, args.out)


if __name__ == "__main__":
    main()
