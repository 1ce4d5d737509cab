import functools
import json
import re
import shutil
import sys
import time
from pathlib import Path

from snakemake import __version__ as snakemake_version

# The checkout's root, from this file: workflow.basedir is the host workflow's folder when another
# workflow uses this one as a module.
ROOT = str(Path(str(workflow.current_basedir)).parent)
# workflow_lib, from a checkout without installing (jobs: scripts/run_logged.sh)
sys.path.insert(0, ROOT)

from workflow_lib.cli.errors import full_disk_here
from workflow_lib.cli.settings import (
    CalibrateSettings,
    CallSettings,
    CheckModelsSettings,
    EmbedSettings,
    FetchClassifierSettings,
    FetchSettings,
    PlanSettings,
    PlotSampleSettings,
    PredictSettings,
    PrepareSettings,
    ScoreSettings,
    TokenizeSettings,
    TrainSettings,
    cli,
)
from workflow_lib.classify.weighing import composition_lines
from workflow_lib.embed import rates
from workflow_lib.models import embedders
from workflow_lib.workflow import job_commands, job_resources, model_files, rule_outputs
from workflow_lib.workflow.cluster_watch import failed_job_reasons, watch_pending
from workflow_lib.workflow.job_resources import PRIORITY, by_input
from workflow_lib.workflow.run_plan import RunPlan
from workflow_lib.workflow.config_check import readable_yaml, start


# found beside the workflow wherever the run's directory is (--directory DIR, or cd DIR)
configfile: readable_yaml(f"{ROOT}/config/config.yaml")


STARTED = time.time()  # the run's start, in the main process (onsuccess: what this run wrote)
MODEL_CHECK = "results/checks/models.json"
PLAN_DIR = "results/plan"
RECORDED = "results/report/recorded_settings.json"  # the settings that made the results
# the run's settings (every key: config/config.yaml's defaults under the config given, checked once
# against config/schema.yaml; the dict Snakemake loaded is left as it is) and its samples
SETTINGS, SAMPLES = start(workflow, config, ROOT, PLAN_DIR, RECORDED, MODEL_CHECK)
# the report's captions read the settings as snakemake.config, which is this name's value: the run's
# settings, also where a host workflow gives only its own keys (module use)
config = SETTINGS
TRAINS_HERE = model_files.trains_here(SETTINGS, SAMPLES.labelled)
# the embedding models, in the classifier's input order (models.embedders), by name
EMBEDDERS = {e.name: e for e in embedders(SETTINGS)}
EMBEDDER_OPTIONS = model_files.embedder_options(SETTINGS)  # the jobs' --embedder per model, in input order
script_job = functools.partial(job_commands.script_job, ROOT)
job_args = functools.partial(job_commands.job_args, SETTINGS)
named_files = job_commands.named_files
tuning_of = functools.partial(job_commands.tuning_of, config=SETTINGS)


wildcard_constraints:
    sample="|".join(map(re.escape, SAMPLES.table.index)),
    model="|".join(map(re.escape, EMBEDDERS)),
    pool=r"\d+-\d+",
    generation=r"\d+",


# Job groups of a sample's CPU jobs, for cluster runs (a local run ignores groups). A small sample's
# (job_resources.small_sample) take seconds each, so profiles/slurm batches the groups of many
# samples into one submission (group-components): its prepare is one component of
# SMALL_PREPARE_GROUP, its predict, call, summarize and plot_sample one of SMALL_SAMPLE_GROUP (the
# plan and the embed jobs lie between the two). A larger sample's summarize and plot_sample are
# one component of SAMPLE_REPORT_GROUP, its other jobs submitted alone.
JOB_GROUPS = SMALL_PREPARE_GROUP, SMALL_SAMPLE_GROUP, SAMPLE_REPORT_GROUP = (
    "small_prepare",
    "small_samples",
    "sample_report",
)


def sample_group(small, large=None):
    """The job group of a sample's job: `small` for a small sample, `large` for another."""
    return lambda wildcards: (small if job_resources.small_sample(tuple(sample_input(wildcards))) else large)


def sample_input(wildcards):
    """The sample's files (lanes, runs; a paired sample's mates after them)."""
    return SAMPLES.files(wildcards.sample)


def generation_samples(wildcards):
    """The samples of the plan's generation (those planned together)."""
    return SAMPLES.of_generation(wildcards.generation)


def sample_reads(wildcards):
    """The options that give a job the sample's reads."""
    return job_commands.reads_options(SAMPLES.table.loc[wildcards.sample, "reads"])


temp_unless_kept = functools.partial(rule_outputs.temp_unless_kept, SETTINGS)
page, sample_page = rule_outputs.page, rule_outputs.sample_page
optional_files, unwritten_files = rule_outputs.optional_files, rule_outputs.unwritten_files
# outputs that a setting turns off (an earlier run's are then removed: unwritten_files)
VIRNUCPRO_TABLES = ("results/{sample}/prediction_results.txt", "results/{sample}/prediction_results_highestscore.csv")
QVALUE_FASTA = ("results/{sample}/viral_qvalue.fasta", "results/{sample}/regions_qvalue.fasta")
# the tables the report attaches while those of all samples are small
REPORT_TABLES = {table: f"results/{{sample}}/{table}.tsv" for table in ("chunks", "sequences")}
attached_table = functools.partial(rule_outputs.attached_table, REPORT_TABLES, SAMPLES.sheet, SETTINGS)
# each sample's shards and pooled shards: what their jobs read, and what they ask for
GPU_MODEL = job_resources.profile_gpu_model(workflow.resource_settings.overwrite_resources)
PLAN = RunPlan(rules, checkpoints, SAMPLES, EMBEDDERS, SETTINGS, TRAINS_HERE, MODEL_CHECK, GPU_MODEL)


def sample_pools_of(output, **wildcards):
    """sample_pools of the job's sample, as an input function."""
    return lambda job_wildcards: PLAN.sample_pools(output, job_wildcards.sample, **wildcards)


def embed_records(wildcards):
    """summarize's --embed-figures and --embed-benchmarks: per model, in input order, its name and
    the sample's embed jobs' figures (JSON), and its name and their benchmark files."""
    figures, benchmarks = (
        [(m, *PLAN.sample_pools(output, wildcards.sample, model=m)) for m in EMBEDDERS]
        for output in (rules.embed.output.figures, rules.embed.benchmark)
    )
    return figures, benchmarks


def embed_figure_files(wildcards):
    """The sample's embed jobs' figures (JSON), per model in input order: call's --embed-figures."""
    return [f for _, *files in embed_records(wildcards)[0] for f in files]


def embed_record_files(wildcards):
    """The files of embed_records, as summarize's input."""
    return [f for rows in embed_records(wildcards) for _, *files in rows for f in files]


def embed_record_options(wildcards):
    figures, benchmarks = embed_records(wildcards)
    return cli(embed_figures=figures, embed_benchmarks=benchmarks)


def calibration_inputs():
    """Per calibration sample: prepare's frames and sequences tables and bins file, its pools' scores."""
    return [
        expand([rules.prepare.output.frames, rules.prepare.output.sequences, rules.prepare.output.bins], sample=s)
        + PLAN.sample_pools(rules.score.output.scores, s)
        for s in SAMPLES.calibration.index
    ]


def calibration_files(wildcards):
    """The files of calibration_inputs, as calibrate's input."""
    return [f for files in calibration_inputs() for f in files]


def calibration_samples(wildcards):
    """calibrate's --sample per calibration sample: its name, label and files (calibration_inputs)."""
    labels = SAMPLES.calibration["label"]
    return [(s, labels[s], *files) for s, files in zip(SAMPLES.calibration.index, calibration_inputs())]


def training_embeddings(wildcards):
    """The training samples' embeddings (each pooled shard once), and their frames tables (the
    split holds out whole chunks): train's input, read as its --shard options."""
    samples, embeddings = SAMPLES.training(), rules.embed.output.embeddings
    files = dict.fromkeys(f for m in EMBEDDERS for s in samples for f in PLAN.shard_outputs(embeddings, s, model=m))
    return list(files) + expand(rules.prepare.output.frames, sample=samples)


def labelled_shards(wildcards):
    """--shard per shard of every training sample: its label, its frames table, its rows in its
    pooled shard, and that shard's embeddings by each model, in input order."""
    shards = []
    for s in SAMPLES.training():
        (frames,) = expand(rules.prepare.output.frames, sample=s)
        embeddings = [PLAN.shard_outputs(rules.embed.output.embeddings, s, model=m) for m in EMBEDDERS]
        label = SAMPLES.table.loc[s, "label"]
        shards += [
            (label, frames, p["offset"], p["offset"] + p["frames"], *paths)
            for p, *paths in zip(PLAN.shards(s), *embeddings)
        ]
    return cli(shard=shards)


def prediction_outputs():
    return expand([*rules.predict.output, *rules.call.output], sample=SAMPLES.sheet)


def report_outputs():
    """Per sample the run summary and the report's pages; the overview; the training figures when
    this run trains its classifier; the weighing figure with a calibration."""
    per_sample = expand([*rules.summarize.output, *rules.plot_sample.output], sample=SAMPLES.sheet)
    training = list(rules.plot_training.output) if TRAINS_HERE else []
    calibration = model_files.calibration_file(SETTINGS)
    weighing = list(rules.plot_calibration.output) if calibration else []
    return per_sample + list(rules.overview.output) + training + weighing
