"""How float16 embeddings storage changes scores and calls, with the demo models: every bundled
genome through prepare (300 bp chunks) -> embed (float32) -> a classifier trained on them (phages
virus, the rest other) -> predict -> call, then predict -> call again from float16 copies of the
same embeddings. Prints JSON.

    python benchmarks/storage_scores.py [--workdir DIR]
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np

from workflow_lib.harness.measure import header, print_figures
from workflow_lib.harness.stages import (
    GENOMES,
    ONE_SHARD,
    call_into,
    embed_into,
    embed_settings,
    prepare_into,
    score_into,
    shard_fastas,
    train_settings,
)
from workflow_lib.io import h5store
from workflow_lib.io.tables import read_table
from workflow_lib.models import classifier
from workflow_lib.models.demo_models import build_in
from workflow_lib.training.train import load_examples, train

VIRUSES = ("phage", "lambda", "phiX174")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        root = Path(tmp)
        models = build_in(root / "models", [GENOMES / "lambda_NC_001416.fasta"], seed=0)
        samples = {}
        for genome in sorted(GENOMES.glob("*.fasta")):
            name = genome.stem
            prepare_into(genome, root / name / "prepare", ONE_SHARD, chunk_length=300)
            files = {}
            for model, suffix in (("dnabert", "fna"), ("esm", "faa")):
                settings = embed_settings(model, models[model], layer=2 if model == "esm" else None, storage="float32")
                path = root / name / f"{model}.h5"
                embed_into(shard_fastas(root / name / "prepare", suffix)[0], path, settings)
                ids, values, attrs = h5store.read(path)
                h5store.write(root / name / f"{model}_half.h5", ids, values, attrs, "float16")
                files[model] = path
            samples[name] = (genome, files)
        shards = [
            (
                "virus" if any(v in name for v in VIRUSES) else "other",
                (str(f["dnabert"]), str(f["esm"])),
                str(root / name / "prepare" / "frames.tsv.gz"),
                0,
                None,
            )
            for name, (_, f) in samples.items()
        ]
        model, *_ = train(load_examples(shards, 600), train_settings(progress_seconds=600))
        classifier.save(model.eval(), root / "classifier.pt")
        totals = {
            "frames": 0,
            "changed_frame_predictions": 0,
            "chunks": 0,
            "changed_chunk_calls": 0,
            "records": 0,
            "changed_record_calls": 0,
            "max_abs_score_change": 0.0,
        }
        for name, (genome, _) in samples.items():
            out = {}
            for kind, suffix in (("float32", ""), ("float16", "_half")):
                outdir = root / name / kind
                dna, esm = [str(root / name / f"{m}{suffix}.h5") for m in ("dnabert", "esm")]
                score_into(root / name / "prepare", [(dna, esm)], root / "classifier.pt", outdir)
                call_into(root / name / "prepare", genome, outdir)
                out[kind] = {t: read_table(outdir / f"{t}.tsv") for t in ("frames", "chunks", "sequences")}
            full, half = out["float32"], out["float16"]
            change = np.abs(full["frames"]["score_virus"].to_numpy() - half["frames"]["score_virus"].to_numpy())
            totals["frames"] += len(change)
            totals["max_abs_score_change"] = max(totals["max_abs_score_change"], float(change.max(initial=0)))
            totals["changed_frame_predictions"] += int(
                (full["frames"]["prediction"] != half["frames"]["prediction"]).sum()
            )
            totals["chunks"] += len(full["chunks"])
            totals["changed_chunk_calls"] += int((full["chunks"]["is_virus"] != half["chunks"]["is_virus"]).sum())
            totals["records"] += len(full["sequences"])
            totals["changed_record_calls"] += int((full["sequences"]["call"] != half["sequences"]["call"]).sum())
        print_figures(header("storage_scores") | totals)


if __name__ == "__main__":
    main()
