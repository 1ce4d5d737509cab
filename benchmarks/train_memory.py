"""Peak memory and time of the train job on two samples (labelled virus and other) of --reads
500 bp reads each: prepared as the workflow prepares them, with synthetic embeddings of the
production width written by the project's writer (benchmarks/scale.py), then scripts/train.py with
the config's train settings but --epochs (no calibration written), as the only child of a fresh
process. Prints JSON; the classifier and metrics stay in --workdir, to compare runs of two checkouts.

    python benchmarks/train_memory.py --workdir /tmp/train_memory --reads 150000 --epochs 2
"""

import argparse
from pathlib import Path

from scale import SUFFIX, WIDTH, size_mb, synthetic_embeddings

from harness.measure import header, measured, print_figures
from harness.stages import DEFAULTS, ONE_SHARD, prepare_command, script_command, shard_fastas, write_reads
from workflow_lib.cli.settings import TrainSettings
from workflow_lib.io.sharding import ShardIndex


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True, help="inputs are made once and reused")
    parser.add_argument("--reads", type=int, default=150_000, help="per sample")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--storage", choices=("float32", "float16"), default=DEFAULTS["embedding"]["storage"])
    args = parser.parse_args()
    frames, embeddings, shards = 0, [], []
    for seed, label in enumerate(("virus", "other"), 1):
        sample = args.workdir / f"{label}_{args.reads}"
        files = {model: sample / f"{model}_{args.storage}.h5" for model in WIDTH}
        if not all(f.exists() for f in files.values()):
            sample.mkdir(parents=True, exist_ok=True)
            write_reads(sample / "reads.fa", args.reads, 500, seed=seed)
            measured(prepare_command(sample / "reads.fa", sample / "prepare", "--shard-tokens", ONE_SHARD))
            for model_seed, model in enumerate(WIDTH):
                shard = shard_fastas(sample / "prepare", SUFFIX[model])[0]
                synthetic_embeddings(shard, files[model], model, args.storage, 2 * seed + model_seed)
        rows = len(ShardIndex.read(shard_fastas(sample / "prepare", "faa")[0]))
        frames += rows
        embeddings += files.values()
        shards.append((label, sample / "prepare" / "frames.tsv.gz", 0, rows, files["dnabert"], files["esm"]))
    out = args.workdir / "out"
    out.mkdir(exist_ok=True)
    command = script_command(
        "train",
        TrainSettings,
        shard=shards,
        classifier=out / "classifier.pt",
        metrics=out / "metrics.json",
        epochs=args.epochs,
        threads=1,
    )
    result = header("train_memory") | {
        "frames": frames,
        "storage": args.storage,
        "embeddings_mb": size_mb(*embeddings),
        "features_mb_float32": round(frames * sum(WIDTH.values()) * 4 / 1e6, 1),
        "epochs": args.epochs,
        "train": measured(command),
    }
    print_figures(result)


if __name__ == "__main__":
    main()
