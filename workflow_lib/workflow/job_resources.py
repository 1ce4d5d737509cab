"""What a job asks of the machine (threads, GPUs and GPU memory, minutes, memory), from the config, its shard (one
shard's work, whatever the sample's size) or its input files, and its priority. The rules call these
(rules/common.smk)."""

import functools
import os

from workflow_lib.embed import rates
from workflow_lib.io.tables import read_json
from workflow_lib.models import ARCHITECTURES

# a margin below one core's rate (docs/performance.md: the host side of the embed job)
TOKENIZE_TOKENS_PER_S = 500_000
EMBED_START_MINUTES = 10  # model load, worker start-up, a kernel compile
EMBED_MARGIN = 1.5  # on the planned rate (embed_rate)


# A sample of at most this much input (about 2 M reads of 500 bp) is small: its CPU jobs take
# seconds to a few minutes, so a cluster run batches many samples' jobs into one submission.
SMALL_SAMPLE_BYTES = 1 << 30

# Job order, so that the embeddings on disk at any moment are bounded by the jobs in flight, not by
# the samples: the plan first (temp files are kept while a checkpoint is pending), a shard's scoring
# as soon as it can run, then the embed jobs, lower shards first: EMBED_PRIORITY - shard for the
# samples that train this run's classifier (no shard is scored before it), half that for the others.
EMBED_PRIORITY = 1_000_000
PRIORITY = {"plan": 3 * EMBED_PRIORITY, "score": 2 * EMBED_PRIORITY}


# prepare holds a shard until it is full: its FASTA pair as Python bytes, with a margin
# (docs/performance.md measures the bytes a token)
PREPARE_BYTES_PER_TOKEN = 8


def prepare_mem_mb(shard_tokens: int) -> int:
    return 1000 + shard_tokens * PREPARE_BYTES_PER_TOKEN // 2**20


@functools.cache
def small_sample(files: tuple[str, ...]) -> bool:
    """The sample of these input files is small (a file not there yet counts for nothing)."""
    return sum(os.path.getsize(f) for f in files if os.path.isfile(f)) <= SMALL_SAMPLE_BYTES


def embed_priority(pool: str, trains: bool) -> int:
    """The priority of the jobs of pooled shard `pool` ({generation}-{n}); `trains`: it holds
    samples that train this run's classifier."""
    return max(1, EMBED_PRIORITY // (1 if trains else 2) - int(pool.split("-")[1]))


def by_input(floor: int, per_gb: float, name: str | None = None):
    """A resource (mem_mb, or runtime in minutes) that grows with a job's input: `floor`, plus
    `per_gb` for every GB of its input `name` (every input when None). Known once those files
    exist: Snakemake evaluates it again then, before it submits the job."""

    def resource(wildcards, input) -> int:
        # sizes read here, not by input.size_mb: that is a coroutine which `snakemake --report`
        # never awaits (a RuntimeWarning per job); an input not known yet (behind the plan
        # checkpoint) counts as none until it is
        files = input if name is None else getattr(input, name, [])
        files = [files] if isinstance(files, str) else files
        size_mb = sum(os.path.getsize(f) for f in files if os.path.isfile(f)) / 1024**2
        return int(floor + per_gb * size_mb / 1024 + 0.999)

    return resource


def tokenize_minutes(tokens: int) -> int:
    """2 minutes, plus the shard's tokens (its ESM-2 count; DNABERT-S's are about as many)."""
    return _minutes(2 + tokens / TOKENIZE_TOKENS_PER_S / 60)


# The GPU memory of an embed job, which its local claim on a GPU takes (docs/cluster.md): the model's
# weights and the activations of a batch at its token budget, both in the job's precision, by its
# architecture's constants (models.ARCHITECTURES); and an allowance for the CUDA context and what
# the allocator holds beyond its peak (not measured).
GPU_CONTEXT_MB = 1500


def weight_bytes(architecture: str, layers: int, dim: int, precision: str) -> tuple[int, int]:
    """The bytes of a model's weights on the device (by its architecture's constants): (while it
    loads, once loaded). They differ in fp8: the model loads in fp16, then the weights of its
    FP8 GEMMs take 1 byte each, not 2, in every layer but the first and the last."""
    declared = ARCHITECTURES[architecture]
    loaded = declared.weights_per_layer * layers * dim**2 * (4 if precision == "fp32" else 2)
    if precision != "fp8":
        return loaded, loaded
    return loaded, loaded - declared.fp8_weights_per_layer * max(layers - 2, 0) * dim**2


def embed_gpu_mem_mb(model: str, model_check: str, config: dict) -> int:
    """The GPU memory (MB, MiB as nvidia-smi counts) of an embed job of `model` (its name in
    models.embedders), from its layers and width in the model check (`model_check`, a JSON file)
    and its token budget and precision: the larger of its weights while loading and its weights
    once loaded with a batch's activations."""
    shape, entry = read_json(model_check)[model], config["models"][model]
    precision = config["embedding"]["precision"]
    loading, loaded = weight_bytes(entry["architecture"], shape["layers"], shape["dim"], precision)
    activations = ARCHITECTURES[entry["architecture"]].activations_per_token * entry["token_budget"] * shape["dim"]
    activations *= 4 if precision == "fp32" else 2
    return int(GPU_CONTEXT_MB + max(loading, loaded + activations) / 2**20 + 0.999)


def embed_rate(model: str, model_check: str, config: dict, gpu_model: str | None = None) -> float:
    """The shard tokens/s an embed job of `model` is planned at: the rate recorded for its model
    (embed/rates.py, by its shape in the model check `model_check` and its precision) on the CPU
    with embedding.device cpu, else on the slowest GPU recorded, or the slowest whose name holds
    `gpu_model` (the profile's, any case: "h100" in "NVIDIA H100 80GB HBM3"); with none recorded,
    models.<model>.assumed_tokens_per_s."""
    on_cpu = config["embedding"]["device"] == "cpu"
    default = config["models"][model]["assumed_tokens_per_s"]["cpu" if on_cpu else "cuda"]
    if not os.path.isfile(model_check):  # not made yet: no embed job is planned either
        return default
    key = rates.model_key(read_json(model_check)[model], config["embedding"]["precision"])
    recorded = rates.recorded(config["models"]["cache_dir"], key)
    if on_cpu:
        return recorded.get("cpu", default)
    named = (gpu_model or "").lower()
    return min(
        (rate for device, rate in recorded.items() if device != "cpu" and named in device.lower()), default=default
    )


def profile_gpu_model(overwrite_resources) -> str | None:
    """The GPU model that the profile's set-resources give embed jobs (the SLURM plugin's gpu_model),
    from Snakemake's workflow.resource_settings.overwrite_resources: the text as written."""
    found = overwrite_resources.get("embed", {}).get("gpu_model")
    return None if found is None else str(getattr(found, "raw", found)).strip("'\"")


def embed_minutes(tokens: int, rate: float) -> int:
    """The start, plus EMBED_MARGIN times the shard's ESM-2 tokens at `rate` (embed_rate)."""
    return _minutes(EMBED_START_MINUTES + EMBED_MARGIN * tokens / rate / 60)


def embed_threads(embedding: dict) -> int:
    """The main process and its loader workers. auto asks for 2 workers: they pack far more frames
    than a GPU embeds (docs/performance.md), and leave cores for other jobs."""
    workers = embedding["num_workers"]
    return (2 if workers == "auto" else workers) + 1


def _minutes(minutes: float) -> int:
    return int(minutes + 0.999)
