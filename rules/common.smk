import re
import sys
from pathlib import Path

import yaml
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

sys.path.insert(0, workflow.basedir)  # workflow_lib, from a checkout without installing

from workflow_lib.config_check import check_config, read_samples, source_of
from workflow_lib.errors import InputError
from workflow_lib.models.checkpoints import is_local

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
except InputError as error:
    raise WorkflowError(str(error)) from None  # Snakemake prints it without a traceback
validate(config, schema="../config/schema.yaml")  # fills in the defaults

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


def classifier_to_check():
    """The classifier is checked before embedding unless this workflow trains it (then it fits by construction)."""
    classifier = config["models"]["classifier"]
    return [] if classifier == config["train"]["classifier"] else [classifier]


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
        f"--max-ambiguous-fraction {config['input']['max_ambiguous_fraction']}"
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
        f"--commit-seconds {embedding['commit_seconds']}{expandable}"
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
    return f"--min-viral-fraction {config['predict']['min_viral_fraction']} {tables}"


def prediction_outputs():
    return expand(
        "results/{sample}/{name}", sample=samples.index, name=TABLES + VIRNUCPRO_TABLES
    )


def training_samples():
    labelled = samples.index[samples["label"] != ""]
    if len(labelled) == 0:
        raise ValueError(
            f"{config['samples']}: the train target needs samples labelled 'virus' or 'other' in a label column"
        )
    return labelled


def training_embeddings(wildcards):
    return {
        model: [f for s in training_samples() for f in shard_embeddings(s, model)]
        for model in MODELS
    }


def train_args(wildcards, input):
    shards = " ".join(
        f"--shard {samples.loc[s, 'label']} {dna} {esm}"
        for s in training_samples()
        for dna, esm in zip(shard_embeddings(s, "dnabert"), shard_embeddings(s, "esm"))
    )
    t = config["train"]
    balance = "" if t["balance_classes"] else "--no-balance-classes"
    return (
        f"{shards} --epochs {t['epochs']} --batch-size {t['batch_size']} --learning-rate {t['learning_rate']} "
        f"--patience {t['patience']} --validation-fraction {t['validation_fraction']} --seed {t['seed']} "
        f"--chunk-length {config['chunk_length']} {balance}"
    )
