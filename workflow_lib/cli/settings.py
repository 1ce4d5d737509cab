"""Each stage's settings, declared once: a frozen dataclass whose fields, made by `setting`, say
their type (the annotation), the config key that holds them and whether they can change results.
The stage's script makes its parser from the declaration (`add_arguments`, `from_arguments`) and
its rule makes the command line from it and the config (`config_values`, `cli`), so a new setting
is written in the schema, config.yaml and its declaration, and then used. Light on purpose: the
Snakefile imports it."""

import argparse
import dataclasses
import functools
import shlex
import types
import typing
from dataclasses import MISSING
from typing import Literal


def setting(key: str | None = None, *, help: str | None = None, results: bool = True, check=None, default=MISSING):
    """A declared setting. key: where the config holds it, dotted, `{model}` standing for the job's
    model (config/schema.yaml describes it); None: the rule passes it (threads, a wildcard, a value
    it derives), described by `help`. results=False: it cannot change any result, so the rule
    passes it as a job resource, which Snakemake never compares: changing it reruns nothing.
    check: a test of the parsed value, returning an error or None."""
    help = help or f"config {key} (config/README.md)"
    return dataclasses.field(default=default, metadata={"help": help, "key": key, "results": results, "check": check})


def positive(value: float) -> str | None:
    return None if value > 0 else "expected a positive number"


def fraction(value: float) -> str | None:
    return None if 0 <= value <= 1 else "expected a fraction within 0 and 1"


_NAMES = {int: "a whole number", float: "a number", str: "text"}


def _parser(kind):
    """The function that reads a value of the annotation `kind` from its command-line text."""
    origin, members = typing.get_origin(kind), typing.get_args(kind)
    if origin is Literal:

        def literal(text: str):
            if text not in members:
                raise argparse.ArgumentTypeError(f"expected one of {', '.join(members)}, got '{text}'")
            return text

        return literal
    if origin in (typing.Union, types.UnionType):
        members = [member for member in members if member is not type(None)]
        parsers = [_parser(member) for member in members]

        def either(text: str):
            for parse in parsers:
                try:
                    return parse(text)
                except (argparse.ArgumentTypeError, ValueError):
                    pass
            expected = " or ".join(_NAMES.get(m) or " or ".join(map(repr, typing.get_args(m))) for m in members)
            raise argparse.ArgumentTypeError(f"expected {expected}, got '{text}'")

        return either
    if kind is bool:

        def boolean(text: str) -> bool:
            if text.lower() not in ("true", "false"):
                raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")
            return text.lower() == "true"

        return boolean
    return kind


def _checked(parse, check):
    @functools.wraps(parse)  # argparse names the type in its error: "invalid int value"
    def parse_and_check(text: str):
        value = parse(text)
        if error := check(value):
            raise argparse.ArgumentTypeError(f"{error}, got {text}")
        return value

    return parse_and_check


def declared(declaration) -> list[dataclasses.Field]:
    """The fields of `declaration` that are settings (others are filled in by the script)."""
    return [f for f in dataclasses.fields(declaration) if "help" in f.metadata]


def add_arguments(parser: argparse.ArgumentParser, declaration) -> None:
    """An option per declared setting: --name-with-dashes, of the field's type, required unless it
    may be None or has a default."""
    for field in declared(declaration):
        kind, check, help = field.type, field.metadata["check"], field.metadata["help"]
        parse = _checked(_parser(kind), check) if check else _parser(kind)
        optional = type(None) in typing.get_args(kind) or field.default is not MISSING
        default = None if field.default is MISSING else field.default
        name = f"--{field.name.replace('_', '-')}"
        if typing.get_origin(kind) is dict:  # the option once per item: NAME=VALUE
            parser.add_argument(name, type=_item, action="append", default=[], metavar="NAME=VALUE", help=help)
            continue
        choices = typing.get_args(kind) if typing.get_origin(kind) is Literal else None
        metavar = "{" + ",".join(choices) + "}" if choices else None
        parser.add_argument(name, type=parse, required=not optional, default=default, metavar=metavar, help=help)


def _item(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not (name and equals):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got '{text}'")
    return name, value


def from_arguments(declaration, args: argparse.Namespace, **others):
    """The declaration from parsed arguments; `others`: its fields that are not settings."""
    values = {}
    for field in declared(declaration):
        value = getattr(args, field.name)
        values[field.name] = dict(value) if typing.get_origin(field.type) is dict else value
    return declaration(**values | others)


def config_value(config: dict, key: str, optional: bool = False):
    """The value of a dotted config key; with `optional`, None where the config lacks it."""
    value = config
    for part in key.split("."):
        if optional and part not in value:
            return None
        value = value[part]
    return value


def config_values(declaration, config: dict, *, model: str | None = None, results: bool | None = None) -> dict:
    """{name: value} of the declaration's settings that `config` holds, for `model` where a key
    names it; `results`: only those that can (True) or cannot (False) change results."""
    return {
        f.name: config_value(config, f.metadata["key"].format(model=model))
        for f in declared(declaration)
        if f.metadata["key"] and results in (None, f.metadata["results"])
    }


def cli(**options) -> str:
    """Command-line options, every value quoted for the shell: key_name=value gives --key-name
    value; a tuple, several values; a list, the option once per item; True/False, true/false;
    None leaves the option out; a dict, the option once per item, NAME=VALUE."""
    words = []
    for key, value in options.items():
        if isinstance(value, dict):
            value = [f"{name}={item}" for name, item in value.items()]
        for item in value if isinstance(value, list) else [] if value is None else [value]:
            words.append(f"--{key.replace('_', '-')}")
            for part in item if isinstance(item, tuple) else (item,):
                words.append(shlex.quote(str(part).lower() if isinstance(part, bool) else str(part)))
    return " ".join(words)


def tuning_keys(models) -> set[str]:
    """The config keys of every stage's settings that cannot change results, dotted, a key that
    names the model once per model of `models`."""
    return {
        f.metadata["key"].format(model=model)
        for declaration in STAGES
        for f in declared(declaration)
        if f.metadata["key"] and not f.metadata["results"]
        for model in models
    }


PROGRESS = setting("progress_seconds", results=False, check=positive)
THREADS = setting(help="CPUs of the job; torch uses exactly these")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PrepareSettings:
    """Validate, chunk, six-frame translate and shard one input file."""

    chunk_length: int = setting("chunk_length", check=positive)
    ambiguous_codons: Literal["drop", "X"] = setting("translation.ambiguous_codons")
    min_length: int = setting("input.min_length")
    max_ambiguous_fraction: float = setting("input.max_ambiguous_fraction", check=fraction)
    shard_tokens: int = setting("shard_tokens", check=positive)
    progress_seconds: float = PROGRESS


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanSettings:
    """Pack a generation of samples' shards into pooled shards."""

    shard_tokens: int = setting("shard_tokens", check=positive)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TokenizeSettings:
    """Tokenise a shard's sequences for a model whose tokens are stored (models.ARCHITECTURES)."""

    model: str = setting(help="the configured model, by its name in models.embedders")
    architecture: str = setting("models.{model}.architecture")
    checkpoint: str = setting("models.{model}.checkpoint")
    cache_dir: str = setting("models.cache_dir")


@dataclasses.dataclass(frozen=True, kw_only=True)
class EmbedSettings:
    """Embed a shard with one model."""

    model: str = setting(help="the configured model, by its name in models.embedders")
    architecture: str = setting("models.{model}.architecture")
    checkpoint: str = setting("models.{model}.checkpoint")
    layer: int | None = setting("models.{model}.layer")  # None: the last
    cache_dir: str | None = setting("models.cache_dir")
    device: Literal["auto", "cpu", "cuda"] = setting("embedding.device")
    precision: Literal["fp32", "fp16", "bf16", "fp8"] = setting("embedding.precision")  # on CUDA; the CPU uses fp32
    storage: Literal["float32", "float16"] = setting("embedding.storage")
    token_budget: int = setting("models.{model}.token_budget", results=False)
    num_workers: int | Literal["auto"] = setting("embedding.num_workers", results=False)
    prefetch_factor: int = setting("embedding.prefetch_factor", results=False)
    expandable_segments: bool = setting("embedding.expandable_segments", results=False)
    commit_seconds: float = setting("embedding.commit_seconds", results=False)
    embed_copies: bool = setting("embedding.embed_copies", results=False)
    progress_seconds: float = PROGRESS
    threads: int = THREADS
    # checksums.describe() of the model files by the run's model check: nothing to hash again
    known_checksums: dict | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScoreSettings:
    """Score a shard's frames with the classifier."""

    # outputs.keep_embeddings: false, said as a resource: keeping them or not reruns nothing
    remove_shard_fasta: bool = setting(help="remove the shard's FASTA pair once it is scored", default=False)
    progress_seconds: float = PROGRESS
    threads: int = THREADS


@dataclasses.dataclass(frozen=True, kw_only=True)
class PredictSettings:
    """Frame, chunk and VirNucPro tables from a sample's scores."""

    progress_seconds: float = PROGRESS


@dataclasses.dataclass(frozen=True, kw_only=True)
class CallSettings:
    """A call per record, and its viral regions."""

    min_viral_fraction: float = setting("predict.min_viral_fraction")
    region_max_gap: int = setting("regions.max_gap")
    region_min_length: int = setting("regions.min_length")
    max_qvalue: float | None = setting("call.max_qvalue", check=fraction)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainSettings:
    """Train the classifier (VirNucPro's recipe)."""

    epochs: int = setting("train.epochs")
    batch_size: int = setting("train.batch_size")
    learning_rate: float = setting("train.learning_rate")
    momentum: float = setting("train.momentum")
    patience: int = setting("train.patience")
    validation_fraction: float = setting("train.validation_fraction")
    calibration_folds: int = setting("train.calibration_folds")
    balance_classes: bool = setting("train.balance_classes")
    seed: int = setting("train.seed")
    chunk_length: int = setting("chunk_length")  # recorded in the checkpoint
    progress_seconds: float = PROGRESS
    threads: int = THREADS


@dataclasses.dataclass(frozen=True, kw_only=True)
class CalibrateSettings:
    """Fit a calibration for the classifier from labelled samples' scores."""

    chunk_length: int = setting("chunk_length")  # recorded in the calibration
    method: Literal["auto", "platt", "isotonic"] = setting("calibration.method")
    progress_seconds: float = PROGRESS


@dataclasses.dataclass(frozen=True, kw_only=True)
class FetchSettings:
    """Download the configured embedding models into the cache directory."""

    cache_dir: str = setting("models.cache_dir")
    checksums: dict[str, str] = setting(help="the SHA-256 of this job's files that models.checksums pins")
    progress_seconds: float = PROGRESS


@dataclasses.dataclass(frozen=True, kw_only=True)
class FetchClassifierSettings(FetchSettings):
    """Download the classifier given by URL into the cache directory and check it against the models."""

    classifier: str = setting("models.classifier")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckModelsSettings:
    """Check the configured models before any embedding."""

    cache_dir: str = setting("models.cache_dir")
    chunk_length: int = setting("chunk_length")
    classifier: str | None = setting(help="classifier file to check (left out when the workflow trains it)")
    classifier_chunk_length: int | None = setting(help="config models.classifier_chunk_length, given with --classifier")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlotSampleSettings:
    """Draw a sample's report figures and its table of top-scoring sequences."""

    top_sequences: int = setting("report.top_sequences")
    top_regions: int = setting("report.top_regions")
    table_rows: int = setting("report.table_rows")


STAGES = (
    FetchSettings,
    FetchClassifierSettings,
    CheckModelsSettings,
    PrepareSettings,
    PlanSettings,
    TokenizeSettings,
    EmbedSettings,
    ScoreSettings,
    PredictSettings,
    CallSettings,
    TrainSettings,
    CalibrateSettings,
    PlotSampleSettings,
)
