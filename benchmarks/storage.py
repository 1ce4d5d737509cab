"""Embeddings on disk: bytes per frame and write/read seconds of each storage type and filter,
at the production width (DNABERT-S 768 + ESM-2 3B 2560 features), on synthetic embeddings.
Prints JSON.

    python benchmarks/storage.py [--frames 20000] [--dir DIR]

The embeddings are normal with a log-normal scale per feature (real embeddings have features of
very different magnitude), which no filter can compress by repetition: a fair lower bound on the
compression of real embeddings."""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from workflow_lib.harness.measure import header, print_figures, print_progress
from workflow_lib.io import h5store

WIDTHS = {"dnabert": 768, "esm": 2560}
FILTERS = {
    "none": {},
    "lzf": {"compression": "lzf", "shuffle": True},
    "gzip-1": {"compression": "gzip", "compression_opts": 1, "shuffle": True},
}


def synthetic(frames: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = rng.lognormal(-1.0, 1.0, dim).astype(np.float32)
    return rng.standard_normal((frames, dim), dtype=np.float32) * scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=20000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    attrs = dict.fromkeys(h5store.REQUIRED_ATTRS, "x")
    ids = [f"read_{i}_1F" for i in range(args.frames)]
    data = {name: synthetic(args.frames, dim, seed) for seed, (name, dim) in enumerate(WIDTHS.items())}
    result = header("storage") | {"frames": args.frames, "runs": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for storage in h5store.STORAGE:
            for name, layout in FILTERS.items():
                h5store.COMPRESSION = layout
                size = write_s = 0.0
                for model, values in data.items():
                    path = Path(tmp) / f"{model}.h5"
                    start = time.perf_counter()
                    h5store.write(path, ids, values, attrs, storage)
                    write_s += time.perf_counter() - start
                    size += path.stat().st_size
                start = time.perf_counter()
                with h5store.FeatureBlocks(Path(tmp) / "dnabert.h5", Path(tmp) / "esm.h5") as blocks:
                    for _ in blocks:
                        pass
                read_s = time.perf_counter() - start
                run = {"storage": storage, "filter": name, "bytes_per_frame": round(size / args.frames)}
                result["runs"].append(run | {"write_s": round(write_s, 2), "read_s": round(read_s, 2)})
                print_progress(result["runs"][-1])
    print_figures(result)


if __name__ == "__main__":
    main()
