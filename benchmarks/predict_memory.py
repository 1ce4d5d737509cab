"""Inputs for measuring the predict job's peak memory on one large shard at the production width
(DNABERT-S 768 + ESM-2 3B 2560 features): a prepare frames and sequences table of N frames, two
float32 embeddings files of normal values and a random classifier; then run scripts/predict.py
under /usr/bin/time -v.

    python benchmarks/predict_memory.py DIR [--frames 200000]
    /usr/bin/time -v python scripts/predict.py --prepared-frames DIR/frames.tsv.gz \\
        --prepared-sequences DIR/sequences.tsv.gz --dnabert DIR/dnabert.h5 --esm DIR/esm.h5 \\
        --classifier DIR/classifier.pt --frames DIR/out/frames.tsv --chunks DIR/out/chunks.tsv \\
        --scoring DIR/out/scoring.json --progress-seconds 600 --threads 2
"""

import argparse
from pathlib import Path

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from workflow_lib import h5store  # noqa: E402
from workflow_lib.models import classifier  # noqa: E402
from workflow_lib.tables import PREPARED_FRAMES, PREPARED_SEQUENCES, write_tsv  # noqa: E402

WIDTHS = {"dnabert": 768, "esm": 2560}
BLOCK = 65536


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path)
    parser.add_argument("--frames", type=int, default=200000)
    args = parser.parse_args()
    n, out = args.frames, args.dir
    out.mkdir(parents=True, exist_ok=True)
    reads = (n + 1) // 2  # two frames per read, one chunk each
    sequence = np.repeat(np.arange(reads), 2)[:n]
    frames = pd.DataFrame(
        {
            "frame_id": [f"read_{s}_chunk_1{'F' if i % 2 == 0 else 'R'}{1 + i % 3}" for i, s in enumerate(sequence)],
            "sequence_id": [f"read_{s}" for s in sequence],
            "chunk": 1,
            "chunk_start": 1,
            "chunk_end": 300,
            "frame": np.where(np.arange(n) % 2 == 0, 1, -1),
            "protein_length": 100,
            "shard": 0,
        }
    )[list(PREPARED_FRAMES)]
    write_tsv(frames, out / "frames.tsv.gz")
    counts = np.bincount(sequence, minlength=reads)
    sequences = pd.DataFrame(
        {
            "sequence_id": [f"read_{s}" for s in range(reads)],
            "length": 300,
            "n_chunks": 1,
            "n_frames": counts,
            "ambiguous_fraction": 0.0,
            "status": "ok",
        }
    )[list(PREPARED_SEQUENCES)]
    write_tsv(sequences, out / "sequences.tsv.gz")
    attrs = dict.fromkeys(h5store.REQUIRED_ATTRS, "x") | {"layer": 1, "checkpoint_sha256": "{}"}
    rng = np.random.default_rng(0)
    ids = frames["frame_id"].tolist()
    for model, dim in WIDTHS.items():
        with h5store.create(out / f"{model}.h5", ids, dim, "float32") as writer:
            for start in range(0, n, BLOCK):
                rows = np.arange(start, min(start + BLOCK, n))
                writer.write(rows, rng.standard_normal((rows.size, dim), dtype=np.float32))
            writer.attrs = attrs
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(sum(WIDTHS.values())).eval(), out / "classifier.pt")


if __name__ == "__main__":
    main()
