"""The stages run outside the workflow, by tests and benchmarks: settings are the config's
defaults (from config/schema.yaml) unless given, and a stage's files lie in one directory under
the names the rules give them."""

import functools
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # workflow_lib, from a checkout without installing


def config_defaults() -> dict:
    """The config a run gets for every key it does not set: the schema's defaults."""
    from snakemake.utils import validate

    config = {"samples": "samples.tsv"}
    validate(config, str(ROOT / "config" / "schema.yaml"))
    return config


DEFAULTS = config_defaults()
ONE_SHARD = 10**12  # shard_tokens that keep any sample of a test or benchmark in one shard


def policy(**settings):
    from workflow_lib.prepare import Policy

    values = {
        "chunk_length": DEFAULTS["chunk_length"],
        "ambiguous_codons": DEFAULTS["translation"]["ambiguous_codons"],
        "min_length": DEFAULTS["input"]["min_length"],
        "max_ambiguous_fraction": DEFAULTS["input"]["max_ambiguous_fraction"],
    }
    return Policy(**(values | settings))


def prepared_files(outdir: Path):
    from workflow_lib.prepare import PreparedFiles

    outdir = Path(outdir)
    return PreparedFiles(
        outdir / "shards", outdir / "shards.tsv", outdir / "frames.tsv.gz", outdir / "sequences.tsv.gz"
    )


def prepare_into(input_path: Path, outdir: Path, shard_tokens: int | None = None, **settings) -> dict:
    """The prepare stage into `outdir`; `settings`: those of its Policy to change."""
    from workflow_lib.prepare import prepare

    tokens = shard_tokens or DEFAULTS["shard_tokens"]
    return prepare(input_path, prepared_files(outdir), policy(**settings), tokens, DEFAULTS["progress_seconds"])


def prepare_command(input_path: Path, outdir: Path, *options) -> list[str]:
    """scripts/prepare.py into `outdir`, with the config's defaults unless `options` give others."""
    files, options = prepared_files(outdir), tuple(map(str, options))
    given = {option for option in options if option.startswith("--")}
    command = [sys.executable, str(ROOT / "scripts" / "prepare.py"), "--input", str(input_path)]
    command += ["--shards", str(files.shards), "--shard-table", str(files.shard_table)]
    command += ["--frames", str(files.frames), "--sequences", str(files.sequences)]
    defaults = {
        "--chunk-length": DEFAULTS["chunk_length"],
        "--ambiguous-codons": DEFAULTS["translation"]["ambiguous_codons"],
        "--min-length": DEFAULTS["input"]["min_length"],
        "--max-ambiguous-fraction": DEFAULTS["input"]["max_ambiguous_fraction"],
        "--shard-tokens": DEFAULTS["shard_tokens"],
        "--progress-seconds": DEFAULTS["progress_seconds"],
    }
    command += [str(word) for option, value in defaults.items() if option not in given for word in (option, value)]
    return command + list(options)


@functools.cache
def model_check(model: str, checkpoint: str, cache_dir: str | None = None) -> dict:
    """What a run's model check records of a checkpoint's files (their SHA-256 among them), once a
    process: embed jobs given it hash nothing (ESM-2 3B's 5.7 GB take seconds). A file changed
    since is hashed again by the job (checksums.describe compares size and time)."""
    from workflow_lib import checksums
    from workflow_lib.models import embedding_model

    return checksums.describe(embedding_model(model).checkpoint_files(checkpoint, cache_dir))


def embed_settings(model: str, checkpoint, **settings):
    """EmbedSettings with the config's defaults, on the CPU, unless `settings` give others."""
    from workflow_lib.embed import EmbedSettings
    from workflow_lib.loader import default_num_workers

    embedding = DEFAULTS["embedding"]
    values = {
        "model": model,
        "checkpoint": str(checkpoint),
        "layer": None,
        "device": "cpu",
        "precision": embedding["precision"],
        "storage": embedding["storage"],
        "token_budget": embedding[f"{model}_token_budget"],
        "cache_dir": None,
        "num_workers": default_num_workers(len(os.sched_getaffinity(0))),
        "prefetch_factor": embedding["prefetch_factor"],
        "expandable_segments": embedding["expandable_segments"],
        "commit_seconds": embedding["commit_seconds"],
        "progress_seconds": DEFAULTS["progress_seconds"],
    } | settings
    if "known_checksums" not in settings:  # as a run's model check gives every embed job
        values["known_checksums"] = model_check(model, str(checkpoint), values["cache_dir"])
    return EmbedSettings(**values)


def embed_into(shard: Path, output: Path, settings, tokens: Path | None = None) -> dict:
    """The embed stage, its figures JSON beside the HDF5 output; `tokens`: the tokenize stage's file."""
    from workflow_lib.embed import embed_shard

    return embed_shard(shard, output, Path(output).with_suffix(".json"), settings, tokens)


def tokenize_into(shard: Path, checkpoint, output: Path) -> int:
    """The tokenize stage (DNABERT-S) on one shard's nucleotides, with a model check of its files."""
    from workflow_lib.stored_tokens import tokenize_shard

    return tokenize_shard(str(checkpoint), None, model_check("dnabert", str(checkpoint)), shard, output)


def train_settings(**settings):
    from workflow_lib.train import TrainSettings

    values = {k: v for k, v in DEFAULTS["train"].items() if k != "classifier"}
    return TrainSettings(**(values | settings))


def embed_command(model: str, checkpoint, shard: Path, output: Path, **options) -> list[str]:
    """scripts/embed.py on one shard, with the config's defaults on the CPU unless `options` (the
    script's options, `_` for `-`) give others. A model check of this model's files is written
    beside the output, as the check_models job writes it, unless `model_check` names another."""
    from workflow_lib.tables import write_json

    output, embedding = Path(output), DEFAULTS["embedding"]
    values = {
        "model": model,
        "checkpoint": checkpoint,
        "input": shard,
        "output": output,
        "figures": output.with_suffix(".json"),
        "model_check": output.with_name(f"{output.stem}.models.json"),
        "cache_dir": DEFAULTS["models"]["cache_dir"],
        "device": "cpu",
        "precision": embedding["precision"],
        "storage": embedding["storage"],
        "token_budget": embedding[f"{model}_token_budget"],
        "threads": len(os.sched_getaffinity(0)),
        "num_workers": embedding["num_workers"],
        "prefetch_factor": embedding["prefetch_factor"],
        "expandable_segments": embedding["expandable_segments"],
        "commit_seconds": embedding["commit_seconds"],
        "progress_seconds": DEFAULTS["progress_seconds"],
    } | options
    if "model_check" not in options and not Path(values["model_check"]).exists():
        files = model_check(model, str(checkpoint), str(values["cache_dir"]))
        write_json({model: {"files": files}}, values["model_check"])
    command = [sys.executable, str(ROOT / "scripts" / "embed.py")]
    for key, value in values.items():
        command += [f"--{key.replace('_', '-')}", str(value).lower() if isinstance(value, bool) else str(value)]
    return command


def shard_fastas(prepare_dir: Path, suffix: str) -> list[Path]:
    """prepare's shard FASTAs in `prepare_dir` (`fna` or `faa`), in shard order, as its shards table lists them."""
    from workflow_lib.sharding import read_shards, shard_fasta

    files = prepared_files(prepare_dir)
    return [shard_fasta(files.shards, row["shard"], suffix) for row in read_shards(files.shard_table)]


def score_into(prepare_dir: Path, dnabert_files: list, esm_files: list, classifier_path: Path, outdir: Path) -> dict:
    """The score stage on each shard's embeddings (scores files in `outdir`/scores), then the predict
    stage on them and prepare's tables in `prepare_dir`: its tables (VirNucPro's too) into `outdir`."""
    from workflow_lib.predict import ScoreFiles, write_tables
    from workflow_lib.score import score_shard

    prepare_dir, outdir = Path(prepare_dir), Path(outdir)
    scores = [outdir / "scores" / f"shard_{shard}.npz" for shard in range(len(dnabert_files))]
    for dnabert, esm, path in zip(dnabert_files, esm_files, scores, strict=True):
        score_shard(dnabert, esm, classifier_path, path, DEFAULTS["progress_seconds"])
    virnucpro = (outdir / "prediction_results.txt", outdir / "prediction_results_highestscore.csv")
    outputs = ScoreFiles(outdir / "frames.tsv", outdir / "chunks.tsv", outdir / "scoring.json", virnucpro)
    frames, sequences = prepare_dir / "frames.tsv.gz", prepare_dir / "sequences.tsv.gz"
    return write_tables(frames, sequences, scores, outputs, DEFAULTS["progress_seconds"])


def call_into(prepare_dir: Path, input_path: Path, outdir: Path) -> dict:
    """The call stage on predict's tables in `outdir`, with the config's settings; its files into `outdir`."""
    from workflow_lib.call import CallFiles, call
    from workflow_lib.regions import RegionSettings

    outdir = Path(outdir)
    names = ("sequences.tsv", "viral.fasta", "regions.tsv", "regions.fasta", "manifest.json")
    outputs = CallFiles(*(outdir / name for name in names))
    threshold = DEFAULTS["predict"]["min_viral_fraction"]
    regions = RegionSettings(**DEFAULTS["regions"])
    sequences = Path(prepare_dir) / "sequences.tsv.gz"
    return call(sequences, outdir / "chunks.tsv", outdir / "scoring.json", input_path, outputs, threshold, regions)
