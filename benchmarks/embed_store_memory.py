"""Peak memory of the embed job's storage path alone at the ESM-2 3B width (2560), on N synthetic
rows arriving in batches out of order (shuffled within blocks of 8,192, as packing sorts by length):
`new` streams them through h5store's writer (flushed every 30,000 rows, as commits do), `old` holds
the whole [N, 2560] float32 array and writes it at the end, as embed did before.

    /usr/bin/time -v python benchmarks/embed_store_memory.py new DIR/e.h5 [--frames 200000]
"""

import argparse
from pathlib import Path

import h5py
import numpy as np

from workflow_lib.io import h5store

DIM, BLOCK, BATCH, FLUSH = 2560, 8192, 256, 30000


def batches(n: int, seed: int):
    rng = np.random.default_rng(seed)
    for start in range(0, n, BLOCK):
        rows = start + rng.permutation(min(BLOCK, n - start))
        for i in range(0, rows.size, BATCH):
            part = rows[i : i + BATCH]
            yield part, rng.standard_normal((part.size, DIM), dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", choices=("new", "old"))
    parser.add_argument("output", type=Path)
    parser.add_argument("--frames", type=int, default=200000)
    args = parser.parse_args()
    n, ids = args.frames, [f"read_{i}_1F1" for i in range(args.frames)]
    attrs = dict.fromkeys(h5store.REQUIRED_ATTRS, "x")
    if args.path == "new":
        with h5store.create(args.output, ids, DIM, "float32") as writer:
            held = 0
            for rows, values in batches(n, 0):
                writer.put(rows, values)
                held += rows.size
                if held >= FLUSH or writer.full():
                    writer.flush()
                    held = 0
            writer.attrs = attrs
    else:
        out = np.zeros((n, DIM), dtype=np.float32)
        for rows, values in batches(n, 0):
            out[rows] = values
        with h5py.File(args.output, "w") as handle:
            handle.create_dataset("ids", data=np.array(ids, dtype=object), dtype=h5py.string_dtype("utf-8"))
            handle.create_dataset("embeddings", data=out)


if __name__ == "__main__":
    main()
