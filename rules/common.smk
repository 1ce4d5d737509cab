import copy
import functools
import json
import logging
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

import pandas as pd
import yaml
from snakemake import __version__ as snakemake_version
from snakemake.exceptions import IncompleteCheckpointException
from snakemake.utils import validate

# The checkout's root, from this file: workflow.basedir is the host workflow's folder when another
# workflow uses this one as a module.
ROOT = str(Path(str(workflow.current_basedir)).parent)
# workflow_lib, from a checkout without installing (jobs: scripts/run_logged.sh)
sys.path.insert(0, ROOT)

from workflow_lib.workflow.config_check import (
    check_config,
    check_yaml,
    check_calibration_file,
    check_classifier_file,
    check_model_choice,
    check_training_labels,
    recorded_differences,
    read_calibration_samples,
    read_samples,
    source_of,
)
from workflow_lib.workflow.cluster_watch import PendingWatch, failed_job_reasons
from workflow_lib.workflow import job_resources
from workflow_lib.cli.errors import InputError, full_disk_here
from workflow_lib.models.checkpoints import MANIFEST, classifier_path, is_local, is_url
from workflow_lib.prepare.plan import (
    generations,
    plan_is_current,
    read_plan,
    read_pools,
)
from workflow_lib.workflow.snakemake_patches import (
    bound_passes,
    keep_one_timer,
    mend_job_groups,
    mend_needrun_mask,
)
from workflow_lib.cli.settings import (
    CallSettings,
    CheckModelsSettings,
    EmbedSettings,
    FetchSettings,
    PlotSampleSettings,
    PredictSettings,
    PrepareSettings,
    ScoreSettings,
    TokenizeSettings,
    TrainSettings,
    cli,
    options,
    tuning_keys,
)
from workflow_lib.io.sharding import FASTA_SUFFIX
from workflow_lib.io.sharding import shard_fasta as shard_fasta_of


def refuse(error):
    """A config or sheet error: its lines alone (Snakemake would dress them as a crash in this
    file: a WorkflowError and a frame)."""
    print(error, file=sys.stderr)
    sys.exit(1)


# found beside the workflow wherever the run's directory is (--directory DIR, or cd DIR); read by
# Snakemake, which would not name the file or the line of a syntax error (nor for --configfile)
DEFAULT_CONFIG = f"{ROOT}/config/config.yaml"
try:
    check_yaml(DEFAULT_CONFIG)
except InputError as error:
    refuse(error)


configfile: DEFAULT_CONFIG


# Snakemake's own CPU would grow with the square of the samples, its grouped cluster jobs would
# hold far more samples than group-components asks, and a job behind an ancient input would go
# untested while the job before it is due (workflow_lib/workflow/snakemake_patches.py).
keep_one_timer()
bound_passes()
mend_job_groups()
mend_needrun_mask()
# Snakemake's log file on a full disk: each message would print a traceback ("--- Logging error
# ---"); the console still gets every message, and onerror says the disk is full.
logging.raiseExceptions = False

MODEL_CHECK = "results/checks/models.json"
PLAN_DIR = "results/plan"
RECORDED = "results/report/recorded_settings.json"  # the settings that made the results
# Where each config value came from, the one that wins first: --config, then the config files.
given = [str(f) for f in workflow.config_settings.configfiles]
config_sources = [("--config", workflow.config_settings.config)] + [
    (f, yaml.safe_load(Path(f).read_text()))
    for f in reversed(
        [str(f) for f in workflow.configfiles if str(f) not in given] + given
    )
]
try:
    check_config(config, f"{ROOT}/config/schema.yaml", config_sources)
    samples = read_samples(
        config["samples"],
        f"{ROOT}/config/samples.schema.yaml",
        source_of(["samples"], config_sources),
    )
    validate(config, schema="../config/schema.yaml")  # fills in the defaults
    check_model_choice(config, config_sources)
    check_training_labels(samples, config["samples"])
    LABELLED = bool((samples["label"] != "").any())
    # the samples sheet's samples; `samples` also holds the calibrate target's, which only it reads
    SHEET = list(samples.index)
    CALIBRATION_SAMPLES = read_calibration_samples(
        config["calibration"]["samples"],
        samples,
        f"{ROOT}/config/samples.schema.yaml",
        source_of(["calibration", "samples"], config_sources),
    )
    samples = pd.concat([samples, CALIBRATION_SAMPLES])
    # each sample's generation: samples planned together share one; appended ones plan apart
    GENERATION = generations(list(samples.index), PLAN_DIR)
    # not in cluster jobs (checked when the run started) nor for --lint (a check of the code only,
    # on the default config, whose classifier a checkout lacks)
    if workflow.is_main_process and workflow.check_envvars:
        check_classifier_file(config, config_sources, LABELLED)
        check_calibration_file(config, config_sources, LABELLED)
except InputError as error:
    refuse(error)


onstart:
    # a cluster job that can never start is cancelled with its reason, not waited for
    if workflow.non_local_exec and shutil.which("squeue"):
        PendingWatch(config["pending_check_seconds"], JOB_GROUPS).start()


onerror:
    # a cluster job's error line is in its log, not on this console (scripts/run_logged.sh)
    if workflow.non_local_exec:
        for line in failed_job_reasons(log):
            print(f"failed: {line}", file=sys.stderr)
    # Snakemake's own log and metadata on a full disk fail with a traceback or not at all
    if full := full_disk_here():
        print(f"error: {full}", file=sys.stderr)


if workflow.is_main_process:  # once, not in every cluster job
    for line in recorded_differences(config, RECORDED):
        print(f"Warning: {line}", file=sys.stderr)

MODELS = ("esm", "dnabert")
# Job order, so that the embeddings on disk at any moment are bounded by the jobs in flight, not by
# the samples: the plan first (temp files are kept while a checkpoint is pending), a shard's scoring
# as soon as it can run, then the embed jobs, lower shards first: EMBED_PRIORITY - shard for the
# samples that train this run's classifier (no shard is scored before it), half that for the others.
EMBED_PRIORITY = 1_000_000
PRIORITY = {"plan": 3 * EMBED_PRIORITY, "score": 2 * EMBED_PRIORITY}
# The demo DNABERT-S tokenizer is trained on this bundled genome, wherever the workflow runs.
DEMO_TOKENIZER_GENOME = f"{ROOT}/resources/genomes/lambda_NC_001416.fasta"


wildcard_constraints:
    sample="|".join(map(re.escape, samples.index)),
    model="|".join(MODELS),
    pool=r"\d+-\d+",
    generation=r"\d+",


# Jobs run through this wrapper: all output in the job's log; its error line, or its warnings, on
# the console.
RUN_LOGGED = f"{ROOT}/scripts/run_logged.sh"


# Job groups of a sample's CPU jobs, for cluster runs (a local run ignores groups). A small sample's
# (job_resources.small_sample) take seconds each, so profiles/slurm batches the groups of many
# samples into one submission (group-components): its prepare is one component of
# SMALL_PREPARE_GROUP, its predict, call, summarize and plot_sample one of SMALL_SAMPLE_GROUP (the
# plan and the embed jobs lie between the two). A larger sample's summarize and plot_sample are
# one component of SAMPLE_REPORT_GROUP, its other jobs submitted alone.
SMALL_PREPARE_GROUP = "small_prepare"
SMALL_SAMPLE_GROUP = "small_samples"
SAMPLE_REPORT_GROUP = "sample_report"
JOB_GROUPS = (SMALL_PREPARE_GROUP, SMALL_SAMPLE_GROUP, SAMPLE_REPORT_GROUP)


def sample_group(small, large=None):
    """The job group of a sample's job: `small` for a small sample, `large` for another."""

    def group(wildcards):
        return small if is_small_input(sample_input(wildcards)) else large

    return group


@functools.cache
def is_small_input(path):
    return job_resources.small_sample(
        os.path.getsize(path) if os.path.isfile(path) else 0
    )


# the tables the report attaches while they are small (attached_table)
REPORT_TABLES = {
    "chunks": "results/{sample}/chunks.tsv",
    "sequences": "results/{sample}/sequences.tsv",
}


def script_job(name, arguments, env=None):
    """A rule's shell command: scripts/<name>.py with `arguments` (a shell template), with the
    environment variables `env` (NAME=value words), run through RUN_LOGGED into the rule's log.
    """
    script = shlex.quote(f"{ROOT}/scripts/{name}.py")
    env = f"env {env} " if env else ""
    return f"bash {shlex.quote(RUN_LOGGED)} {{log:q}} {env}python {script} {arguments}"


def settings_of(declaration):
    """params: the stage's declared settings that can change its results, as options from the
    config. Snakemake compares params: a change reruns the job."""
    return lambda wildcards: options(
        declaration, config, results=True, model=wildcards.get("model")
    )


def tuning_of(declaration):
    """A resource: the stage's declared settings that cannot change its results, as options from
    the config. Snakemake never compares resources: a change reruns nothing."""
    return lambda wildcards: options(
        declaration, config, results=False, model=wildcards.get("model")
    )


def sample_input(wildcards):
    return samples.loc[wildcards.sample, "path"]


def model_files(models=MODELS):
    """Local model checkpoints (files or directories) as inputs, so that the workflow can build them."""
    checkpoints = (config["models"][model]["checkpoint"] for model in models)
    return [c for c in checkpoints if is_local(c)]


def classifier_file():
    """The classifier that jobs read: models.classifier, or where fetch_models puts a URL's download."""
    models = config["models"]
    return classifier_path(models["classifier"], models["cache_dir"])


def trains_here():
    """This run trains the classifier it uses: models.classifier is the train target's output and
    the samples sheet labels samples to learn from (else that file is used as it is)."""
    return classifier_file() == config["train"]["classifier"] and LABELLED


def classifier_to_check():
    "The classifier is checked before embedding unless this workflow trains it (then it fits by construction)."
    return [] if trains_here() else [classifier_file()]


def calibration_file():
    """The calibration that weighs the calls (models.calibration), as an input; none when null."""
    calibration = config["models"]["calibration"]
    return [calibration] if calibration else []


def calibration_inputs():
    """--sample per calibration sample: its label, prepare's frames and sequences tables and its
    shards' scores files (the calibrate rule's input, in this order)."""
    return [
        [
            *expand(
                [rules.prepare.output.frames, rules.prepare.output.sequences],
                sample=sample,
            ),
            *shard_outputs(rules.score.output.scores, sample),
        ]
        for sample in CALIBRATION_SAMPLES.index
    ]


def fetched_manifest():
    return f"{config['models']['cache_dir']}/{MANIFEST}"


def fetched():
    """fetch_models' manifest when a model is remote (a fair-esm name, a Hugging Face id, a
    classifier URL): the model check, on the submit host, waits for it; jobs then run offline.
    """
    models = config["models"]
    checkpoints = (models["esm"]["checkpoint"], models["dnabert"]["checkpoint"])
    remote = is_url(models["classifier"]) or not all(map(is_local, checkpoints))
    return [fetched_manifest()] if remote else []


def fetched_classifier():
    return [classifier_file()] if is_url(config["models"]["classifier"]) else []


def classifier_to_fetch(wildcards):
    """fetch_models' --classifier: none when this workflow trains it."""
    classifier = config["models"]["classifier"]
    return cli(classifier=classifier if classifier_to_check() else None)


def offline_env():
    """The environment prefix of jobs that load models: no network, named models from cache_dir."""
    torch_home = shlex.quote(f"{config['models']['cache_dir']}/torch")
    return f"HF_HUB_OFFLINE=1 TORCH_HOME={torch_home}"


def compile_cache():
    """Where the embed jobs keep compiled kernels: shared, so that one job's compile serves the rest."""
    embedding = config["embedding"]
    return embedding["compile_cache_dir"] or f"{config['models']['cache_dir']}/compile"


def generation_samples(generation):
    return [s for s in samples.index if GENERATION[s] == int(generation)]


def pool_plan(wildcards):
    """The plan of a pooled shard's generation, which its jobs read (their params): in cluster jobs
    Snakemake evaluates params that read a checkpoint only with its output among the inputs;
    ancient, so that a plan made again does not make the pooled shards it leaves alone again.
    """
    generation = wildcards.pool.split("-")[0]
    return ancient(expand(rules.plan.output.plan, generation=generation)[0])


def pool_pieces(pool):
    """A pooled shard's samples' shards (plan rows: sample, shard, frames, tokens, pool, offset), in
    order. Its jobs join the DAG once the plan is made, so the plan they read is this run's.
    """
    generation = pool.split("-")[0]
    return read_pools(checkpoints.plan.get(generation=generation).output.plan)[pool]


def embed_tuning(wildcards):
    """The embed job's settings that cannot change its results, and the frames its pooled shard
    has by the plan, which the job checks the FASTA against (a file cut short by a crash is
    refused). One resource: Snakemake never compares resources, while a change of the rule's
    shell command would run every embed job of a finished run again."""
    planned = sum(piece["frames"] for piece in pool_pieces(wildcards.pool))
    return f"{tuning_of(EmbedSettings)(wildcards)} {cli(planned_frames=planned)}"


def pooled_shard_fasta(wildcards):
    """What a pooled shard's jobs read: prepare's shards directory of its one sample's shard, or the
    FASTA pair that pool_shard makes of several."""
    pieces = pool_pieces(wildcards.pool)
    if len(pieces) == 1:
        return expand(rules.prepare.output.shards, sample=pieces[0]["sample"])
    return expand(list(rules.pool_shard.output), pool=wildcards.pool)


def pooled_fasta(pool, suffix):
    """A pooled shard's nucleotide (`fna`) or protein (`faa`) FASTA (see pooled_shard_fasta)."""
    pieces = pool_pieces(pool)
    if len(pieces) == 1:
        shards = expand(rules.prepare.output.shards, sample=pieces[0]["sample"])[0]
        return str(shard_fasta_of(shards, pieces[0]["shard"], suffix))
    return expand(getattr(rules.pool_shard.output, suffix), pool=pool)[0]


def shard_fasta(wildcards):
    """The shard FASTA that the model embeds: proteins for ESM-2, nucleotides for DNABERT-S."""
    return pooled_fasta(wildcards.pool, FASTA_SUFFIX[wildcards.model])


def nucleotide_shard(wildcards):
    return pooled_fasta(wildcards.pool, FASTA_SUFFIX["dnabert"])


def pooled_shard_dirs(wildcards):
    """pool_shard's input: prepare's shards directory of each of its samples."""
    pieces = pool_pieces(wildcards.pool)
    return expand(
        rules.prepare.output.shards,
        sample=list(dict.fromkeys(p["sample"] for p in pieces)),
    )


def pooled_pieces(wildcards):
    """pool_shard's --piece per sample's shard: its shards directory and number, in plan order."""
    return cli(
        piece=[
            (expand(rules.prepare.output.shards, sample=p["sample"])[0], p["shard"])
            for p in pool_pieces(wildcards.pool)
        ]
    )


def scored_pieces(wildcards):
    """The score job's --piece per sample's shard of its pooled shard: sample, shard, frames."""
    return cli(
        piece=[
            (p["sample"], p["shard"], p["frames"]) for p in pool_pieces(wildcards.pool)
        ]
    )


def stored_tokens(wildcards):
    """The DNABERT-S embed job's tokens, made by the tokenize job (none for ESM-2)."""
    if wildcards.model != "dnabert":
        return []
    return expand(rules.tokenize.output.tokens, pool=wildcards.pool)


def tokenize_runtime(wildcards):
    return job_resources.tokenize_minutes(pooled_work(wildcards)["tokens"])


def pooled_work(wildcards):
    """A pooled shard's frames and ESM-2 tokens, from the plan. Not from the job's input: Snakemake
    defers a resource that reads its input until every input exists, and the DNABERT-S embed job's
    tokens do not before its tokenize job (a dry run would show <TBD>)."""
    pieces = pool_pieces(wildcards.pool)
    return {key: sum(p[key] for p in pieces) for key in ("frames", "tokens")}


def embed_gpus(wildcards):
    return job_resources.embed_gpus(pooled_work(wildcards)["frames"])


def embed_runtime(wildcards):
    work = pooled_work(wildcards)
    return job_resources.embed_minutes(
        work["tokens"], work["frames"], wildcards.model, config["embedding"]
    )


def embed_priority(wildcards):
    pooled = {p["sample"] for p in pool_pieces(wildcards.pool)}
    trains = trains_here() and any(samples.loc[s, "label"] != "" for s in pooled)
    return max(
        1, EMBED_PRIORITY // (1 if trains else 2) - int(wildcards.pool.split("-")[1])
    )


def runtime(value):
    """A setting that cannot change results, as a job resource (an int or a string): it reaches the
    job's command but, unlike params, is never compared, so changing it reruns nothing.
    """
    return (
        value if isinstance(value, int) and not isinstance(value, bool) else str(value)
    )


def by_input(floor, per_gb, names=None):
    """A resource (mem_mb, or runtime in minutes) that grows with a job's input: `floor`, plus
    `per_gb` for every GB of the input files `names` (input names; every input when None). Known
    once those files exist: Snakemake evaluates it again then, before it submits the job.
    """

    def resource(wildcards, input):
        # sizes read here, not by input.size_mb: that is a coroutine which `snakemake --report`
        # never awaits (a RuntimeWarning per job); an input not known yet (behind the plan
        # checkpoint) counts as none until it is
        if names is None:
            files = list(input)
        else:
            files = [f for name in names for f in _as_list(getattr(input, name, []))]
        size_mb = sum(os.path.getsize(f) for f in files if os.path.isfile(f)) / 1024**2
        return int(floor + per_gb * size_mb / 1024 + 0.999)

    return resource


def _as_list(value):
    return [value] if isinstance(value, str) else list(value)


def attached_table(name, **flags):
    """A whole table (REPORT_TABLES) as a report attachment, only while the tables are small:
    `snakemake --report` reads this file again once the results exist, and attaches the tables
    of every sample while together they hold at most report.max_attached_mb (embedded, they grow
    the HTML by 4/3 of that; at 10^8 reads each is GBs); else the report names the tables' paths
    (captions) and shows their top rows, not the tables.
    """
    path = REPORT_TABLES[name]
    found = [
        f
        for table in REPORT_TABLES.values()
        for f in expand(table, sample=SHEET)
        if os.path.isfile(f)
    ]
    if sum(map(os.path.getsize, found)) > config["report"]["max_attached_mb"] * 1024**2:
        return path
    return report(path, **flags)


def embed_threads(wildcards):
    return job_resources.embed_threads(config["embedding"])


def embeddings_path(path):
    return path if config["outputs"]["keep_embeddings"] else temp(path)


def shard_fasta_paths(path):
    """prepare's shards directory is temporary exactly when the embeddings are. With
    outputs.keep_embeddings: false each shard's FASTA pair goes once the shard is scored
    (spent_shard_fasta) and the directory once the sample is embedded: anything that embeds a shard
    again needs its embeddings again anyway (they are gone), and then prepare runs again too, which
    costs little beside embedding (about 40 MB/s of reads). With the embeddings kept they stay: an
    embed job run again (a checkpoint change, a lost shard) must find its shard, since a new
    prepare would make every later job of the sample anew, the other shards' too.
    """
    return path if config["outputs"]["keep_embeddings"] else temp(path)


def plan_check(wildcards):
    """A generation's plan's input of the model check: ancient while the plan on disk is current (a
    classifier swap reruns the check, not the plan), plain while it is out of date. Snakemake does
    not test on its own a job after one that must run (here the check): it marks it by following
    that job's outputs, never along an ancient input. With the check due, a plan out of date would
    not run (its own reasons, a sheet with a new sample or a shards table written after it, go
    untested), nor the new sample's prepare (a job with missing output runs for a job that must
    run, or for an input newer than the plan), and the plan found would be taken as made.
    """
    members = generation_samples(wildcards.generation)
    tables = expand(rules.prepare.output.shard_table, sample=members)
    plan = expand(rules.plan.output.plan, generation=wildcards.generation)[0]
    current = plan_is_current(plan, list(zip(members, tables)))
    return ancient(MODEL_CHECK) if current else MODEL_CHECK


def planned_shards(sample):
    """A sample's shards (plan rows: shard, frames, tokens, and the pool and offset where they lie),
    known once its generation's plan checkpoint has run. A plan without the sample was made before
    the sample was in the sheet: not made for it yet, never a KeyError (plan_check has such a plan
    made again; were it taken as made, nothing would run it).
    """
    plan_file = checkpoints.plan.get(generation=GENERATION[sample]).output.plan
    plan = read_plan(plan_file)
    if sample not in plan:
        raise IncompleteCheckpointException(checkpoints.plan.rule, plan_file)
    return plan[sample]


def shard_outputs(output, sample, **wildcards):
    """An output (`rules.<rule>.output.<name>`) of the pooled shard of each of a sample's shards, in
    shard order (a pooled shard of several of its shards comes as often)."""
    return expand(output, pool=[s["pool"] for s in planned_shards(sample)], **wildcards)


def sample_pools(output, sample, **wildcards):
    """An output of each pooled shard that holds shards of a sample, once, in order."""
    return list(dict.fromkeys(shard_outputs(output, sample, **wildcards)))


def shard_embeddings_of(model):
    """A pooled shard's embeddings by `model`, as the score rule's input."""
    return expand(rules.embed.output.embeddings, model=model, allow_missing=True)


def shard_fasta_pair(wildcards):
    """The pooled shard's FASTA pair, which the score job removes once the shard is scored when the
    embeddings are not kept (`remove_shard_fasta`)."""
    return [pooled_fasta(wildcards.pool, s) for s in ("fna", "faa")]


def shard_figures(sample, model):
    """The embed jobs' figures files (JSON) of the pooled shards that hold a sample's shards: what
    the run summary reads, so that it needs no embeddings (removed after scoring with
    outputs.keep_embeddings: false)."""
    return sample_pools(rules.embed.output.figures, sample, model=model)


def shard_benchmarks(sample, model):
    return sample_pools(rules.embed.benchmark, sample, model=model)


def prediction_outputs():
    return expand([*rules.predict.output, *rules.call.output], sample=SHEET)


# Settings that cannot change any result (a change reruns nothing), left out of the run summary's
# config: the stages' declared tuning, and what only the rules read.
RUNTIME_SETTINGS = tuning_keys() | {
    "pending_check_seconds",
    "embedding.compile_cache_dir",
    "embedding.assumed_tokens_per_s",
}


def result_config():
    """The config less RUNTIME_SETTINGS: every setting the results depend on."""
    kept = copy.deepcopy(config)
    for key in RUNTIME_SETTINGS:
        *sections, name = key.split(".")
        functools.reduce(dict.get, sections, kept).pop(name, None)
    return kept


def report_outputs():
    """Per sample the run summary and the report's figures and table; the overview of all
    samples; the training figures when this workflow trains the classifier that it uses.
    """
    per_sample = expand(
        [*rules.summarize.output, *rules.plot_sample.output], sample=SHEET
    )
    training = list(rules.plot_training.output) if trains_here() else []
    weighing = list(rules.plot_calibration.output) if calibration_file() else []
    return per_sample + list(rules.overview.output) + training + weighing


def training_samples():
    return [s for s in SHEET if samples.loc[s, "label"] != ""]


def training_embeddings(wildcards):
    """The training samples' embeddings (each pooled shard once), and their frames tables (the
    split holds out whole chunks)."""
    embeddings = {
        model: [
            f
            for s in training_samples()
            for f in sample_pools(rules.embed.output.embeddings, s, model=model)
        ]
        for model in MODELS
    }
    return {
        model: list(dict.fromkeys(files)) for model, files in embeddings.items()
    } | {"frames": expand(rules.prepare.output.frames, sample=training_samples())}


def labelled_shards(wildcards, input):
    """--shard per shard of every training sample: its label, the DNABERT-S and ESM-2 embeddings of
    its pooled shard, its frames table, and its rows there."""
    return cli(
        shard=[
            (
                samples.loc[s, "label"],
                dna,
                esm,
                frames,
                p["offset"],
                p["offset"] + p["frames"],
            )
            for s in training_samples()
            for frames in expand(rules.prepare.output.frames, sample=s)
            for p, dna, esm in zip(
                planned_shards(s),
                shard_outputs(rules.embed.output.embeddings, s, model="dnabert"),
                shard_outputs(rules.embed.output.embeddings, s, model="esm"),
            )
        ]
    )
