"""Peak host memory and seconds of loading ESM-2 as the embed job does (`esm_loading.embedder`), in a fresh
process each: a seeded random checkpoint of a published shape in fair-esm's format (float16, as
published), loaded on the CPU in float32 and in a half dtype (bfloat16: what a GPU job in half
precision converts to, here without a GPU). Prints JSON.

    python benchmarks/model_load.py --workdir /tmp/load --shape 650M
    python benchmarks/model_load.py --workdir /tmp/load --shape 650M --root /tmp/before   # another checkout
    python benchmarks/model_load.py --workdir /tmp/load --shape 3B    # 5.7 GB file, about 12 GB to build it
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from workflow_lib.workflow import demo_models

ROOT = Path(__file__).resolve().parents[1]
# The peak is VmHWM, the process's own: ru_maxrss keeps, across exec, the high-water mark of the
# forked parent (here, 17 GB when this process has just built a 3B-shaped checkpoint).
LOAD = (
    "import re, sys, time, torch; sys.path.insert(0, sys.argv[1]); "
    "from workflow_lib.models import esm_loading; start = time.perf_counter(); "
    "e = esm_loading.embedder(sys.argv[2], None, None, torch.device('cpu'), getattr(torch, sys.argv[3])); "
    "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
    "print(time.perf_counter() - start, hwm)"
)


def load(root: Path, checkpoint: Path, dtype: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", LOAD, str(root), str(checkpoint), dtype], capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(out.stderr[-3000:])
    seconds, kib = out.stdout.split()
    return {"seconds": round(float(seconds), 1), "peak_rss_gb": round(int(kib) * 1024 / 1e9, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True, help="where the checkpoint is made (kept)")
    parser.add_argument("--shape", choices=tuple(demo_models.ESM2_SHAPES), default="650M")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose loading code runs (to compare)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = args.workdir / f"esm2_{args.shape}_random.pt"
    if not checkpoint.exists():
        demo_models.build_esm(checkpoint, 0, demo_models.ESM2_SHAPES[args.shape], dtype=torch.float16)
    result = {
        "benchmark": "model_load",
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} cpus",
        "date": time.strftime("%Y-%m-%d"),
        "shape": args.shape,
        "root": str(args.root),
        "checkpoint_gb": round(checkpoint.stat().st_size / 1e9, 2),
    }
    for dtype in ("float32", "bfloat16"):
        result[dtype] = load(args.root, checkpoint, dtype)
        print(json.dumps({dtype: result[dtype]}), file=sys.stderr, flush=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
