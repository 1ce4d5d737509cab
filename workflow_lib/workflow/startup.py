"""The workflow's start-up, one call from rules/common.smk: Snakemake's scheduling mended, the
config and the samples sheets checked (a problem ends the run with its lines alone), and the run's
settings and samples as the rules read them."""

import dataclasses
import logging
import sys
from pathlib import Path
from typing import NoReturn

import pandas as pd
import yaml

from workflow_lib.cli.errors import InputError
from workflow_lib.prepare.plan import generations
from workflow_lib.workflow import snakemake_patches
from workflow_lib.workflow.config_check import (
    check_calibration_file,
    check_classifier_file,
    check_first_mates,
    check_training_labels,
    read_calibration_samples,
    read_samples,
    recorded_differences,
    run_settings,
    source_of,
)


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


def start(workflow, config: dict, root: str, plan_dir: str, recorded: str) -> tuple[dict, Samples]:
    """Mends Snakemake's scheduling, checks the config and the samples sheets, and warns where the
    config differs from the settings that made the results (`recorded`): the run's settings
    (config_check.run_settings: every key, `config` left as it is) and its samples. `root`: the
    checkout, whose config/ holds the defaults and the schemas; `plan_dir`: where the plans are."""
    unmended = snakemake_patches.mend_all()
    # Snakemake's log file on a full disk: each message would print a traceback ("--- Logging error
    # ---"); the console still gets every message, and onerror says the disk is full.
    logging.raiseExceptions = False
    try:
        settings, warnings, samples = _checked(workflow, config, root, plan_dir)
    except InputError as error:
        refuse(error)
    if workflow.is_main_process:  # once, not in every cluster job
        for line in [unmended] * bool(unmended) + warnings + recorded_differences(settings, recorded):
            print(f"Warning: {line}", file=sys.stderr)
    return settings, samples


def _checked(workflow, config: dict, root: str, plan_dir: str) -> tuple[dict, list[str], Samples]:
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
        check_classifier_file(settings, sources, labelled)
        check_calibration_file(settings, sources, labelled)
    return settings, warnings, samples


def _config_sources(workflow) -> list[tuple[str, dict]]:
    """Where each config value came from, the one that wins first: --config, then the config files."""
    given = [str(f) for f in workflow.config_settings.configfiles]
    files = [str(f) for f in workflow.configfiles if str(f) not in given] + given
    return [("--config", workflow.config_settings.config)] + [
        (f, yaml.safe_load(Path(f).read_text())) for f in reversed(files)
    ]
