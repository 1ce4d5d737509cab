"""The rules' shell commands: a script run through scripts/run_logged.sh, the stage's settings from
the config, options of a rule's named files, and the config a run summary records."""

import copy
import functools
import shlex

from workflow_lib.cli.settings import cli, options, tuning_keys
from workflow_lib.io.reads import SampleReads

# Settings that cannot change any result (a change reruns nothing), left out of the run summary's
# config: the stages' declared tuning, and what only the rules read.
RUNTIME_SETTINGS = tuning_keys() | {
    "pending_check_seconds",
    "embedding.compile_cache_dir",
    "embedding.assumed_tokens_per_s",
}


def script_job(root: str, name: str, arguments: str, env: str | None = None) -> str:
    """A rule's shell command: the checkout's (`root`) scripts/<name>.py with `arguments` (a shell
    template), with the environment variables `env` (NAME=value words), run through
    scripts/run_logged.sh into the rule's log: all output in the log; its error line, or its
    warnings, on the console."""
    wrapper = shlex.quote(f"{root}/scripts/run_logged.sh")
    script = shlex.quote(f"{root}/scripts/{name}.py")
    env = f"env {env} " if env else ""
    return f"bash {wrapper} {{log:q}} {env}python {script} {arguments}"


def reads_options(reads: SampleReads) -> str:
    """The options that give a job a sample's reads (io.reads.SampleReads.add_arguments)."""
    words = cli(input=tuple(map(str, reads.paths)), mates=tuple(map(str, reads.mates)) or None)
    return words + " --interleaved" * reads.interleaved


def settings_of(declaration, config: dict):
    """params: the stage's declared settings that can change its results, as options from the
    config. Snakemake compares params: a change reruns the job."""
    return lambda wildcards: options(declaration, config, results=True, model=wildcards.get("model"))


def tuning_of(declaration, config: dict):
    """A resource: the stage's declared settings that cannot change its results, as options from
    the config. Snakemake never compares resources: a change reruns nothing."""
    return lambda wildcards: options(declaration, config, results=False, model=wildcards.get("model"))


def file_options(directive: str, names, suffix: str = "") -> str:
    """A shell template of an option per named file of the rule's `directive` (input, output):
    --NAME{suffix} {directive.NAME:q}, underscores as dashes."""
    return " ".join(f"--{name.replace('_', '-')}{suffix} {{{directive}.{name}:q}}" for name in names)


def result_config(config: dict) -> dict:
    """The config less RUNTIME_SETTINGS: every setting the results depend on."""
    kept = copy.deepcopy(config)
    for key in RUNTIME_SETTINGS:
        *sections, name = key.split(".")
        functools.reduce(dict.get, sections, kept).pop(name, None)
    return kept
