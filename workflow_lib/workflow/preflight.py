"""The preflight (rules/embed.smk): run once on a node of the partition the embed jobs will use, it
says whether torch there sees the GPU, loads each configured model from the cache, and times each
on real frames: reads cut from a bundled genome, prepared by the prepare stage's own code, then the
embed job itself (embed/job.py) on the first frames of that shard. It reports each model's steady
rate, what a shard of `shard_tokens` takes and asks for at that rate, and the peak GPU memory of
batches at the model's token budget; each rate is recorded as an embed job's is (embed/rates.py),
so that later runs' embed jobs ask for runtimes at this GPU's rate."""

import dataclasses
import logging
import tempfile
from pathlib import Path

import torch

from workflow_lib.cli.errors import InputError
from workflow_lib.cli.settings import EmbedSettings, PrepareSettings
from workflow_lib.embed import rates
from workflow_lib.embed.job import embed_shard
from workflow_lib.embed.stored_tokens import tokenize_shard
from workflow_lib.io.reads import SampleReads
from workflow_lib.io.seqio import read_records
from workflow_lib.io.sharding import shard_fasta
from workflow_lib.io.tables import read_json, write_json
from workflow_lib.models import ARCHITECTURES
from workflow_lib.prepare.job import PreparedFiles, prepare
from workflow_lib.workflow import job_resources

log = logging.getLogger("workflow")
# Frames embedded per model: dozens of batches on a GPU; fewer on the CPU, where a real model
# embeds a few hundred tokens a second.
FRAMES = {"cuda": 3000, "cpu": 300}
READ_STEP = 20  # bp between the starts of the reads cut from the genome: overlapping, many frames


def preflight(genome: str, prepare_settings: PrepareSettings, models: list[EmbedSettings], model_check: str, output):
    """Check each of `models` (its embed job's settings) on frames of `genome`; write the report
    (JSON) to `output`."""
    on_gpu = torch.cuda.is_available() and models[0].device != "cpu"
    if on_gpu:
        gpu = torch.cuda.get_device_properties(0)
        log.info(
            "torch %s sees %d GPU(s): %s, %d MiB",
            torch.__version__,
            torch.cuda.device_count(),
            gpu.name,
            gpu.total_memory >> 20,
        )
    else:
        why = "embedding.device is cpu" if models[0].device == "cpu" else "torch sees no GPU on this node"
        log.warning("%s (torch %s, CUDA %s): the preflight runs on the CPU", why, torch.__version__, torch.version.cuda)
    report = {"device": gpu.name if on_gpu else "cpu", "torch": torch.__version__, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        fna, frames, tokens = _frames(genome, prepare_settings, Path(tmp), FRAMES["cuda" if on_gpu else "cpu"])
        log.info("%d frames (%d ESM-2 tokens) of %s", frames, tokens, genome)
        for settings in models:
            check = read_json(model_check)[settings.model]
            found = _embed(settings, rates.model_key(check, settings.precision), fna, frames, tokens, Path(tmp))
            # what a shard of shard_tokens takes at that rate, and what its embed job asks for
            shard_tokens, rate = prepare_settings.shard_tokens, found["tokens_per_s"]
            found["shard_tokens"] = shard_tokens
            found["shard_minutes"] = round(shard_tokens / rate / 60, 1)
            found["shard_runtime_request_minutes"] = job_resources.embed_minutes(shard_tokens, rate)
            log.info(rates.preflight_line(settings.model, found))
            report["models"][settings.model] = found
    write_json(report, output)


def _frames(genome: str, settings: PrepareSettings, tmp: Path, n: int) -> tuple[Path, int, int]:
    """A shard FASTA pair of the first `n` frames of reads of one chunk cut from `genome`, made by
    the prepare stage: (its fna, its frames, its ESM-2 tokens)."""
    (_, _, sequence), *_ = read_records(genome)
    reads = tmp / "reads.fa"
    starts = range(0, len(sequence) - settings.chunk_length + 1, READ_STEP)
    reads.write_bytes(b"".join(b">r%d\n%s\n" % (i, sequence[i : i + settings.chunk_length]) for i in starts))
    files = PreparedFiles(
        tmp / "shards", tmp / "shards.tsv", tmp / "bins.npz", tmp / "frames.tsv.gz", tmp / "sequences.tsv.gz"
    )
    prepare(SampleReads((reads,)), files, dataclasses.replace(settings, shard_tokens=2**62))
    for suffix in ("fna", "faa"):  # the same records in the same order in both
        lines = shard_fasta(files.shards, 0, suffix).read_text().splitlines(keepends=True)[: 2 * n]
        (tmp / f"frames.{suffix}").write_text("".join(lines))
    proteins = lines[1::2]
    return tmp / "frames.fna", len(proteins), sum(len(p.strip()) + 2 for p in proteins)


def _embed(settings: EmbedSettings, key: str, fna: Path, frames: int, tokens: int, tmp: Path) -> dict:
    """The embed job on the frames (their tokens first, for a model whose tokens are stored): its
    steady rate in shard tokens/s, and its peak memory against the GPU's."""
    declared = ARCHITECTURES[settings.architecture]
    fasta = fna.with_suffix(f".{declared.alphabet}")
    stored = tmp / f"{settings.model}_tokens.h5" if declared.stored_tokens else None
    if stored:
        tokenize_shard(
            settings.architecture, settings.checkpoint, settings.cache_dir, settings.known_checksums, fasta, stored
        )
    output = tmp / settings.model
    stats = embed_shard(
        fasta, f"{output}.h5", f"{output}.json", settings, stored, frames, rate_key=key, planned_tokens=tokens
    )
    found = {"model_key": key, "device": stats["device"], "precision": stats["precision"], "batches": stats["batches"]}
    if stats["batches"] < 2:
        raise InputError(
            f"{settings.model}: {frames} frames made one batch, which has no steady rate; lower its token_budget"
        )
    found["tokens_per_s"] = round(stats["tokens_per_s"] * tokens / stats["n_tokens"])
    if stats["device"] == "cpu":
        return found | {"memory": "not applicable on the CPU"}
    total = torch.cuda.get_device_properties(torch.device(stats["device"])).total_memory
    halved = stats["oom_splits"]
    fits = f"does not fit ({halved} batches halved): lower it" if halved else "fits"
    return found | {
        "peak_memory_gib": round(stats["peak_memory_bytes"] / 2**30, 2),
        "device_memory_gib": round(total / 2**30, 2),
        "memory": f"token_budget {settings.token_budget} {fits}",
    }
