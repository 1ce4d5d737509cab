"""The workflow's start-up, one call from rules/common.smk: Snakemake's scheduling mended, the run's
settings and its samples sheets checked, and the run's settings and samples as the rules read them.
One line per problem, naming the file (or --config), the key or the sheet's line, and what to do;
never a schema dump, nor a crash of the workflow. The schema checks each key; the checks here are
those across keys and files that it cannot express."""

import copy
import dataclasses
import io
import logging
import os
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

import pandas as pd
import yaml
from jsonschema import Draft202012Validator
from snakemake.utils import update_config

from workflow_lib.classify.calibration import Calibration
from workflow_lib.cli.errors import InputError
from workflow_lib.cli.settings import config_value
from workflow_lib.io import checksums
from workflow_lib.io.reads import SampleReads, check_first_fragment
from workflow_lib.io.tables import read_json
from workflow_lib.models import embedders, model_entry, named_shape
from workflow_lib.models.checkpoints import check_layer, classifier_path, is_url
from workflow_lib.models.classifier_chunks import (
    VIRNUCPRO_URL,
    check_chunk_length,
    embedders_refusal,
    recorded_metadata,
)
from workflow_lib.prepare.plan import generations
from workflow_lib.workflow import snakemake_patches


@dataclasses.dataclass(frozen=True)
class Samples:
    """The run's samples: the samples sheet's, then the calibrate target's (calibration.samples)."""

    table: pd.DataFrame  # by sample: reads (io.reads.SampleReads: its files) and label ('' for none)
    sheet: list[str]  # the samples sheet's
    calibration: pd.DataFrame  # calibration.samples' rows
    generation: dict[str, int]  # samples planned together share one; appended ones plan apart
    labelled: bool  # the samples sheet labels samples for the train target

    def training(self) -> list[str]:
        return [s for s in self.sheet if self.table.loc[s, "label"] != ""]

    def files(self, sample: str) -> list[str]:
        """The sample's files: its paths in the sheet's order, then its mate files."""
        return list(map(str, self.table.loc[sample, "reads"].files()))

    def of_generation(self, generation: int | str) -> list[str]:
        return [s for s in self.table.index if self.generation[s] == int(generation)]


def refuse(error: InputError) -> NoReturn:
    """A config or sheet error: its lines alone, not dressed as a crash of the workflow."""
    print(error, file=sys.stderr)
    sys.exit(1)


def readable_yaml(path: str) -> str:
    """`path`, a config file Snakemake can read; else the run ends naming the file, the line and the column."""
    try:
        yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        tab = " (indent with spaces: YAML allows no tabs)" if "\t" in str(error) else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        refuse(InputError(f"{path}: {where}not valid YAML: {problem}{tab}; fix it"))
    return path


def start(workflow, config: dict, root: str, plan_dir: str, recorded: str, model_check: str) -> tuple[dict, Samples]:
    """Mends Snakemake's scheduling, checks the config and the samples sheets, and warns where the
    config differs from the settings that made the results (`recorded`): the run's settings
    (config_check.run_settings: every key, `config` left as it is) and its samples. `root`: the
    checkout, whose config/ holds the defaults and the schemas; `plan_dir`: where the plans are;
    `model_check`: the model check's report, where an earlier run made it."""
    unmended = snakemake_patches.mend_all()
    # Snakemake's log file on a full disk: each message would print a traceback ("--- Logging error
    # ---"); the console still gets every message, and onerror says the disk is full.
    logging.raiseExceptions = False
    try:
        settings, warnings, samples = _checked(workflow, config, root, plan_dir, model_check)
    except InputError as error:
        refuse(error)
    if workflow.is_main_process:  # once, not in every cluster job
        for line in [unmended] * bool(unmended) + warnings + recorded_differences(settings, recorded):
            print(f"Warning: {line}", file=sys.stderr)
    return settings, samples


def _checked(workflow, config: dict, root: str, plan_dir: str, model_check: str) -> tuple[dict, list[str], Samples]:
    sources = _config_sources(workflow)
    samples_schema = f"{root}/config/samples.schema.yaml"
    settings, warnings = run_settings(config, Path(root) / "config", sources)
    sheet = read_samples(settings["samples"], samples_schema, source_of(["samples"], sources))
    check_training_labels(sheet, settings["samples"])
    if workflow.is_main_process:  # once, not in every cluster job: it reads a block of each mate file
        check_first_mates(settings["samples"], sheet)
    calibration = read_calibration_samples(
        settings["calibration"]["samples"], sheet, samples_schema, source_of(["calibration", "samples"], sources)
    )
    if workflow.is_main_process:
        check_first_mates(settings["calibration"]["samples"], calibration)
    table = pd.concat([sheet, calibration])
    labelled = bool((sheet["label"] != "").any())
    samples = Samples(table, list(sheet.index), calibration, generations(list(table.index), plan_dir), labelled)
    # not in cluster jobs (checked when the run started) nor for --lint (a check of the code only,
    # on the default config, whose classifier a checkout lacks)
    if workflow.is_main_process and workflow.check_envvars:
        check_classifier_file(settings, sources, labelled, model_check)
        check_calibration_file(settings, sources, labelled)
    return settings, warnings, samples


def _config_sources(workflow) -> list[tuple[str, dict]]:
    """Where each config value came from, the one that wins first: --config, then the config files."""
    given = [str(f) for f in workflow.config_settings.configfiles]
    files = [str(f) for f in workflow.configfiles if str(f) not in given] + given
    return [("--config", workflow.config_settings.config)] + [
        (f, yaml.safe_load(Path(f).read_text())) for f in reversed(files)
    ]


def run_settings(config: dict, config_dir: Path, sources: list[tuple[str, dict]]) -> tuple[dict, list[str]]:
    """The run's settings, a new dict (`config`, as Snakemake loaded it, is left as it is): the
    defaults of config_dir/config.yaml under `config` (a module's host config holds only its
    own keys), checked against config_dir/schema.yaml, and each listed model's entry with its
    architecture's defaults; and the warnings to print. `sources`: where the values came from,
    the one that wins first (--config, then config files)."""
    settings = yaml.safe_load((config_dir / "config.yaml").read_text())
    update_config(settings, copy.deepcopy(config))
    schema = Draft202012Validator(yaml.safe_load((config_dir / "schema.yaml").read_text()))
    texts = dict(_read_as_text(dict(sources).get("--config", {})))  # key path: value
    problems = [
        f"--config: {key}: {value!r} is text: Snakemake passes the values inside a --config dict as text; give "
        "it in a config file (--configfile)"
        for key, value in texts.items()
    ] + [
        f"{source_of(path, sources)}: {'.'.join(map(str, path))}: {message}; fix it "
        f"(config/schema.yaml describes every key)"
        for path, message in _problems(schema, settings)
        if ".".join(map(str, path)) not in texts  # said once, as text
    ]
    if problems:
        raise InputError("\n".join(problems))
    models = settings["models"]
    for name in models["embedders"]:
        if name not in models:
            raise InputError(
                f"{source_of(['models', 'embedders'], sources)}: models.embedders: {name!r} has no entry "
                f"models.{name} with its architecture and checkpoint; add one (config/README.md) or remove it "
                "from the list"
            )
        models[name] = model_entry(name, models[name])
    check_model_choice(settings, sources)
    return settings, [line for line in [unweighed_qvalue_cutoff(settings, sources)] if line]


def _read_as_text(values: Mapping, path: tuple = ()) -> list[tuple[str, str]]:
    """(dotted key, value) of each value inside a --config dict that reads as a number, a boolean or
    null: Snakemake reads those dicts with YAML's BaseLoader, so every value in them is text."""
    found = []
    for key, value in values.items():
        if isinstance(value, Mapping):
            found += _read_as_text(value, (*path, key))
        elif path and isinstance(value, str) and value.strip():
            try:
                if not isinstance(yaml.safe_load(value), str):
                    found.append((".".join((*path, key)), value))
            except yaml.YAMLError:
                pass
    return found


def _problems(validator: Draft202012Validator, instance) -> list[tuple[list, str]]:
    """(key path, message) for each violation of the schema, in key order."""
    found = []
    for error in validator.iter_errors(instance):
        path = list(error.path)
        if error.validator == "additionalProperties":
            unknown = sorted(set(error.instance) - set(error.schema["properties"]))
            found += [([*path, key], "unknown key") for key in unknown]
        elif error.validator == "required":
            found += [([*path, key], "not given") for key in error.schema["required"] if key not in error.instance]
        elif error.validator in ("pattern", "not", "const"):
            allowed = error.schema["description"].rstrip(".")
            found.append((path, f"{error.instance!r} is not allowed ({allowed})"))
        else:
            found.append((path, error.message))
    return sorted(found, key=lambda problem: list(map(str, problem[0])))


def source_of(path: list, sources: list[tuple[str, dict]]) -> str:
    """The first of (name, values) `sources` that sets the key at `path`, or else the nearest
    section above it (where a key is missing)."""
    for end in range(len(path), 0, -1):
        for name, values in sources:
            for key in path[:end]:
                values = values.get(key, ...) if isinstance(values, Mapping) else ...
            if values is not ...:
                return name
    return "config"


def check_model_choice(config: dict, sources: list[tuple[str, dict]]) -> None:
    """A named model exists and has the configured layer, where that is known without its files
    (fair-esm's; a local checkpoint, and the classifier's input size, are checked by the
    check_models job before any embedding)."""
    for embedder in embedders(config):
        try:
            shape = named_shape(embedder)
        except LookupError as known:
            raise InputError(
                f"{source_of(['models', embedder.name, 'checkpoint'], sources)}: models.{embedder.name}.checkpoint: "
                f"{embedder.checkpoint!r} is no {known}; fix it"
            ) from None
        if shape:
            where = source_of(["models", embedder.name, "layer"], sources)
            check_layer(embedder.name, embedder.checkpoint, embedder.layer, shape[0], where)


def check_classifier_file(config: Mapping, sources: list[tuple[str, dict]], labelled: bool, model_check: str) -> None:
    """At start-up: the classifier is there, or this run makes it (the train target's output when
    the samples sheet labels samples to learn from, or a URL that fetch_classifier downloads); one that
    is there was made for chunk_length and for the models' widths, where they are known: fair-esm's
    named models', and those of an earlier run's model check (`model_check`) for the same checkpoints."""
    models, chunk_length = config["models"], config["chunk_length"]
    classifier = models["classifier"]
    trained = classifier == config["train"]["classifier"]
    if trained and labelled:
        return
    path = classifier_path(classifier, models["cache_dir"])
    where = f"{source_of(['models', 'classifier'], sources)}: models.classifier"
    if os.path.isfile(path):
        stated_in = source_of(["models", "classifier_chunk_length"], sources)
        check_chunk_length(path, chunk_length, models["classifier_chunk_length"], stated_in)
        # trained on the listed models, in their order, with the widths known at start-up (the
        # check_models job checks every width, with the classifier of its run)
        checked = read_json(model_check) if os.path.isfile(model_check) else {}
        widths = []
        for embedder in embedders(config):
            shape, known = named_shape(embedder), checked.get(embedder.name, {})
            width = known.get("dim") if known.get("checkpoint") == embedder.checkpoint else None
            widths.append((embedder.name, shape[1] if shape else width))
        refusal = embedders_refusal(path, recorded_metadata(path), widths)
        if refusal:
            raise InputError(f"{where}: {refusal}")
        return
    if is_url(classifier):
        return  # fetch_classifier downloads it and checks it then
    where = f"{where}: {classifier}: no such file"
    if trained:
        raise InputError(
            f"{where}, and the samples sheet labels no sample for the train target to make it from; label "
            "samples virus or other, or point models.classifier at a classifier file"
        )
    published = VIRNUCPRO_URL.format(chunk_length) if chunk_length in (300, 500) else None
    fetch = f"download VirNucPro's {published} there or set models.classifier to that URL, " if published else ""
    train = (
        f"set it to {config['train']['classifier']} to classify with the classifier the labelled samples train"
        if labelled
        else "label samples virus and other in the samples sheet to train one"
    )
    raise InputError(f"{where}; {fetch}point models.classifier at a classifier written by the train target, or {train}")


def check_calibration_file(config: Mapping, sources: list[tuple[str, dict]], labelled: bool) -> None:
    """At start-up: models.calibration is there and made for the classifier file (SHA-256) and
    chunk_length, unless this run makes both (the train target's outputs)."""
    path = config["models"]["calibration"]
    if path is None:
        return
    trained = config["models"]["classifier"] == config["train"]["classifier"] and labelled
    if trained and os.path.abspath(path) == os.path.abspath(config["train"]["calibration"]):
        return
    where = f"{source_of(['models', 'calibration'], sources)}: models.calibration"
    if not os.path.isfile(path):
        raise InputError(
            f"{where}: {path}: no such file; run the calibrate target (calibration.samples) or the train target, "
            "or set models.calibration to null"
        )
    if trained:
        raise InputError(
            f"{where}: {path} cannot weigh the classifier this run trains; point it at {config['train']['calibration']}"
        )
    classifier = classifier_path(config["models"]["classifier"], config["models"]["cache_dir"])
    if not os.path.isfile(classifier):
        return  # a URL not fetched yet: fetch_classifier checks it (predict too, against what scored)
    refusal = Calibration.load(path).refusal(checksums.sha256(classifier), config["chunk_length"], path)
    if refusal:
        raise InputError(f"{where}: {refusal}")


def unweighed_qvalue_cutoff(settings: dict, sources: list[tuple[str, dict]]) -> str | None:
    """call.max_qvalue without a calibration (models.calibration null) has no q-values to cut at: the
    cutoff is dropped from the run's settings here, once, so that the call rule, its script and the
    tables all see none, and the line that says so is returned (None when the two agree)."""
    cutoff = settings["call"]["max_qvalue"]
    if cutoff is None or settings["models"]["calibration"]:
        return None
    settings["call"]["max_qvalue"] = None
    return (
        f"{source_of(['call', 'max_qvalue'], sources)}: call.max_qvalue {cutoff} needs a calibration and "
        "models.calibration is null: no q-values, so viral_qvalue.fasta and regions_qvalue.fasta are not written "
        "(an earlier run's are removed)"
    )


def check_training_labels(samples: pd.DataFrame, sheet: str) -> None:
    """A sheet that labels samples labels both classes: the train target needs both (found here,
    not after all their embedding)."""
    labels = set(samples["label"]) - {""}
    if labels and labels != {"virus", "other"}:
        missing = ({"virus", "other"} - labels).pop()
        raise InputError(
            f"{sheet}: every labelled sample is {labels.pop()!r}; the train target needs samples of both classes: "
            f"label at least one sample {missing!r}, or remove the labels"
        )


def recorded_differences(config: Mapping, recorded: str) -> list[str]:
    """Where the config names other values than those the present results were made with (the
    report overview's record), one line each: a run makes those results anew, and until then the
    report describes them as they are."""
    if not os.path.isfile(recorded):
        return []
    differences = []
    for key, values in read_json(recorded).items():
        value = config_value(config, key, optional=True)
        if values != [value]:
            differences.append(
                f"{key} is {value!r} in the config, but the results in results/ were made with "
                f"{' and '.join(map(repr, values))}"
            )
    return differences


def _unreadable(path: str) -> str:
    """What keeps a sample's path from being read, and what to do; '' when nothing does."""
    if os.path.isdir(path):
        return "a directory; give the sample's FASTA or FASTQ file (gzipped or not), one sample per line"
    if not os.path.isfile(path):
        return f"no such file; fix the path (a relative path starts in {os.getcwd()})"
    try:
        open(path, "rb").close()
    except OSError as error:
        return f"cannot be read ({error.strerror}); fix its permissions"
    return ""


def read_samples(sheet: str, schema_path: Path, named_in: str) -> pd.DataFrame:
    """The samples sheet, a row per sample (its first row's columns, and `reads`: its files), indexed
    by sample; `named_in` says where its path was given."""
    if not os.path.isfile(sheet):
        raise InputError(
            f"{named_in}: samples: {sheet}: no such file; "
            "give the path of the samples sheet (a TSV with columns sample and path)"
        )
    row_schema = {k: v for k, v in yaml.safe_load(Path(schema_path).read_text()).items() if k != "$schema"}
    samples = _sheet_table(sheet, list(row_schema["properties"]))
    problems = _row_problems(sheet, samples, row_schema)
    if not problems and samples.empty:
        problems.append(f"{sheet}: no samples; add a line per sample: its name, a tab, the path of its FASTA or FASTQ")
    if problems:
        raise InputError("\n".join(problems))
    reads = sample_reads(samples)
    samples = samples.drop_duplicates("sample").set_index("sample", drop=False)
    samples["reads"] = [reads[name] for name in samples.index]
    if "label" not in samples.columns:
        samples["label"] = ""
    return samples


def read_calibration_samples(
    sheet: str | None, samples: pd.DataFrame, schema_path: Path, named_in: str
) -> pd.DataFrame:
    """The calibrate target's samples (calibration.samples), every one labelled virus or other and
    named unlike the samples sheet's; none when the key is null."""
    if sheet is None:
        return samples.iloc[:0]
    if not os.path.isfile(sheet):
        raise InputError(f"{named_in}: calibration.samples: {sheet}: no such file; give a sheet of labelled samples")
    calibration = read_samples(sheet, schema_path, named_in)
    for name, label in zip(calibration.index, calibration["label"]):
        if label not in ("virus", "other"):
            raise InputError(
                f"{sheet}: sample '{name}': label it virus or other (the calibrate target learns from labels)"
            )
        if name in samples.index:
            raise InputError(
                f"{sheet}: sample '{name}' is also in the samples sheet; give calibration samples names of their own"
            )
    return calibration


def _sheet_table(sheet: str, columns: list[str]) -> pd.DataFrame:
    """The sheet's rows as text, blank and comment lines left out, each row's index its line - 2;
    `columns`: those the schema knows, the only ones a sheet may have."""
    try:
        lines = Path(sheet).read_text(encoding="utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        raise InputError(f"{sheet}: not a text file; give a tab-separated table (UTF-8)") from None
    # a comment line (its first character that is not a space is '#') is read as a blank line, so
    # that a line's number stays its index + 2; those before the header are skipped
    lines = ["\n" if line.lstrip().startswith("#") else line for line in lines]
    skipped = next((i for i, line in enumerate(lines) if line.strip()), 0)
    header = lines[skipped].rstrip("\r\n").split("\t") if lines else []
    if twice := next((name for name in header if name and header.count(name) > 1), None):
        raise InputError(f"{sheet}: line {skipped + 1} names the column {twice!r} twice; give each column once")
    # a field beyond the header's columns would be silently dropped, or shift its row (pandas)
    extra = next((i for i, line in enumerate(lines) if any(line.rstrip("\r\n").split("\t")[len(header) :])), None)
    if extra is not None:
        raise InputError(
            f"{sheet}: line {extra + 1} has more fields than line {skipped + 1} names columns; name every column "
            "there, or remove the extra fields"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pd.errors.ParserWarning)  # only empty extra fields are left
            samples = pd.read_csv(
                io.StringIO("".join(lines[skipped:])),
                sep="\t",
                dtype=str,
                keep_default_na=False,
                skip_blank_lines=False,
                index_col=False,
            )
    except pd.errors.EmptyDataError:
        samples = pd.DataFrame(columns=["sample", "path"])
    except pd.errors.ParserError as error:
        raise InputError(f"{sheet}: {str(error).strip()}; give a tab-separated table") from None
    samples.index += skipped
    # a header's trailing tab names an empty column
    samples = samples.drop(columns=[c for c in samples.columns if c.startswith("Unnamed: ") and not samples[c].any()])
    samples = samples[samples.ne("").any(axis=1)]  # blank lines go; the index keeps line = index + 2
    if missing := {"sample", "path"} - set(samples.columns):
        raise InputError(
            f"{sheet}: no column {' or '.join(sorted(missing))}; its first line must name "
            "the tab-separated columns sample and path (and optionally label)"
        )
    if unknown := next((column for column in samples.columns if column not in columns), None):
        raise InputError(
            f"{sheet}: unknown column {unknown!r} (a sheet's columns: {', '.join(columns)}); rename or remove it"
        )
    return samples


def _row_problems(sheet: str, samples: pd.DataFrame, row_schema: dict) -> list[str]:
    """A line per row that the schema refuses, per unreadable path, per file listed twice where that
    cannot be meant (in one sample, or a mate file), and per row unlike its sample's first."""
    # one validator for the whole sheet (an array of its rows): thousands of samples take one pass
    validator = Draft202012Validator({"type": "array", "items": row_schema})
    lines, rows = samples.index + 2, samples.to_dict("records")
    problems = [
        f"{sheet}: line {lines[path[0]]}: {'.'.join(map(str, path[1:]))}: {message}; fix the samples sheet"
        for path, message in sorted(_problems(validator, rows), key=lambda problem: problem[0][0])
    ]
    first_row, listed = {}, {}
    for line, row in zip(lines, rows):
        name, kind = row["sample"], _kind(row)
        where = f"{sheet}: line {line}: sample {name!r}"
        if row.get("path2") and kind == "interleaved":
            problems.append(f"{where}: gives path2 and interleaved true; give an interleaved file in path alone")
        first = first_row.setdefault(name, (line, kind, row.get("label", "")))
        if first[1:] != (kind, row.get("label", "")):
            problems.append(
                f"{where}: line {first[0]} gives it {first[1]} reads labelled {first[2]!r}, this line "
                f"{kind} reads labelled {row.get('label', '')!r}; give every row of a sample the same kind and label"
            )
        for path, mate in ((row["path"], False), (row.get("path2", ""), True)):
            if not path:
                continue
            if problem := _unreadable(path):
                problems.append(f"{where}: {path}: {problem}")
                continue
            seen = listed.setdefault(os.path.realpath(path), (line, name, mate))
            if seen != (line, name, mate) and (seen[1] == name or mate or seen[2]):
                problems.append(
                    f"{where}: {path} is also listed on line {seen[0]}; give each file of a sample, and each mate "
                    "file, once"
                )
    return problems


def _kind(row: dict) -> str:
    """A sheet row's reads: single-end, paired (path2) or interleaved."""
    if row.get("interleaved") == "true":
        return "interleaved"
    return "paired" if row.get("path2") else "single-end"


def sample_reads(samples: pd.DataFrame) -> dict[str, SampleReads]:
    """Each sample's reads, from its rows in the sheet's order."""
    rows: dict[str, list[dict]] = {}
    for row in samples.to_dict("records"):
        rows.setdefault(row["sample"], []).append(row)
    reads = {}
    for name, own in rows.items():
        kind = _kind(own[0])
        mates = tuple(Path(row["path2"]) for row in own) if kind == "paired" else ()
        reads[name] = SampleReads(tuple(Path(row["path"]) for row in own), mates, kind == "interleaved")
    return reads


def check_first_mates(sheet: str, samples: pd.DataFrame) -> None:
    """The first fragment of every paired sample's files pairs up (prepare checks every fragment)."""
    for name, reads in samples["reads"].items():
        if reads.paired:
            try:
                check_first_fragment(reads)
            except InputError as error:
                raise InputError(f"{sheet}: sample {name!r}: {error}") from None
