"""Snakemake's own work with many samples: its process's CPU seconds (jobs left out) and the wall
time of whole runs of N samples of 5 reads each, as a user's run goes (the checkpoint: every sample
prepared, then the plan, then every shard's jobs). Prints JSON.

--mode real runs the real workflow (tiny models, a random classifier, the local profile). --mode
swapped runs the real rules with each job's command swapped for one that only writes its outputs
(prepare an empty shard), in a copy of the workflow: Snakemake's scheduling of the very same DAG,
without the minutes the jobs themselves take; the output says which mode made it.

    python benchmarks/many_samples.py --workdir /tmp/many --mode real --samples 30 120
    python benchmarks/many_samples.py --workdir /tmp/many --mode swapped --samples 30 300 1000 --slurm-dry-run

--slurm-dry-run counts the SLURM submissions of profiles/slurm: the jobs that `snakemake -n
--profile profiles/slurm` shows before the plan (grouped jobs as groups), and the pooled shards'
jobs of the plan that the run made.
"""

import argparse
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import yaml

from harness import measure
from harness.stages import GENOMES, ROOT, write_reads
from workflow_lib.io import sharding
from workflow_lib.models import classifier, demo_models
from workflow_lib.prepare.plan import read_plans

# One-layer models, so that runs of many samples take minutes: the figures are the workflow's, not the models'.
ESM = {**demo_models.ESM_CONFIG, "encoder_layers": 1, "encoder_embed_dim": 16, "encoder_attention_heads": 1}
DNABERT = {**demo_models.DNABERT_CONFIG, "num_hidden_layers": 1, "hidden_size": 24, "intermediate_size": 48}
# A job's command in swapped mode: its outputs written, empty (prepare's: one empty shard; JSON: {}).
SWAPPED = (
    '"for f in {output:q}; do case $f in */shards) mkdir -p $f;; '
    "*/shards.tsv) printf 'shard\\\\tframes\\\\ttokens\\\\n0\\\\t0\\\\t0\\\\n' > $f;; "
    "*/bins.npz) cp EMPTY_BINS $f;; "
    "*.json) mkdir -p $(dirname $f); echo {{}} > $f;; "
    '*) mkdir -p $(dirname $f); : > $f;; esac; done"'
)


def models(workdir: Path) -> dict:
    """The tiny models and a random classifier of their width, built once in `workdir`."""
    folder = workdir / "models"
    if not (folder / "classifier.pt").exists():
        demo_models.build_esm(folder / "esm2_t1_small.pt", 0, ESM)
        demo_models.build_dnabert(folder / "dnabert_small", sorted(GENOMES.glob("*.fasta"))[:1], 0, DNABERT)
        torch.manual_seed(0)
        width = DNABERT["hidden_size"] + ESM["encoder_embed_dim"]
        classifier.save(classifier.MLPClassifier(width).eval(), folder / "classifier.pt", chunk_length=500)
    return {
        "esm": {"checkpoint": str(folder / "esm2_t1_small.pt"), "layer": 1},
        "dnabert": {"checkpoint": str(folder / "dnabert_small")},
        "classifier": str(folder / "classifier.pt"),
        "cache_dir": str(folder / "cache"),
    }


def swapped_workflow(folder: Path) -> Path:
    """A copy of the workflow whose rules write their outputs and do nothing else (the plan and the
    model check are real: the input functions read them)."""
    copy = folder / "workflow"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".venv", ".git", "results", "logs", ".snakemake"))
    empty = dict.fromkeys(sharding.BIN_COUNTS, np.zeros((1, sharding.BINS), np.int64))
    sharding.write_bins(copy / "empty_bins.npz", empty, [np.zeros(0, np.int64)])
    command = SWAPPED.replace("EMPTY_BINS", str(copy / "empty_bins.npz"))
    for rules in (copy / "rules").glob("*.smk"):
        text = rules.read_text()
        for rule in re.split(r"\n(?=(?:rule|checkpoint) )", text):
            if rule.startswith(("checkpoint plan:", "rule check_models:")):  # read by input functions
                continue
            swapped = re.sub(r"(\n( +)shell:\n)(\2 +.*\n)+", rf"\1\2    {command}\n", rule + "\n")
            text = text.replace(rule, swapped[:-1])
        rules.write_text(text)
    return copy


def snakemake(workflow: Path, run: Path, config: Path) -> dict:
    """Its own CPU seconds, the wall seconds and the jobs of one invocation under the local profile."""
    options = ["--configfile", config, "--profile", workflow / "profiles" / "local"]
    return measure.snakemake(run, *options, workflow=workflow)[0]


def slurm_dry_run(workflow: Path, folder: Path, config: Path, plan_dir: Path) -> dict:
    """SLURM submissions of a run of the sheet under profiles/slurm: those before the plan from a
    dry run in an empty directory (a group job, or a job of a rule that is not local), and those of
    the pooled shards that `plan_dir`'s plans list (tokenize, 2 embed and score each, and
    pool_shard where a pooled shard holds several pieces)."""
    run = folder / "slurm_dry_run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    options = ("-n", "--configfile", config, "--profile", workflow / "profiles" / "slurm")
    _, output = measure.snakemake(run, *options, workflow=workflow)
    local = {
        name
        for smk in (workflow / "rules").glob("*.smk")
        for name, body in re.findall(r"^(?:rule|checkpoint) (\w+):\n((?:[ \n].*\n?)*)", smk.read_text(), re.M)
        if "localrule: True" in body
    } | {"all"}
    groups = re.findall(r"Group job (\w+) ", output)
    alone = [rule for rule in re.findall(r"^(?:rule|checkpoint) (\w+):$", output, re.M) if rule not in local]
    before = Counter(groups) + Counter(alone)
    per_pool = Counter()
    for pieces in read_plans(plan_dir)[1].values():
        per_pool.update(["tokenize", "embed", "embed", "score"] + ["pool_shard"] * (len(pieces) > 1))
    return {
        "submissions": before.total() + per_pool.total(),
        "before_plan": dict(sorted(before.items())),
        "pooled_shards": dict(sorted(per_pool.items())),
    }


def sheet(folder: Path, inputs: Path, n: int, reads: int) -> None:
    """The samples sheet of samples s0 ... s{n-1}, each of `reads` reads of 500 bp."""
    for i in range(n):
        if not (inputs / f"s{i}.fa").exists():
            write_reads(inputs / f"s{i}.fa", reads, 500, seed=i)
    (folder / "samples.tsv").write_text("sample\tpath\n" + "".join(f"s{i}\t{inputs}/s{i}.fa\n" for i in range(n)))


def run(workdir: Path, n: int, mode: str, reads: int = 5, dry_run: bool = False) -> dict:
    folder = workdir / f"{mode}_{n}x{reads}"
    folder.mkdir(parents=True, exist_ok=True)
    inputs = workdir / f"inputs_{reads}"
    inputs.mkdir(exist_ok=True)
    sheet(folder, inputs, n, reads)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump({"samples": str(folder / "samples.tsv"), "models": models(workdir)}))
    workflow = ROOT if mode == "real" else swapped_workflow(folder)
    run_dir = folder / "checkpoint"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    measured = snakemake(workflow, run_dir, config)
    figures = {"samples": n, "checkpoint": {key: round(measured[key], 1) for key in ("own_cpu_s", "seconds", "jobs")}}
    figures["checkpoint"]["jobs_by_rule"] = measured["jobs_by_rule"]
    if dry_run:
        figures["slurm_dry_run"] = slurm_dry_run(workflow, folder, config, run_dir / "results" / "plan")
    figures["own_cpu_s_per_sample"] = round(figures["checkpoint"]["own_cpu_s"] / n, 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--mode", choices=("real", "swapped"), required=True)
    parser.add_argument("--samples", type=int, nargs="+", default=[100])
    parser.add_argument("--reads", type=int, default=5, help="reads of 500 bp a sample")
    parser.add_argument(
        "--slurm-dry-run", action="store_true", help="and the SLURM submissions of profiles/slurm, from a dry run"
    )
    args = parser.parse_args()
    swapped = ": the real rules, each job's command swapped for one writing its outputs"
    result = measure.header("many_samples") | {"mode": args.mode + ("" if args.mode == "real" else swapped), "runs": []}
    for n in args.samples:
        figures = run(args.workdir, n, args.mode, args.reads, args.slurm_dry_run)
        result["runs"].append(figures)
        measure.print_progress(figures)
    measure.print_figures(result)


if __name__ == "__main__":
    main()
