import functools
import json
import re
import shutil
import sys
from pathlib import Path

from snakemake import __version__ as snakemake_version
from snakemake.exceptions import IncompleteCheckpointException

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
from workflow_lib.io import sharding
from workflow_lib.models import embedders
from workflow_lib.prepare.plan import plan_is_current, read_plan, read_pools
from workflow_lib.workflow import job_commands, job_resources, model_files, rule_outputs
from workflow_lib.workflow.cluster_watch import PendingWatch, failed_job_reasons
from workflow_lib.workflow.job_resources import PRIORITY, by_input
from workflow_lib.workflow.startup import readable_yaml, start


# found beside the workflow wherever the run's directory is (--directory DIR, or cd DIR)
configfile: readable_yaml(f"{ROOT}/config/config.yaml")


MODEL_CHECK = "results/checks/models.json"
PLAN_DIR = "results/plan"
RECORDED = "results/report/recorded_settings.json"  # the settings that made the results
SAMPLES = start(workflow, config, ROOT, PLAN_DIR, RECORDED)
TRAINS_HERE = model_files.trains_here(config, SAMPLES.labelled)
# the embedding models, in the classifier's input order (models.embedders), by name
EMBEDDERS = {e.name: e for e in embedders(config)}
script_job = functools.partial(job_commands.script_job, ROOT)
settings_of = functools.partial(job_commands.settings_of, config=config)
tuning_of = functools.partial(job_commands.tuning_of, config=config)
named_files = job_commands.named_files


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
SMALL_PREPARE_GROUP = "small_prepare"
SMALL_SAMPLE_GROUP = "small_samples"
SAMPLE_REPORT_GROUP = "sample_report"
JOB_GROUPS = (SMALL_PREPARE_GROUP, SMALL_SAMPLE_GROUP, SAMPLE_REPORT_GROUP)


def sample_group(small, large=None):
    """The job group of a sample's job: `small` for a small sample, `large` for another."""
    return lambda wildcards: (small if job_resources.small_sample(tuple(sample_input(wildcards))) else large)


def sample_input(wildcards):
    """The sample's files (lanes, runs; a paired sample's mates after them)."""
    return SAMPLES.files(wildcards.sample)


def sample_reads(wildcards):
    """The options that give a job the sample's reads."""
    return job_commands.reads_options(SAMPLES.table.loc[wildcards.sample, "reads"])


temp_unless_kept = functools.partial(rule_outputs.temp_unless_kept, config)
page, optional_files = rule_outputs.page, rule_outputs.optional_files
# the tables the report attaches while those of all samples are small
REPORT_TABLES = {
    "chunks": "results/{sample}/chunks.tsv",
    "sequences": "results/{sample}/sequences.tsv",
}
attached_table = functools.partial(rule_outputs.attached_table, REPORT_TABLES, SAMPLES.sheet, config)


def pool_plan(wildcards):
    """The plan of a pooled shard's generation, which its jobs read (their params): in cluster jobs
    Snakemake evaluates params that read a checkpoint only with its output among the inputs; ancient:
    a plan made again does not make the pooled shards it leaves alone again."""
    generation = wildcards.pool.split("-")[0]
    return ancient(expand(rules.plan.output.plan, generation=generation)[0])


def pool_pieces(pool):
    """A pooled shard's samples' shards (plan rows: sample, shard, frames, tokens, pool, offset)."""
    generation = pool.split("-")[0]
    return read_pools(checkpoints.plan.get(generation=generation).output.plan)[pool]


def pooled_work(wildcards):
    """A pooled shard's frames and ESM-2 tokens, from the plan: a resource that reads the job's
    input waits for all of it, and the DNABERT-S embed job's tokens are not there before its
    tokenize job (a dry run would show <TBD>)."""
    pieces = pool_pieces(wildcards.pool)
    return {key: sum(p[key] for p in pieces) for key in ("frames", "tokens")}


def tokenize_runtime(wildcards):
    return job_resources.tokenize_minutes(pooled_work(wildcards)["tokens"])


def embed_gpus(wildcards):
    return job_resources.embed_gpus(pooled_work(wildcards)["frames"])


def embed_gpu_mem(wildcards, input):
    """Known once the job's input exists, the model check among it (a dry run shows <TBD>)."""
    return job_resources.embed_gpu_mem_mb(wildcards.model, input.model_check, config)


def embed_runtime(wildcards):
    work = pooled_work(wildcards)
    return job_resources.embed_minutes(work["tokens"], work["frames"], wildcards.model, config)


def embed_tuning(wildcards):
    """The embed job's tuning, and its shard's frames by the plan, which the job checks the FASTA
    against (one cut short by a crash is refused): a resource, never compared."""
    planned = pooled_work(wildcards)["frames"]
    return f"{tuning_of(EmbedSettings)(wildcards)} {cli(planned_frames=planned)}"


def embed_priority(wildcards):
    try:
        pooled = {p["sample"] for p in pool_pieces(wildcards.pool)}
    except IncompleteCheckpointException:
        # an embed job asked for by its file before the plan exists: Snakemake makes the job again,
        # with its samples known, once the plan is done (a priority function may not raise)
        return job_resources.embed_priority(wildcards.pool, False)
    labelled = (SAMPLES.table.loc[list(pooled), "label"] != "").any()
    return job_resources.embed_priority(wildcards.pool, TRAINS_HERE and labelled)


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
        return str(sharding.shard_fasta(shards, pieces[0]["shard"], suffix))
    return expand(getattr(rules.pool_shard.output, suffix), pool=pool)[0]


def shard_fasta(wildcards):
    """The shard FASTA that the model reads: proteins or nucleotides, as its architecture says."""
    return pooled_fasta(wildcards.pool, EMBEDDERS[wildcards.model].declared.alphabet)


def shard_fasta_pair(wildcards):
    """What the score job removes once the shard is scored, unless the embeddings are kept."""
    return [pooled_fasta(wildcards.pool, s) for s in ("fna", "faa")]


def pooled_shard_dirs(wildcards):
    """pool_shard's input: prepare's shards directory of each of its samples."""
    samples = dict.fromkeys(p["sample"] for p in pool_pieces(wildcards.pool))
    return expand(rules.prepare.output.shards, sample=list(samples))


def pooled_pieces(wildcards):
    """pool_shard's --piece per sample's shard: its shards directory and number, in plan order."""
    pieces = pool_pieces(wildcards.pool)
    dirs = expand(rules.prepare.output.shards, sample=[p["sample"] for p in pieces])
    return cli(piece=[(d, p["shard"]) for d, p in zip(dirs, pieces)])


def scored_pieces(wildcards):
    """The score job's --piece per sample's shard of its pooled shard: sample, shard, frames."""
    pieces = pool_pieces(wildcards.pool)
    return cli(piece=[(p["sample"], p["shard"], p["frames"]) for p in pieces])


def stored_tokens(wildcards):
    """The embed job's tokens, made by the tokenize job where its architecture stores them
    (DNABERT-S); none for another (ESM-2)."""
    if EMBEDDERS[wildcards.model].declared.stored_tokens:
        return expand(rules.tokenize.output.tokens, **wildcards)
    return []


def tokenized_models():
    """The tokenize rule's model wildcard: the models whose tokens are stored."""
    stored = [m for m, e in EMBEDDERS.items() if e.declared.stored_tokens]
    return "|".join(map(re.escape, stored)) or "^$"


def plan_check(wildcards):
    """A generation's plan's input of the model check: ancient while the plan on disk is current (a
    classifier swap reruns the check, not the plan), else plain: Snakemake marks the jobs after a
    due one along plain inputs only, and does not test them on their own, so a plan out of date (a
    new sample, a newer shards table) would not run, nor the new sample's prepare."""
    members = SAMPLES.of_generation(wildcards.generation)
    tables = expand(rules.prepare.output.shard_table, sample=members)
    plan = expand(rules.plan.output.plan, generation=wildcards.generation)[0]
    current = plan_is_current(plan, list(zip(members, tables)))
    return ancient(MODEL_CHECK) if current else MODEL_CHECK


def planned_shards(sample):
    """A sample's shards (plan rows: shard, frames, tokens, and the pool and offset where they lie).
    A plan lacking the sample predates it: not made yet (plan_check), not a KeyError."""
    plan_file = checkpoints.plan.get(generation=SAMPLES.generation[sample]).output.plan
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


def sample_pools_of(output, **wildcards):
    """sample_pools of the job's sample, as an input function."""
    return lambda job_wildcards: sample_pools(output, job_wildcards.sample, **wildcards)


def shard_embeddings(wildcards):
    """A pooled shard's embeddings by each model, in input order: the score rule's input."""
    return [expand(rules.embed.output.embeddings, model=m, pool=wildcards.pool)[0] for m in EMBEDDERS]


def embed_records(wildcards):
    """summarize's --embed-figures and --embed-benchmarks: per model, in input order, its name and
    the sample's embed jobs' figures (JSON), and its name and their benchmark files."""
    figures, benchmarks = (
        [(m, *sample_pools(output, wildcards.sample, model=m)) for m in EMBEDDERS]
        for output in (rules.embed.output.figures, rules.embed.benchmark)
    )
    return figures, benchmarks


def embed_record_files(wildcards):
    """The files of embed_records, as summarize's input."""
    return [f for rows in embed_records(wildcards) for _, *files in rows for f in files]


def embed_record_options(wildcards):
    figures, benchmarks = embed_records(wildcards)
    return cli(embed_figures=figures, embed_benchmarks=benchmarks)


def calibration_inputs():
    """Per calibration sample: prepare's frames and sequences tables, its shards' scores."""
    return [
        expand([rules.prepare.output.frames, rules.prepare.output.sequences], sample=s)
        + shard_outputs(rules.score.output.scores, s)
        for s in SAMPLES.calibration.index
    ]


def training_embeddings(wildcards):
    """The training samples' embeddings (each pooled shard once), and their frames tables (the
    split holds out whole chunks): train's input, read as its --shard options."""
    samples, embeddings = SAMPLES.training(), rules.embed.output.embeddings
    files = dict.fromkeys(f for m in EMBEDDERS for s in samples for f in shard_outputs(embeddings, s, model=m))
    return list(files) + expand(rules.prepare.output.frames, sample=samples)


def labelled_shards(wildcards, input):
    """--shard per shard of every training sample: its label, its frames table, its rows in its
    pooled shard, and that shard's embeddings by each model, in input order."""
    shards = []
    for s in SAMPLES.training():
        (frames,) = expand(rules.prepare.output.frames, sample=s)
        embeddings = [shard_outputs(rules.embed.output.embeddings, s, model=m) for m in EMBEDDERS]
        label = SAMPLES.table.loc[s, "label"]
        shards += [
            (label, frames, p["offset"], p["offset"] + p["frames"], *paths)
            for p, *paths in zip(planned_shards(s), *embeddings)
        ]
    return cli(shard=shards)


def prediction_outputs():
    return expand([*rules.predict.output, *rules.call.output], sample=SAMPLES.sheet)


def report_outputs():
    """Per sample the run summary and the report's pages; the overview; the training figures when
    this run trains its classifier; the weighing figure with a calibration."""
    per_sample = expand([*rules.summarize.output, *rules.plot_sample.output], sample=SAMPLES.sheet)
    training = list(rules.plot_training.output) if TRAINS_HERE else []
    calibration = model_files.calibration_file(config)
    weighing = list(rules.plot_calibration.output) if calibration else []
    return per_sample + list(rules.overview.output) + training + weighing
