"""Seconds of the run's model check (scripts/check_models.py, as the check_models rule runs it) on a
seeded random ESM-2 checkpoint of a published shape: the first run, which hashes the checkpoint, a
second run, which finds its SHA-256 in the store that the first kept (models.cache_dir/checksums.json),
and a run after the file's modification time changed, which hashes it again; then the same three
for the checksums alone, in this process (the job's seconds are mostly Python and torch starting).
Prints JSON.

    python benchmarks/model_check.py --workdir /tmp/load --shape 3B    # 5.7 GB file, as model_load.py makes it
    python benchmarks/model_check.py --workdir /tmp/load --shape 650M

The page cache is as the first run leaves it: the hash reads the file, from the disk or the cache.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from workflow_lib.harness.measure import header, measured, print_figures, print_progress
from workflow_lib.harness.stages import ROOT
from workflow_lib.io.checksums import describe_kept
from workflow_lib.models import demo_models

DNABERT = ROOT / "tests" / "data" / "dnabert_s_tiny"


def check(checkpoint: Path, layers: int, cache_dir: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            *(sys.executable, ROOT / "scripts" / "check_models.py", "--model-check", Path(tmp) / "check.json"),
            *("--embedder", "dnabert", "dnabert_s", DNABERT, "last", "--embedder", "esm", "esm2", checkpoint, layers),
            *("--cache-dir", cache_dir, "--chunk-length", 500),
        ]
        return measured(list(map(str, command)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True, help="where the checkpoint is made (kept)")
    parser.add_argument("--shape", choices=tuple(demo_models.ESM2_SHAPES), default="650M")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    checkpoint = args.workdir / f"esm2_{args.shape}_random.pt"
    if not checkpoint.exists():
        demo_models.build_esm(checkpoint, 0, demo_models.ESM2_SHAPES[args.shape], dtype=torch.float16)
    layers = demo_models.ESM2_SHAPES[args.shape]["encoder_layers"]
    result = header("model_check") | {"shape": args.shape, "checkpoint_gb": round(checkpoint.stat().st_size / 1e9, 2)}
    runs = ("first_run", "second_run", "after_touch")
    with tempfile.TemporaryDirectory() as cache_dir:
        for run in runs:
            if run == "after_touch":
                os.utime(checkpoint)
            result[run] = check(checkpoint, layers, Path(cache_dir))
            print_progress({run: result[run]})
    with tempfile.TemporaryDirectory() as cache_dir:
        result["checksums_seconds"] = {}
        for run in runs:
            if run == "after_touch":
                os.utime(checkpoint)
            start = time.perf_counter()
            describe_kept([checkpoint], Path(cache_dir) / "checksums.json")
            result["checksums_seconds"][run] = round(time.perf_counter() - start, 4)
    print_figures(result)


if __name__ == "__main__":
    main()
