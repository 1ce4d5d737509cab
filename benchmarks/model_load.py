"""Peak host memory and seconds of loading ESM-2 as the embed job does (`esm_loading.embedder`), in a fresh
process each: a seeded random checkpoint of a published shape in fair-esm's format (float16, as
published), loaded on the CPU in float32 and in a half dtype (bfloat16: what a GPU job in half
precision converts to, here without a GPU). Prints JSON.

    python benchmarks/model_load.py --workdir /tmp/load --shape 650M
    python benchmarks/model_load.py --workdir /tmp/load --shape 650M --root /tmp/before   # another checkout
    python benchmarks/model_load.py --workdir /tmp/load --shape 3B    # 5.7 GB file, about 12 GB to build it
"""

import argparse
import sys
import tempfile
from pathlib import Path

import torch

from workflow_lib.harness.measure import header, measured, print_figures, print_progress
from workflow_lib.harness.stages import ROOT
from workflow_lib.workflow import demo_models

# In the child: the seconds of loading alone (Python and torch imported), written to argv[4].
LOAD = (
    "import pathlib, sys, time, torch; sys.path.insert(0, sys.argv[1]); "
    "from workflow_lib.models import esm_loading; start = time.perf_counter(); "
    "e = esm_loading.embedder(sys.argv[2], None, None, torch.device('cpu'), getattr(torch, sys.argv[3])); "
    "pathlib.Path(sys.argv[4]).write_text(str(time.perf_counter() - start))"
)


def load(root: Path, checkpoint: Path, dtype: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        seconds = Path(tmp) / "seconds"
        usage = measured([sys.executable, "-c", LOAD, root, checkpoint, dtype, seconds])
        return {
            "seconds": round(float(seconds.read_text()), 1),
            "peak_rss_gb": round(usage["peak_rss_mb"] * 2**20 / 1e9, 2),
        }


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
    result = header("model_load") | {"shape": args.shape, "root": str(args.root)}
    result["checkpoint_gb"] = round(checkpoint.stat().st_size / 1e9, 2)
    for dtype in ("float32", "bfloat16"):
        result[dtype] = load(args.root, checkpoint, dtype)
        print_progress({dtype: result[dtype]})
    print_figures(result)


if __name__ == "__main__":
    main()
