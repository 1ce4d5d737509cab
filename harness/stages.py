"""Each stage run outside the workflow, from Python or as its script, as the tests and benchmarks
run them: settings are the config's defaults (from config/schema.yaml) unless given, and a stage's
files lie in one directory under the names the rules give them. Also their input: reads sampled
from the bundled genomes."""

import functools
import os
import random
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GENOMES = ROOT / "resources" / "genomes"


def _defaults() -> dict:
    """The settings of a run whose config sets only its samples sheet: config/config.yaml's, each
    listed model's entry complete (workflow.config_check.run_settings)."""
    from workflow_lib.workflow.config_check import run_settings

    return run_settings({"samples": "samples.tsv"}, ROOT / "config", [])[0]


DEFAULTS = _defaults()
ONE_SHARD = 10**12  # shard_tokens that keep any sample of a test or benchmark in one shard


def from_config(declaration, config: dict, *, model: str | None = None, **others):
    """The declaration with its values in `config` for `model` (where a key names it, and as its
    `model` when it has one); `others`: its fields that the config does not hold, or values to use
    instead."""
    from workflow_lib.cli.settings import config_values

    values = config_values(declaration, config, model=model)
    if "model" in declaration.__dataclass_fields__:
        values["model"] = model
    return declaration(**values | others)


def prepared_files(outdir: Path):
    from workflow_lib.prepare.job import PreparedFiles

    outdir = Path(outdir)
    return PreparedFiles(
        outdir / "shards",
        outdir / "shards.tsv",
        outdir / "bins.npz",
        outdir / "frames.tsv.gz",
        outdir / "sequences.tsv.gz",
    )


def _sample_reads(reads):
    """`reads`: an input file, or io.reads.SampleReads, as the latter."""
    from workflow_lib.io.reads import SampleReads

    return reads if isinstance(reads, SampleReads) else SampleReads((Path(reads),))


def prepare_into(reads, outdir: Path, shard_tokens: int | None = None, **settings) -> dict:
    """The prepare stage into `outdir` from `reads` (an input file, or io.reads.SampleReads);
    `settings`: those of PrepareSettings to change."""
    from workflow_lib.cli.settings import PrepareSettings
    from workflow_lib.prepare.job import prepare

    settings |= {"shard_tokens": shard_tokens} if shard_tokens else {}
    return prepare(_sample_reads(reads), prepared_files(outdir), from_config(PrepareSettings, DEFAULTS, **settings))


def script_command(script: str, declaration=None, *, model: str | None = None, **options) -> list[str]:
    """scripts/<script>.py with `options` (`_` for `-`: its files, and settings to change; None leaves
    one out) and, for the rest of the stage's declared settings, the config's defaults (`model`'s,
    where a key names it; also passed as --model)."""
    from workflow_lib.cli.settings import cli, config_values

    values = config_values(declaration, DEFAULTS, model=model) if declaration else {}
    values |= {"model": model} if model else {}
    return [sys.executable, str(ROOT / "scripts" / f"{script}.py"), *shlex.split(cli(**values | options))]


def prepare_command(input_path: Path, outdir: Path, *options) -> list[str]:
    """scripts/prepare.py into `outdir`, with the config's defaults unless `options` (the script's
    words: option, value, ...) give others."""
    from workflow_lib.cli.settings import PrepareSettings

    files = prepared_files(outdir)
    given = {option[2:].replace("-", "_"): value for option, value in zip(options[::2], options[1::2])}
    return script_command(
        "prepare",
        PrepareSettings,
        input=input_path,
        shards=files.shards,
        shard_table=files.shard_table,
        bins=files.bins,
        frames=files.frames,
        sequences=files.sequences,
        **given,
    )


@functools.cache
def model_check(model: str, checkpoint: str, cache_dir: str | None = None) -> dict:
    """What a run's model check records of a checkpoint's files (their SHA-256 among them), once a
    process: embed jobs given it hash nothing (ESM-2 3B's 5.7 GB take seconds). A file changed
    since is hashed again by the job (checksums.describe compares size and time)."""
    from workflow_lib.io import checksums
    from workflow_lib.models import loading_module

    loading = loading_module(DEFAULTS["models"][model]["architecture"])
    return checksums.describe(loading.checkpoint_files(checkpoint, cache_dir))


def embed_settings(model: str, checkpoint, **settings):
    """EmbedSettings with the config's defaults, on the CPU, unless `settings` give others."""
    from workflow_lib.cli.settings import EmbedSettings

    values = {"checkpoint": str(checkpoint), "layer": None, "cache_dir": None, "device": "cpu"}
    values |= {"threads": len(os.sched_getaffinity(0))} | settings
    if "known_checksums" not in values:  # as a run's model check gives every embed job
        values["known_checksums"] = model_check(model, str(checkpoint), values["cache_dir"])
    return from_config(EmbedSettings, DEFAULTS, model=model, **values)


def embed_into(shard: Path, output: Path, settings, tokens: Path | None = None) -> dict:
    """The embed stage, its figures JSON beside the HDF5 output; `tokens`: the tokenize stage's file."""
    from workflow_lib.embed.job import embed_shard

    return embed_shard(shard, output, Path(output).with_suffix(".json"), settings, tokens)


def tokenize_into(shard: Path, checkpoint, output: Path) -> int:
    """The tokenize stage of the default config's model whose tokens are stored (DNABERT-S) on one
    shard, with a model check of its files."""
    from workflow_lib.embed.stored_tokens import tokenize_shard
    from workflow_lib.models import embedders

    (embedder,) = [e for e in embedders(DEFAULTS) if e.declared.stored_tokens]
    known = model_check(embedder.name, str(checkpoint))
    return tokenize_shard(embedder.architecture, str(checkpoint), None, known, shard, output)


def train_settings(**settings):
    """TrainSettings with the config's defaults unless `settings` give others."""
    from workflow_lib.cli.settings import TrainSettings

    return from_config(TrainSettings, DEFAULTS, **{"threads": 1} | settings)


def embed_command(model: str, checkpoint, shard: Path, output: Path, **options) -> list[str]:
    """scripts/embed.py on one shard, with the config's defaults on the CPU (on a GPU, a whole one)
    unless `options` (the script's options, `_` for `-`) give others. A model check of this
    model's files is written beside the output, as the check_models job writes it."""
    from workflow_lib.cli.settings import EmbedSettings
    from workflow_lib.io.tables import write_json

    output = Path(output)
    checked = output.with_name(f"{output.stem}.models.json")
    if not checked.exists():
        cache_dir = options.get("cache_dir", DEFAULTS["models"]["cache_dir"])
        write_json({model: {"files": model_check(model, str(checkpoint), str(cache_dir))}}, checked)
    values = {"checkpoint": checkpoint, "layer": None, "device": "cpu", "input": shard, "gpus": 1, "gpu_mem_mb": 0}
    values |= {"embeddings": output, "figures": output.with_suffix(".json"), "threads": len(os.sched_getaffinity(0))}
    values |= {"model_check": checked} | options
    return script_command("embed", EmbedSettings, model=model, **values)


def shard_fastas(prepare_dir: Path, suffix: str) -> list[Path]:
    """prepare's shard FASTAs in `prepare_dir` (`fna` or `faa`), in shard order, as its shards table lists them."""
    from workflow_lib.io.sharding import shard_fasta
    from workflow_lib.io.tables import read_table

    files = prepared_files(prepare_dir)
    return [shard_fasta(files.shards, shard, suffix) for shard in read_table(files.shard_table)["shard"]]


def score_into(prepare_dir: Path, embeddings: list, classifier_path: Path, outdir: Path) -> dict:
    """The score stage on each shard's embeddings (per shard, its files by each model in input
    order; scores files in `outdir`/scores), then the predict stage on them and prepare's tables in
    `prepare_dir`: its tables (VirNucPro's too) into `outdir`."""
    from workflow_lib.classify.predict import ScoreFiles, write_tables
    from workflow_lib.classify.score import score_shard

    prepare_dir, outdir = Path(prepare_dir), Path(outdir)
    scores = [outdir / "scores" / f"shard_{shard}.npz" for shard in range(len(embeddings))]
    for files, path in zip(embeddings, scores, strict=True):
        score_shard(files, classifier_path, path, DEFAULTS["progress_seconds"])
    virnucpro = (outdir / "prediction_results.txt", outdir / "prediction_results_highestscore.csv")
    outputs = ScoreFiles(outdir / "frames.tsv", outdir / "chunks.tsv", outdir / "scoring.json", virnucpro)
    frames, sequences = prepare_dir / "frames.tsv.gz", prepare_dir / "sequences.tsv.gz"
    return write_tables(frames, sequences, scores, prepare_dir / "bins.npz", outputs, DEFAULTS["progress_seconds"])


def call_into(prepare_dir: Path, reads, outdir: Path) -> dict:
    """The call stage on predict's tables in `outdir`, with the config's settings; its files into
    `outdir`. `reads`: the input file, or io.reads.SampleReads."""
    from workflow_lib.classify.call import CallFiles, call
    from workflow_lib.classify.regions import RegionSettings

    outdir = Path(outdir)
    names = ("sequences.tsv", "viral.fasta", "regions.tsv", "regions.fasta", "manifest.json")
    outputs = CallFiles(*(outdir / name for name in names))
    threshold = DEFAULTS["predict"]["min_viral_fraction"]
    regions = RegionSettings(**DEFAULTS["regions"], min_viral_fraction=threshold)
    sequences = Path(prepare_dir) / "sequences.tsv.gz"
    scoring = outdir / "scoring.json"
    return call(sequences, outdir / "chunks.tsv", scoring, _sample_reads(reads), outputs, threshold, regions)


def write_reads(path: Path, n: int, length: int, seed: int) -> None:
    """Sample n reads uniformly from the bundled genomes (both strands are covered by the frames)."""
    from workflow_lib.io.seqio import read_records

    genomes = [seq for f in sorted(GENOMES.glob("*.fasta")) for _, _, seq in read_records(f)]
    rng = random.Random(seed)
    with open(path, "w") as out:
        for i in range(n):
            genome = rng.choice(genomes)
            start = rng.randrange(len(genome) - length)
            out.write(f">read_{i}\n{genome[start : start + length].decode()}\n")


def prepared_reads(workdir: Path, reads: int) -> dict[str, Path]:
    """`reads` 500 bp reads sampled from the bundled genomes, prepared in `workdir` into one shard:
    its protein (`faa`) and nucleotide (`fna`) FASTA."""
    write_reads(workdir / "reads.fa", reads, 500, seed=1)
    prepare_into(workdir / "reads.fa", workdir / "prepared", ONE_SHARD, chunk_length=500)
    return {suffix: shard_fastas(workdir / "prepared", suffix)[0] for suffix in ("faa", "fna")}
