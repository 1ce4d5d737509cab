"""Snakemake's own work with many samples: its process's CPU seconds (jobs left out) and the wall
time of whole runs of N samples of 5 reads each, as a user's run goes (the checkpoint: every sample
prepared, then the plan, then every shard's jobs), against the same jobs in a DAG known from the
start (the same run in two invocations: the samples prepared and planned, then, the plan in place,
the rest; their figures summed). Prints JSON.

--mode real runs the real workflow (tiny models, a random classifier, the local profile). --mode
swapped runs the real rules with each job's command swapped for one that only writes its outputs
(prepare an empty shard), in a copy of the workflow: Snakemake's scheduling of the very same DAG,
without the minutes the jobs themselves take; the output says which mode made it.

    python benchmarks/many_samples.py --workdir /tmp/many --mode real --samples 30 120 --no-compare
    python benchmarks/many_samples.py --workdir /tmp/many --mode real --samples 100
    python benchmarks/many_samples.py --workdir /tmp/many --mode swapped --samples 100 400 1000
    python benchmarks/many_samples.py --workdir /tmp/many --mode real --samples 30 --no-compare --append
    python benchmarks/many_samples.py --workdir /tmp/many --mode swapped --samples 30 300 1000 --no-compare --slurm

--slurm runs under the project's SLURM test bed (tests/slurm: one node of 6 CPUs; needs root on
Debian) with the shipped profiles/slurm, its SITE lines filled in, and counts the sbatch
submissions, by rule or group. --slurm-dry-run counts them without a cluster: the jobs that
`snakemake -n --profile profiles/slurm` shows before the plan (grouped jobs as groups), and the
pooled shards' jobs of the plan that the run made.
"""

import argparse
import contextlib
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
import yaml

from harness import measure
from harness.stages import GENOMES, ROOT, write_reads
from workflow_lib.models import classifier, demo_models
from workflow_lib.prepare.plan import read_plans

sys.path.insert(0, str(ROOT / "tests"))
from slurm_testbed import TEST_OPTIONS, shipped_profile, slurm_cluster  # noqa: E402

# One-layer models, so that runs of many samples take minutes: the figures are the workflow's, not the models'.
ESM = {**demo_models.ESM_CONFIG, "encoder_layers": 1, "encoder_embed_dim": 16, "encoder_attention_heads": 1}
DNABERT = {**demo_models.DNABERT_CONFIG, "num_hidden_layers": 1, "hidden_size": 24, "intermediate_size": 48}
# A job's command in swapped mode: its outputs written, empty (the shards table: one empty shard; JSON: {}).
SWAPPED = (
    '"for f in {output:q}; do case $f in */shards) mkdir -p $f;; '
    "*/shards.tsv) printf 'shard\\\\tframes\\\\ttokens\\\\n0\\\\t0\\\\t0\\\\n' > $f;; "
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
    for rules in (copy / "rules").glob("*.smk"):
        text = rules.read_text()
        for rule in re.split(r"\n(?=(?:rule|checkpoint) )", text):
            if rule.startswith(("checkpoint plan:", "rule check_models:")):  # read by input functions
                continue
            swapped = re.sub(r"(\n( +)shell:\n)(\2 +.*\n)+", rf"\1\2    {SWAPPED}\n", rule + "\n")
            text = text.replace(rule, swapped[:-1])
        rules.write_text(text)
    return copy


def snakemake(workflow: Path, run: Path, config: Path, *targets: str, cluster: dict | None = None) -> dict:
    """Its own CPU seconds, the wall seconds and the jobs of one invocation, as the profile runs it
    (the local profile, or under `cluster`, the environment of a SLURM test bed, the test bed's
    profile with profiles/slurm's job groups: then the sbatch submissions too)."""
    options = [*targets, "--configfile", config]
    if cluster is None:
        options += ["--profile", workflow / "profiles" / "local"]
    else:
        options += ["--profile", shipped_profile(run.parent / "profile"), "--verbose", *TEST_OPTIONS]
    figures, output = measure.snakemake(run, *options, workflow=workflow, env=cluster)
    if cluster is not None:
        # the plugin's job comment: rule_RULE_wildcards_..., or rule_GROUP_RULES for a group
        sbatch = re.findall(r"sbatch call: .*?--comment rule_(\w+?)(?:_wildcards_\S*)? ", output)
        figures["sbatch"] = len(sbatch)
        figures["sbatch_by_rule_or_group"] = dict(sorted(Counter(sbatch).items()))
    return figures


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


def run(
    workdir: Path,
    n: int,
    mode: str,
    compare: bool,
    reads: int = 5,
    append: bool = False,
    cluster: dict | None = None,
    dry_run: bool = False,
) -> dict:
    folder = workdir / f"{mode}_{n}x{reads}"
    folder.mkdir(parents=True, exist_ok=True)
    inputs = workdir / f"inputs_{reads}"
    inputs.mkdir(exist_ok=True)
    sheet(folder, inputs, n, reads)
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump({"samples": str(folder / "samples.tsv"), "models": models(workdir)}))
    workflow = ROOT if mode == "real" else swapped_workflow(folder)
    figures = {"samples": n}
    # --notemp: the prepare outputs that the second invocation's jobs read stay (temp when outputs.keep_embeddings
    # is false, they would go once the first invocation, with no job that reads them, ends)
    two_phases = [("results/plan/shards_0.tsv", "--notemp"), ()]
    runs = {"checkpoint": [()], "known_from_start": two_phases}
    for name, phases in list(runs.items())[: 2 if compare else 1]:
        run_dir = folder / name
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir()
        runs = [snakemake(workflow, run_dir, config, *targets, cluster=cluster) for targets in phases]
        figures[name] = {key: round(sum(r[key] for r in runs), 1) for key in ("own_cpu_s", "seconds", "jobs")}
        if cluster is not None:
            figures[name] |= {key: runs[0][key] for key in ("sbatch", "sbatch_by_rule_or_group")}
        figures[name]["jobs_by_rule"] = dict(sum((Counter(r["jobs_by_rule"]) for r in runs), Counter()))
    if dry_run:
        plans = folder / "checkpoint" / "results" / "plan"
        figures["slurm_dry_run"] = slurm_dry_run(workflow, folder, config, plans)
    if append:  # one more sample in the sheet of the finished run
        sheet(folder, inputs, n + 1, reads)
        figures["appended"] = snakemake(workflow, folder / "checkpoint", config, cluster=cluster)
        sheet(folder, inputs, n, reads)
    if compare:
        own = figures["checkpoint"]["own_cpu_s"] / figures["known_from_start"]["own_cpu_s"]
        figures["own_cpu_ratio"] = round(own, 2)
    figures["own_cpu_s_per_sample"] = round(figures["checkpoint"]["own_cpu_s"] / n, 3)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--mode", choices=("real", "swapped"), required=True)
    parser.add_argument("--samples", type=int, nargs="+", default=[100])
    parser.add_argument("--reads", type=int, default=5, help="reads of 500 bp a sample")
    parser.add_argument(
        "--no-compare", action="store_true", help="only the user's run, not the DAG known from the start"
    )
    parser.add_argument("--append", action="store_true", help="then one sample more in the finished run's sheet")
    parser.add_argument("--slurm", action="store_true", help="under the SLURM test bed (tests/slurm), as root")
    parser.add_argument(
        "--slurm-dry-run", action="store_true", help="and the SLURM submissions of profiles/slurm, from a dry run"
    )
    args = parser.parse_args()
    if args.slurm and not args.no_compare:
        parser.error("--slurm measures the user's run only: add --no-compare")
    swapped = ": the real rules, each job's command swapped for one writing its outputs"
    result = measure.header("many_samples") | {"mode": args.mode + ("" if args.mode == "real" else swapped), "runs": []}
    with contextlib.ExitStack() as stack:
        cluster = None
        if args.slurm:
            result["slurm"] = "the SLURM test bed: one node of 6 CPUs, profiles/slurm with its SITE lines filled in"
            args.workdir.mkdir(parents=True, exist_ok=True)
            cluster = stack.enter_context(slurm_cluster(Path(tempfile.mkdtemp(dir=args.workdir, prefix="bed_"))))
        for n in args.samples:
            figures = run(
                args.workdir, n, args.mode, not args.no_compare, args.reads, args.append, cluster, args.slurm_dry_run
            )
            result["runs"].append(figures)
            measure.print_progress(figures)
    measure.print_figures(result)


if __name__ == "__main__":
    main()
