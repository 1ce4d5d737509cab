"""The GPU check: the embed job's CUDA paths proven and timed on a GPU, one part per command, each
writing one JSON of figures. On the GPU machine (no network; fair-esm, snakemake and biopython
come as wheels from benchmarks/gpu_wheels.py), from the repository root, a GPU session's one
command is docs/gpu-check.md's (`--part all`, tested as a CPU dry run by tests/test_gpu_check.py).

`--part all` runs the model part with its levers (compiled), the workflow part, the attention
part and the equivalence part, in that order, each into its own JSON beside --out and all into
all.json (which says of each part done, failed, cut or skipped), written after every step.
--deadline-seconds, from the process's start, ends it within 15 s: each part may take its share
of the time left (ALL), and a SIGALRM at the part's deadline stops the step it finds (Deadline).

Parts:
  equivalence  ESM-2 packed in FP16 and BF16 (rotary in the model's dtype and in float32) against
               fair-esm's own FP32 forward per sequence, on 650M- and 3B-shaped random models, with
               read-derived and edge proteins (1 residue, 1022 and 1100 residues, <mask>, X/B/Z/U/O);
               DNABERT-S's shape likewise against its own FP32 per-sequence forward; the shipped
               tiny DNABERT-S fixture against the public code's vectors; the attention kernels used.
  model        the models alone (ESM-2 3B and DNABERT-S shapes, random weights made on the device, FP16)
               on pre-packed batches of read-derived frames already on the device, a warm-up pass
               left out, over a sweep of token budgets (16k to 131k): tokens/s, model FLOPs
               utilisation, peak memory. With --levers, ESM-2's levers (esm.LEVERS) and FP8, each
               timed on the 3B shape and its cosine against FP32 at the 650M and 3B shapes.
  speed        on the same frames of 500 bp reads: the production embed job (ESM-2 3B shape, layer
               36, FP16) with tokens/s, model FLOPs utilisation, peak memory, loader wait share and
               GPU busy share (profiler trace); fair-esm's own batching in FP16 and VirNucPro's
               settings (FP32, toks_per_batch 2048) on a subset, as ratios; DNABERT-S tokens/s.
  oom          the embed job under a memory cap (set_per_process_memory_fraction) that makes its
               batches run out of memory, against the same job uncapped.
  workflow     `snakemake --cores N --resources gpu=1 gpu_mem_mb=M` over 500 bp reads with 3B- and
               DNABERT-S-shaped random checkpoints built on the spot, run after run on one model
               cache: --cold-reads with every cache empty, then each of --workflow-reads on the
               caches it left (a second run of the same models), the first also with a whole GPU
               per embed job: per run reads per hour, the model check's seconds, each embed job's
               start-up, load and rate, the embed jobs' span and the GPU's SM busy share over it
               (nvidia-smi, every second).
  attention    DNABERT-S-shaped attention through each kernel (benchmarks/attention_kernels.py).

The correctness parts (equivalence, oom) are in benchmarks/gpu_correctness.py, the speed parts
(model, speed, workflow) in benchmarks/gpu_speed.py.

Each part rewrites its JSON after every step (`step_seconds`), so one cut off by a time limit keeps
what it measured; a failing step is named in it (`failed_step`, `error`) and the part exits 1.
`--device cpu --tiny` runs the same code on tiny shapes (tests/test_gpu_check.py), so it cannot rot.
Random weights: the figures measure kernels, numerics of the shapes and speed, not biology.
"""

import argparse
import contextlib
import json
import logging
import math
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch
from embed_throughput import device_figures
from gpu_correctness import equivalence, out_of_memory
from gpu_speed import LEVER_PLANS, model_alone, speed, workflow

from workflow_lib.embed.job import set_allocator_conf
from workflow_lib.harness.measure import header, print_figures
from workflow_lib.models import demo_models

TINY_ESM = {
    "t2": {"encoder_layers": 2, "encoder_embed_dim": 64, "encoder_attention_heads": 4, "token_dropout": True},
    "t3": {"encoder_layers": 3, "encoder_embed_dim": 96, "encoder_attention_heads": 6, "token_dropout": True},
}
log = logging.getLogger("workflow")


def attention(args, shapes: dict, workdir: Path, device, result: dict, record) -> None:
    """DNABERT-S-shaped attention through each kernel, first call and steady (attention_kernels.py)."""
    with record.step("attention kernels"):
        command = [sys.executable, Path(__file__).with_name("attention_kernels.py"), "--workdir", workdir / "attention"]
        command += ["--device", device.type, "--sequences", args.frames, "--budget", args.dnabert_budget]
        command += ["--tiny"] if args.tiny else []
        done = subprocess.run(list(map(str, command)), capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"attention_kernels.py failed: {done.stderr.strip().splitlines()[-1:]}")
        result |= json.loads(done.stdout[done.stdout.index("{") :])


PARTS = {
    "equivalence": equivalence,
    "model": model_alone,
    "speed": speed,
    "oom": out_of_memory,
    "workflow": workflow,
    "attention": attention,
}
# --part all: a GPU session's parts in one command, most decisive first (the levers decide the
# default forward; the workflow's runs give the end-to-end goals), each writing a JSON of its own
# beside --out and its figures into all.json too. Each part may take its share of the time left
# when it starts (the last, all of it), so that a slow part leaves the next its turn; within a part
# the steps come most decisive first, and the deadline cuts the rest.
# The model part's layers compiled where the embed job compiles them (CUDA).
ALL = (
    ("model", 0.45, {"levers": True, "compiled": "cuda"}),
    ("workflow", 0.7, {}),
    ("attention", 0.3, {}),
    ("equivalence", 1.0, {}),
)


class Deadline(BaseException):
    """The time given ran out. A BaseException, as KeyboardInterrupt: no `except Exception` on the
    way (a kernel's fallback, a compile's) takes it for a failure of its own and carries on."""


def _raise_deadline(signum, frame):
    raise Deadline("the deadline")


def arm(deadline: float) -> None:
    """SIGALRM at `deadline` (time.time()'s clock) raises Deadline wherever the main thread is:
    between two steps or inside one (a forward, a compile, a workflow run, which is then stopped)."""
    signal.signal(signal.SIGALRM, _raise_deadline)
    signal.setitimer(signal.ITIMER_REAL, max(deadline - time.time(), 0.001))


def disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


class Record:
    """The part's figures, written to `path` (atomically: a temporary file renamed) after every
    step, and `parent` (all.json's record) with them, so that a part cut off at any moment leaves
    a JSON holding all it measured. A step that fails is named in the JSON (`failed_step`, `error`)
    and the part exits non-zero; one that the deadline cut, or that starts after it, is named in
    `cut_by_deadline` and ends the part."""

    def __init__(self, path: Path | None, figures: dict, deadline: float = math.inf, parent: "Record | None" = None):
        self.path, self.figures, self.deadline, self.parent = path, figures, deadline, parent
        self.save()

    def seconds_left(self) -> float:
        return self.deadline - time.time()

    def save(self) -> None:
        if self.path:
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text(json.dumps(self.figures, indent=2) + "\n")
            tmp.replace(self.path)
        if self.parent:
            self.parent.save()

    @contextlib.contextmanager
    def step(self, name: str):
        if self.seconds_left() <= 0:
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
    parser.add_argument(
        "--levers",
        action="store_true",
        help="model part: ESM-2's levers and FP8, each timed at --budget (compiled with --compiled), and their cosine "
        "against FP32 at the 650M and 3B shapes",
    )
    parser.add_argument("--lever-frames", type=int, default=200, help="frames of the levers' cosine against FP32")
    parser.add_argument(
        "--workflow-reads", type=int, nargs="+", default=[100_000], help="reads of the workflow's warm runs"
    )
    parser.add_argument(
        "--cold-reads", type=int, default=10_000, help="reads of the workflow's first run, on empty caches (0: none)"
    )
    parser.add_argument(
        "--deadline-seconds",
        type=float,
        help="of the whole command, from its start: it ends within 15 s of it, each part (with --part all) "
        "given its share of the time, the steps it leaves named in cut_by_deadline",
    )
    parser.add_argument(
        "--lever-runs",
        nargs="+",
        choices=list(LEVER_PLANS),
        metavar="RUN",
        help="model part, --levers: the lever runs to make, in this order (default: all, most decisive first)",
    )
    parser.add_argument(
        "--shard-tokens", type=int, default=2_000_000, help="ESM-2 tokens per shard of the workflow's sample"
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
        if time.time() >= deadline:
            summary.figures["parts"][part] = "skipped: the deadline"
            continue
        out = args.out.with_name(f"{part}.json") if args.out else None
        overrides = {key: value == device.type if value == "cuda" else value for key, value in overrides.items()}
        ends = min(deadline, time.time() + share * (deadline - time.time()))
        try:
            status = run_part(argparse.Namespace(**vars(args) | overrides), part, out, device, ends, summary)
        except Deadline:  # fired while the part was ending (its failure being logged)
            status = "cut: the deadline"
        summary.figures["parts"][part] = status
        summary.save()
    print_figures(summary.figures)
    sys.exit(int("failed" in summary.figures["parts"].values()))


def allocator_settings(device) -> str | None:
    """The CUDA allocator's settings in force (expandable segments: set by PYTORCH_ALLOC_CONF after
    torch's import, as the embed job sets it; read when CUDA first allocates)."""
    if device.type != "cuda":
        return None
    torch.empty(1, device=device)
    return str(torch.cuda.memory._snapshot().get("allocator_settings"))


def run_part(args, part: str, out: Path | None, device, deadline: float, summary: Record | None = None) -> str:
    """One part, its figures in `out` (and in all.json's `summary`): "done", "failed" when a step
    failed (named in the JSON), or "cut: the deadline"."""
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
