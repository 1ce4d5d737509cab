"""Peak host memory and seconds of loading ESM-2 as the embed job does (`esm_loading.embedder`), in a fresh
process each: a seeded random checkpoint of a published shape in fair-esm's format (float16, as
published), loaded in float32 and in a half dtype (on the CPU bfloat16, what a GPU job in half
precision converts to; with --device cuda, on the GPU in float16), the half dtype both from the .pt
file and from the safetensors copy that the first such job writes (esm_loading.copy_path). Each
load with the page cache cold-ish (the files' pages dropped with posix_fadvise: the disk's own cache
may still hold them) and warm (the files read just before); `weights_read_s` adds one read of every
weight (a copy loaded on the CPU maps its file, read when first used). Prints JSON.

    python benchmarks/model_load.py --workdir /tmp/load --shape 650M
    python benchmarks/model_load.py --workdir /tmp/load --shape 650M --root /tmp/before   # another checkout
    python benchmarks/model_load.py --workdir /tmp/load --shape 3B    # 5.7 GB file, about 6 GB to build it
    python benchmarks/model_load.py --workdir /tmp/load --shape 3B --device cuda   # to the GPU, in fp16
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from workflow_lib.harness.measure import header, measured, print_figures, print_progress
from workflow_lib.harness.stages import ROOT
from workflow_lib.models import demo_models, esm_loading

SHAPES = {"tiny": demo_models.ESM_CONFIG, **demo_models.ESM2_SHAPES}
# In the child: the seconds of loading alone (Python and torch imported), then of loading and reading
# every weight once, written to argv[4]; argv[5] is the cache_dir ('' for none: no copy is read or
# written), argv[6] the device. On the CPU a copy's tensors map the file, read when first used; a
# load to a GPU reads them all.
LOAD = (
    "import json, pathlib, sys, time, torch; sys.path.insert(0, sys.argv[1]); "
    "from workflow_lib.models import esm_loading; device = torch.device(sys.argv[6]); "
    "sync = torch.cuda.synchronize if device.type == 'cuda' else lambda: None; start = time.perf_counter(); "
    "dtype, cache_dir = getattr(torch, sys.argv[3]), sys.argv[5] or None; "
    "e = esm_loading.embedder(sys.argv[2], cache_dir, None, device, dtype); sync(); loaded = time.perf_counter(); "
    "[p.sum() for p in e.model.parameters()]; sync(); "
    "pathlib.Path(sys.argv[4]).write_text(json.dumps([loaded - start, time.perf_counter() - start]))"
)


def load(root: Path, checkpoint: Path, dtype: str, device: str, cache_dir: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        seconds = Path(tmp) / "seconds"
        usage = measured([sys.executable, "-c", LOAD, root, checkpoint, dtype, seconds, cache_dir or "", device])
        loaded, read = json.loads(seconds.read_text())
        return {
            "seconds": round(loaded, 2),
            "weights_read_s": round(read, 2),
            "peak_rss_gb": round(usage["peak_rss_mb"] * 2**20 / 1e9, 2),
        }


def page_cache(files: list[Path], warm: bool) -> None:
    """Read `files` into the page cache, or drop their clean pages from it."""
    for path in files:
        with open(path, "rb") as handle:
            if warm:
                while handle.read(1 << 24):
                    pass
            else:
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def build(checkpoint: Path, shape: str) -> None:
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)  # built in the file's dtype: 5.7 GB of memory for 3B, not 17
    try:
        demo_models.build_esm(checkpoint, 0, SHAPES[shape], dtype=torch.float16)
    finally:
        torch.set_default_dtype(default)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True, help="where the checkpoint is made (kept)")
    parser.add_argument("--shape", choices=tuple(SHAPES), default="650M")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose loading code runs (to compare)")
    parser.add_argument("--device", default="cpu", help="where the weights go: cpu, or cuda (in fp16, not bf16)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = args.workdir / f"esm2_{args.shape}_random.pt"
    if not checkpoint.exists():
        build(checkpoint, args.shape)
    files = [checkpoint, esm_loading.regression_path(checkpoint)]
    cache = args.workdir / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    half = "float16" if args.device.startswith("cuda") else "bfloat16"  # a GPU job's default; on the CPU bf16
    result = header("model_load") | {"shape": args.shape, "root": str(args.root), "device": args.device}
    result["checkpoint_gb"] = round(checkpoint.stat().st_size / 1e9, 2)
    page_cache(files, warm=True)
    first = f"{half} first load, copy written"
    result[first] = load(args.root, checkpoint, half, args.device, cache)
    copy = esm_loading.copy_path(esm_loading.content_of(checkpoint, None), str(cache), getattr(torch, half))
    result["copy_gb"] = round(copy.stat().st_size / 1e9, 2) if copy.exists() else None
    print_progress({key: result[key] for key in (first, "copy_gb")})
    for name, dtype, cache_dir, read in (
        ("float32", "float32", None, files),
        (f"{half} from .pt", half, None, files),
        (f"{half} from copy", half, cache, [copy]),
    ):
        if cache_dir and not copy.exists():
            continue  # the checkout under --root makes no copy
        for warm in (False, True):
            page_cache(read, warm)
            case = f"{name}, {'warm' if warm else 'cold'}"
            result[case] = load(args.root, checkpoint, dtype, args.device, cache_dir)
            print_progress({case: result[case]})
    print_figures(result)


if __name__ == "__main__":
    main()
