import json
import re
import shlex
import sys
from pathlib import Path

import yaml
from snakemake import __version__ as snakemake_version
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, workflow.basedir)  # workflow_lib, from a checkout without installing

from workflow_lib.config_check import (
    check_config,
    check_model_choice,
    read_samples,
    source_of,
)
from workflow_lib.errors import InputError
from workflow_lib.models.checkpoints import MANIFEST, classifier_path, is_local, is_url

# Where each config value came from, the one that wins first: --config, then the config files.
given = [str(f) for f in workflow.config_settings.configfiles]
config_sources = [("--config", workflow.config_settings.config)] + [
    (f, yaml.safe_load(Path(f).read_text()))
    for f in reversed(
        [str(f) for f in workflow.configfiles if str(f) not in given] + given
    )
]
try:
    check_config(config, f"{workflow.basedir}/config/schema.yaml", config_sources)
    samples = read_samples(
        config["samples"],
        f"{workflow.basedir}/config/samples.schema.yaml",
        source_of(["samples"], config_sources),
    )
    validate(config, schema="../config/schema.yaml")  # fills in the defaults
    check_model_choice(config, config_sources)
except InputError as error:
    raise WorkflowError(str(error)) from None  # Snakemake prints it without a traceback

SHARDS = range(config["shards"])
MODELS = ("esm", "dnabert")
SHARD_SUFFIX = {"esm": "faa", "dnabert": "fna"}
MODEL_CHECK = "results/checks/models.json"
# The demo DNABERT-S tokenizer is trained on this bundled genome, wherever the workflow runs.
DEMO_TOKENIZER_GENOME = f"{workflow.basedir}/resources/genomes/lambda_NC_001416.fasta"
TABLES = ["frames.tsv", "chunks.tsv", "sequences.tsv", "viral.fasta", "manifest.json"]
VIRNUCPRO_TABLES = (
    ["prediction_results.txt", "prediction_results_highestscore.csv"]
    if config["outputs"]["virnucpro_tables"]
    else []
)


wildcard_constraints:
    sample="|".join(map(re.escape, samples.index)),
    model="|".join(MODELS),
    shard=r"\d+",


def script(name):
    return f"{workflow.basedir}/scripts/{name}.py"


def sample_input(wildcards):
    return samples.loc[wildcards.sample, "path"]


def model_files():
    """Local model checkpoints (files or directories) as inputs, so that the workflow can build them."""
    checkpoints = (
        config["models"]["esm"]["checkpoint"],
        config["models"]["dnabert"]["checkpoint"],
    )
    return [c for c in checkpoints if is_local(c)]


def classifier_file():
    """The classifier that jobs read: models.classifier, or where fetch_models puts a URL's download."""
    models = config["models"]
    return classifier_path(models["classifier"], models["cache_dir"])


def classifier_to_check():
    """The classifier is checked before embedding unless this workflow trains it (then it fits by construction)."""
    classifier = classifier_file()
    return [] if classifier == config["train"]["classifier"] else [classifier]


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


def fetch_models_args(wildcards):
    models = config["models"]
    args = [
        f"--esm {shlex.quote(models['esm']['checkpoint'])}",
        f"--dnabert {shlex.quote(models['dnabert']['checkpoint'])}",
        f"--cache-dir {shlex.quote(models['cache_dir'])}",
        *(
            f"--checksum {shlex.quote(f'{n}={sha}')}"
            for n, sha in models["checksums"].items()
        ),
    ]
    if classifier_to_check():  # not the one this workflow trains
        args.append(f"--classifier {shlex.quote(models['classifier'])}")
    return " ".join(args)


def offline_env():
    """The environment prefix of jobs that load models: no network, named models from cache_dir."""
    torch_home = shlex.quote(f"{config['models']['cache_dir']}/torch")
    return f"HF_HUB_OFFLINE=1 TORCH_HOME={torch_home}"


def check_models_args(wildcards, input):
    classifier = f"--classifier {input.classifier}" if input.classifier else ""
    return (
        f"--esm {config['models']['esm']['checkpoint']} --esm-layer {config['models']['esm']['layer']} "
        f"--dnabert {config['models']['dnabert']['checkpoint']} --cache-dir {config['models']['cache_dir']} "
        f"{classifier}"
    )


def prepare_args(wildcards):
    return (
        f"--chunk-length {config['chunk_length']} --shards {config['shards']} "
        f"--ambiguous-codons {config['translation']['ambiguous_codons']} "
        f"--min-length {config['input']['min_length']} "
        f"--max-ambiguous-fraction {config['input']['max_ambiguous_fraction']} "
        f"--progress-seconds {config['progress_seconds']}"
    )


def shard_fasta(wildcards):
    return f"results/{wildcards.sample}/prepare/shard_{wildcards.shard}.{SHARD_SUFFIX[wildcards.model]}"


def embed_args(wildcards):
    embedding = config["embedding"]
    if wildcards.model == "esm":
        model = config["models"]["esm"]
        specific = f"--checkpoint {model['checkpoint']} --layer {model['layer']} --token-budget {embedding['esm_token_budget']}"
    else:
        specific = (
            f"--checkpoint {config['models']['dnabert']['checkpoint']} "
            f"--token-budget {embedding['dnabert_token_budget']}"
        )
    expandable = "" if embedding["expandable_segments"] else " --no-expandable-segments"
    return (
        f"--model {wildcards.model} {specific} --device {embedding['device']} "
        f"--precision {embedding['precision']} --cache-dir {config['models']['cache_dir']} "
        f"--num-workers {embedding['num_workers']} --prefetch-factor {embedding['prefetch_factor']} "
        f"--commit-seconds {embedding['commit_seconds']} "
        f"--progress-seconds {config['progress_seconds']}{expandable}"
    )


def embed_threads(wildcards):
    """The main process and its loader workers. auto asks for 2 workers: they pack tens of
    thousands of frames a second, far more than a GPU embeds, and leave cores for other jobs.
    """
    workers = config["embedding"]["num_workers"]
    return (2 if workers == "auto" else workers) + 1


def embeddings_path(path):
    return path if config["outputs"]["keep_embeddings"] else temp(path)


def shard_embeddings(sample, model):
    return expand(
        "results/{sample}/embeddings/{model}/shard_{shard}.h5",
        sample=sample,
        model=model,
        shard=SHARDS,
    )


def predict_args(wildcards):
    tables = "" if config["outputs"]["virnucpro_tables"] else "--no-virnucpro-tables"
    return (
        f"--min-viral-fraction {config['predict']['min_viral_fraction']} "
        f"--progress-seconds {config['progress_seconds']} {tables}"
    )


def prediction_outputs():
    return expand(
        "results/{sample}/{name}", sample=samples.index, name=TABLES + VIRNUCPRO_TABLES
    )


def shard_benchmarks(sample, model):
    return expand(
        "results/benchmarks/embed/{sample}/{model}_{shard}.tsv",
        sample=sample,
        model=model,
        shard=SHARDS,
    )


def summarize_args(wildcards):
    """The run's config and the Snakemake version go into the run summary."""
    return f"--config {shlex.quote(json.dumps(config))} --snakemake-version {snakemake_version}"


def plot_sample_args(wildcards):
    shown = config["report"]
    return (
        f"--top-sequences {shown['top_sequences']} --table-rows {shown['table_rows']}"
    )


def report_outputs():
    """Per sample the run summary and the report's figures and table; the training figures when
    this workflow trains the classifier that it uses."""
    per_sample = expand(
        [*rules.summarize.output, *rules.plot_sample.output], sample=samples.index
    )
    trained = config["models"]["classifier"] == config["train"]["classifier"]
    return per_sample + (list(rules.plot_training.output) if trained else [])


def training_samples():
    labelled = samples.index[samples["label"] != ""]
    if len(labelled) == 0:
        raise ValueError(
            f"{config['samples']}: the train target needs samples labelled 'virus' or 'other' in a label column"
        )
    return labelled


def frames_table(sample):
    return f"results/{sample}/prepare/frames.tsv.gz"


def training_embeddings(wildcards):
    """The training samples' embeddings, and their frames tables (the split holds out whole chunks)."""
    return {
        model: [f for s in training_samples() for f in shard_embeddings(s, model)]
        for model in MODELS
    } | {"frames": [frames_table(s) for s in training_samples()]}


def train_args(wildcards, input):
    shards = " ".join(
        f"--shard {samples.loc[s, 'label']} {dna} {esm} {frames_table(s)}"
        for s in training_samples()
        for dna, esm in zip(shard_embeddings(s, "dnabert"), shard_embeddings(s, "esm"))
    )
    t = config["train"]
    balance = "" if t["balance_classes"] else "--no-balance-classes"
    return (
        f"{shards} --epochs {t['epochs']} --batch-size {t['batch_size']} --learning-rate {t['learning_rate']} "
        f"--patience {t['patience']} --validation-fraction {t['validation_fraction']} --seed {t['seed']} "
        f"--chunk-length {config['chunk_length']} --progress-seconds {config['progress_seconds']} {balance}"
    )
