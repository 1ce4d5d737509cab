"""The rules' shell commands: a script run through scripts/run_logged.sh with the rule's params as
its arguments (`named_files`: the job's named files; `job_args`: what else it is told, the stage's
settings from the config among it), and the config a run summary records."""

import copy
import functools
import shlex

from workflow_lib.cli.settings import cli, config_values, tuning_keys
from workflow_lib.io.reads import SampleReads

# Settings that only the rules read and that cannot change any result: left out of the run
# summary's config (result_config) with the stages' declared tuning.
RULE_SETTINGS = {"pending_check_seconds", "embedding.compile_cache_dir"}


def script_job(root: str, name: str, arguments: str = "", env: str | None = None) -> str:
    """A rule's shell command: the checkout's (`root`) scripts/<name>.py with the rule's params, in
    order (its files, named_files, then its job_args), and `arguments` (a shell template: wildcards,
    resources, threads), with the environment variables `env` (NAME=value words), run through
    scripts/run_logged.sh into the rule's log: all output in the log; its error line, or its
    warnings, on the console."""
    wrapper = shlex.quote(f"{root}/scripts/run_logged.sh")
    script = shlex.quote(f"{root}/scripts/{name}.py")
    env = f"env {env} " if env else ""
    return f"bash {wrapper} {{log:q}} {env}python {script} {{params}} {arguments}".rstrip()


def job_args(config: dict, /, *words, settings=None, **named):
    """params.args: what a job is told besides its files, so that every setting reaches its job the
    same way: `words` (option words, or functions of the job's wildcards giving them), `named` (cli's
    name=value: a value, or a function of the wildcards giving one) and the settings of the stage's
    declaration (`settings`) that can change its results. A function of the wildcards alone:
    Snakemake compares such params (a change reruns the job), not those made from its files."""

    def args(wildcards) -> str:
        given = [w(wildcards) if callable(w) else w for w in words]
        values = {k: v(wildcards) if callable(v) else v for k, v in named.items()}
        found = [*given, cli(**values)]
        if settings is not None:
            found.append(cli(**config_values(settings, config, model=wildcards.get("model"), results=True)))
        return " ".join(w for w in found if w)

    return args


def model_settings(declaration, config: dict) -> str:
    """--settings per configured model, in input order: every setting of the declaration for it
    (its --model among them), as one word of its options (scripts/preflight.py)."""
    models = config["models"]["embedders"]
    return cli(settings=[cli(model=m, **config_values(declaration, config, model=m)) for m in models])


def reads_options(reads: SampleReads) -> str:
    """The options that give a job a sample's reads (io.reads.SampleReads.add_arguments)."""
    words = cli(input=tuple(map(str, reads.paths)), mates=tuple(map(str, reads.mates)) or None)
    return words + " --interleaved" * reads.interleaved


def tuning_of(declaration, config: dict):
    """A resource: the stage's declared settings that cannot change its results, as options from
    the config. Snakemake never compares resources: a change reruns nothing."""
    return lambda wildcards: cli(**config_values(declaration, config, model=wildcards.get("model"), results=False))


def named_files(wildcards, input, output) -> str:
    """params.files: each named input and output of the job as the script takes it, --NAME PATH...
    (a list as its paths one after another, an empty one left out; underscores as dashes), so that a
    rule names each file once: what a job depends on but does not read goes unnamed. Made from the
    job's files, Snakemake does not compare it: its files' own triggers rerun the job."""
    inputs, outputs = dict(input.items()), dict(output.items())
    if shared := inputs.keys() & outputs.keys():
        raise ValueError(f"an input and an output share the name {sorted(shared)[0]}: rename one")
    words = []
    for name, value in (inputs | outputs).items():
        paths = [value] if isinstance(value, str) else list(value)
        if paths:
            words.append(f"--{name.replace('_', '-')} {shlex.join(map(str, paths))}")
    return " ".join(words)


def result_config(config: dict) -> dict:
    """Every setting the results depend on: the config less RULE_SETTINGS, the stages' tuning and
    each configured model's assumed rates (its embed jobs' runtime)."""
    models = config["models"]["embedders"]
    kept = copy.deepcopy(config)
    for key in RULE_SETTINGS | tuning_keys(models) | {f"models.{m}.assumed_tokens_per_s" for m in models}:
        *sections, name = key.split(".")
        functools.reduce(dict.get, sections, kept).pop(name, None)
    return kept
