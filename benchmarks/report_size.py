"""Size of the report (`snakemake --report`) of one sample of --reads reads of 500 bp, made by the
real workflow. Prints JSON.

The demo config (config/demo.yaml: tiny demo models, a classifier trained on the labelled bundled
genomes) in --workdir, in two runs of Snakemake (local profile, 2 cores): the `train` target on the
demo sheet's labelled samples (their embed jobs run for real); then a sheet of the one sample of
reads, which goes through prepare and the model check; its embed jobs are not run (10^6 frames
take about 45 min a model on a CPU even with the tiny models): their outputs, embeddings of the
models' widths (synthetic_embeddings, h5store's writer) and figures files, and their Snakemake
benchmark files are written here instead; a dry run checks that Snakemake takes them as done
(they are newer than their inputs; Snakemake only notes their missing metadata). Then the whole
workflow (predict, call, summarize, plot_sample, overview) and `snakemake --report
WORKDIR/report.html`: its size, the tables' sizes and whether the report attached them
(report.max_attached_mb), and the sizes of the sample's report items. MB are 10^6 bytes.

    python benchmarks/report_size.py --workdir /tmp/report_size --reads 5000000
    python benchmarks/report_size.py --workdir /tmp/report_size_small --reads 20000
"""

import argparse
import re
import time
from pathlib import Path

from scale import size_mb, synthetic_embeddings

from workflow_lib.harness import measure
from workflow_lib.harness.stages import DEFAULTS, ROOT, write_reads
from workflow_lib.io.tables import read_json
from workflow_lib.models import embedders

SAMPLE = "reads"
CONFIG = ROOT / "config" / "demo.yaml"
OPTIONS = ("--configfile", CONFIG, "--profile", ROOT / "profiles" / "local", "--cores", 2)
# A Snakemake benchmark file's columns; the synthetic embed jobs took no measured time or memory.
BENCHMARK = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
BENCHMARK += "1.0\t0:00:01\t-\t-\t-\t-\t-\t-\t-\t-\n"
TABLE_LABELS = ("chunks table (download)", "sequences table (download)")  # the report's labels (rules/classify.smk)


def snakemake(workdir: Path, samples: Path, log: str, *args: str) -> str:
    """Snakemake in `workdir` with the demo config and the samples sheet `samples`; its output, also in `log`."""
    _, output = measure.snakemake(workdir, *OPTIONS, *args, "--config", f"samples={samples}", log=workdir / log)
    return output


def training_sheet(workdir: Path) -> Path:
    """The demo sheet's labelled samples, their paths made absolute."""
    header, *rows = (line.split("\t") for line in (ROOT / "config" / "demo_samples.tsv").read_text().splitlines())
    labelled = [(name, str(ROOT / path), label) for name, path, label in rows if label]
    sheet = workdir / "train_samples.tsv"
    sheet.write_text("".join("\t".join(row) + "\n" for row in [header, *labelled]))
    return sheet


def synthetic_embed_jobs(workdir: Path) -> int:
    """The outputs, benchmark files and logs of the sample's embed jobs (rules/embed.smk), each
    shard's embeddings as wide as the model check says the model's are. Returns the jobs."""
    suffixes = {e.name: e.declared.alphabet for e in embedders(DEFAULTS)}  # the shard FASTA each model reads
    widths = {model: read_json(workdir / "results" / "checks" / "models.json")[model]["dim"] for model in suffixes}
    results, jobs = workdir / "results", 0
    for seed, (model, suffix) in enumerate(suffixes.items()):
        for shard in sorted((results / SAMPLE / "prepare").glob(f"shard_*.{suffix}")):
            number = shard.stem.split("_")[1]
            output = results / SAMPLE / "embeddings" / model / f"shard_{number}.h5"
            output.parent.mkdir(parents=True, exist_ok=True)
            synthetic_embeddings(shard, output, model, "float32", seed, widths[model])
            benchmark = results / "benchmarks" / "embed" / SAMPLE / f"{model}_{number}.tsv"
            benchmark.parent.mkdir(parents=True, exist_ok=True)
            benchmark.write_text(BENCHMARK)
            log = workdir / "logs" / "embed" / SAMPLE / f"{model}_{number}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"synthetic embeddings ({widths[model]} features) written by {Path(__file__).name}\n")
            jobs += 1
    return jobs


def planned_jobs(dry_run: str) -> dict:
    """The jobs a dry run would run, per rule, from its job stats table (it lists those after the
    plan checkpoint too, which it shows no job of)."""
    table = dry_run.split("Job stats:", 1)[1] if "Job stats:" in dry_run else ""
    return {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", table, re.MULTILINE) if rule != "total"}


def run(workdir: Path, reads: int) -> dict:
    workdir.mkdir(parents=True, exist_ok=True)
    marks, seconds = [time.perf_counter()], {}

    def lap(stage: str) -> None:
        marks.append(time.perf_counter())
        seconds[stage] = round(marks[-1] - marks[-2], 1)

    fasta = workdir / f"reads_{reads}.fa"  # a workdir can be run again at another size
    if not fasta.exists():
        write_reads(fasta, reads, 500, seed=1)
    lap("write_reads")
    snakemake(workdir, training_sheet(workdir), "snakemake_train.log", "train")
    lap("train")

    sheet = workdir / "samples.tsv"
    sheet.write_text(f"sample\tpath\n{SAMPLE}\t{fasta}\n")
    results = workdir / "results"
    prepared = [f"results/{SAMPLE}/prepare/{name}" for name in ("frames.tsv.gz", "sequences.tsv.gz")]
    snakemake(workdir, sheet, "snakemake_prepare.log", *prepared, "results/checks/models.json")
    lap("prepare_and_check")
    embed_jobs = synthetic_embed_jobs(workdir)
    lap("synthetic_embeddings")
    planned = planned_jobs(snakemake(workdir, sheet, "snakemake_dry_run.log", "--dry-run"))
    if "embed" in planned:
        raise SystemExit(f"Snakemake would run {planned['embed']} embed jobs: {workdir / 'snakemake_dry_run.log'}")
    snakemake(workdir, sheet, "snakemake_run.log")
    lap("workflow")
    report = workdir / "report.html"
    snakemake(workdir, sheet, "snakemake_report.log", "--report", str(report))
    lap("report")

    out = results / SAMPLE
    text = report.read_text()
    summary = read_json(out / "run_summary.json")
    items = {p.name: size_mb(p, digits=3) for p in sorted((out / "report").iterdir())}
    items |= {"run_summary.json": size_mb(out / "run_summary.json", digits=3)}
    items |= {"overview.html": size_mb(results / "report" / "overview.html", digits=3)}
    return {
        "reads": reads,
        "frames": summary["counts"]["frames"],
        "embed_jobs_written": embed_jobs,  # not run: the dry run planned none
        "jobs_run": planned,
        "report_mb": size_mb(report, digits=2),
        "report_bytes": report.stat().st_size,
        "tables_mb": {name: size_mb(out / name, digits=2) for name in ("sequences.tsv", "chunks.tsv", "frames.tsv")},
        "max_attached_mb": summary["config"]["report"]["max_attached_mb"],
        "tables_attached": {label.split()[0]: label in text for label in TABLE_LABELS},
        "report_items_mb": items,
        "seconds": seconds,
        "wall_seconds": round(marks[-1] - marks[0], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, help="where the workflow runs (reads and results are kept)")
    parser.add_argument("--reads", type=int, default=5_000_000, help="reads of 500 bp in the one sample")
    args = parser.parse_args()
    measure.print_figures(measure.header("report_size") | run(Path(args.workdir), args.reads))


if __name__ == "__main__":
    main()
