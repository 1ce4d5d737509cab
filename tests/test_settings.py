"""Each stage's settings are declared once (workflow_lib/cli/settings.py): the command line a rule builds
from the config is the one its script parses back, and every declared key is a config key. The run's
settings are config/config.yaml's defaults under the config given, which is left as it is."""

import argparse
import copy
import dataclasses

import pytest
import yaml
from helpers import ROOT

from harness.config_reference import rows
from harness.stages import DEFAULTS, from_config
from workflow_lib.cli.settings import (
    STAGES,
    EmbedSettings,
    PrepareSettings,
    add_arguments,
    cli,
    declared,
    from_arguments,
    tuning_keys,
)
from workflow_lib.models import embedders
from workflow_lib.workflow import job_commands, job_resources
from workflow_lib.workflow.config_check import run_settings

# what a rule passes itself, not from the config: threads, a wildcard, an input's path
PASSED_BY_RULES = {
    "threads": 3,
    "remove_shard_fasta": True,
    "classifier": "models/c.pt",
    "classifier_chunk_length": 300,
    "checksums": {"c.pt": "a" * 64},
}


def options(declaration, *, results: bool, model: str | None = None) -> str:
    """The options a rule gives its job from the config: in params.args (results) or resources.tuning."""
    if results:
        return job_commands.job_args(DEFAULTS, settings=declaration)({"model": model})
    return job_commands.tuning_of(declaration, DEFAULTS)({"model": model})


def parser_for(declaration) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_arguments(parser, declaration)
    return parser


MODELS = [e.name for e in embedders(DEFAULTS)]


def models_of(declaration) -> tuple:
    return MODELS if any("{model}" in (f.metadata["key"] or "") for f in declared(declaration)) else (None,)


@pytest.mark.parametrize("declaration", STAGES, ids=lambda d: d.__name__)
def test_a_script_parses_back_the_command_line_its_rule_builds(declaration):
    for model in models_of(declaration):
        words = options(declaration, results=True, model=model).split()
        words += options(declaration, results=False, model=model).split()
        passed = {f.name: PASSED_BY_RULES[f.name] for f in declared(declaration) if f.name in PASSED_BY_RULES}
        words += cli(**passed).split()
        words += ["--model", model] if model else []
        parsed = from_arguments(declaration, parser_for(declaration).parse_args(words))
        assert parsed == from_config(declaration, DEFAULTS, model=model, **passed)


def test_every_declared_key_is_a_config_key():
    for declaration in STAGES:
        for field in declared(declaration):
            for model in MODELS if "{model}" in (field.metadata["key"] or "") else (None,):
                if field.metadata["key"]:
                    section = DEFAULTS
                    for part in field.metadata["key"].format(model=model).split("."):
                        assert part in section, f"{declaration.__name__}.{field.name}: {field.metadata['key']}"
                        section = section[part]


def test_settings_that_cannot_change_results_are_the_tuning():
    assert tuning_keys(MODELS) == {
        "progress_seconds",
        "models.esm.token_budget",
        "models.dnabert.token_budget",
        "embedding.num_workers",
        "embedding.prefetch_factor",
        "embedding.expandable_segments",
        "embedding.commit_seconds",
        "embedding.embed_copies",
    }
    assert "--commit-seconds" in options(EmbedSettings, results=False, model="esm")
    assert "--commit-seconds" not in options(EmbedSettings, results=True, model="esm")


@pytest.mark.parametrize(
    ("words", "error"),
    [
        (["--ambiguous-codons", "Y"], "expected one of drop, X, got 'Y'"),
        (["--progress-seconds", "0"], "expected a positive number, got 0"),
        (["--max-ambiguous-fraction", "1.5"], "expected a fraction within 0 and 1, got 1.5"),
        (["--chunk-length", "five"], "invalid int value: 'five'"),
    ],
)
def test_a_bad_value_is_refused_with_its_option(words, error):
    valid = dataclasses.asdict(from_config(PrepareSettings, DEFAULTS))
    given = {f"--{name.replace('_', '-')}": str(value) for name, value in valid.items()}
    given[words[0]] = words[1]
    with pytest.raises(argparse.ArgumentError, match=error):
        parser_for(PrepareSettings).parse_args([w for pair in given.items() for w in pair])


def test_num_workers_takes_auto_or_a_count_and_booleans_true_or_false():
    parser = parser_for(EmbedSettings)
    base = [
        "--model",
        "esm",
        "--architecture",
        "esm2",
        "--checkpoint",
        "c.pt",
        "--device",
        "cpu",
        "--precision",
        "fp16",
    ]
    base += ["--storage", "float32", "--token-budget", "100", "--prefetch-factor", "2", "--commit-seconds", "1"]
    base += ["--progress-seconds", "1", "--threads", "2"]
    base += ["--embed-copies", "false"]
    args = parser.parse_args(base + ["--num-workers", "auto", "--expandable-segments", "False"])
    assert (args.num_workers, args.expandable_segments, args.embed_copies) == ("auto", False, False)
    assert parser.parse_args(base + ["--num-workers", "3", "--expandable-segments", "true"]).num_workers == 3
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args(base + ["--num-workers", "many", "--expandable-segments", "true"])


def test_a_jobs_request_follows_its_shard_not_its_sample():
    embedding = DEFAULTS["embedding"]
    on_cpu = DEFAULTS | {"embedding": embedding | {"device": "cpu"}}
    # with no rate recorded (no model check yet), the defaults: ESM-2's 19,000 tokens/s on a GPU, 200 on the CPU
    assert job_resources.embed_rate("esm", "no_check.json", DEFAULTS) == 19_000
    assert job_resources.embed_rate("esm", "no_check.json", on_cpu) == 200
    # the default shard, 180 M tokens, at 100,000 tokens/s: 30 min, 1.5 times, +10
    assert job_resources.embed_minutes(180_000_000, 100_000) == 55
    assert job_resources.embed_minutes(0, 200) == 10  # an empty shard: the start only
    assert job_resources.embed_threads(embedding) == 3  # auto: 2 loader workers and the main process
    assert job_resources.embed_threads(embedding | {"num_workers": 5}) == 6
    assert job_resources.tokenize_minutes(180_000_000) == 8  # 2 + 6 at 500,000 tokens/s


def test_the_settings_are_the_defaults_under_the_config_and_the_config_is_left_as_it_is():
    """As a module's host config gives them (Snakemake loads no config.yaml then): the defaults
    fill in what it lacks, and a model entry other than esm and dnabert gets its architecture's."""
    small = {"architecture": "esm2", "checkpoint": "small.pt"}
    config = {"samples": "s.tsv", "models": {"embedders": ["dnabert", "esm", "small"], "small": small}}
    config["models"]["esm"] = {"token_budget": 4096}
    given = copy.deepcopy(config)
    settings, warnings = run_settings(config, ROOT / "config", [])
    assert config == given and warnings == []
    assert settings["models"]["esm"] == DEFAULTS["models"]["esm"] | {"token_budget": 4096}
    assert settings["models"]["small"] == small | {
        "display_name": "ESM-2 (small)",
        "layer": None,
        "token_budget": 16384,
        "assumed_tokens_per_s": {"cuda": 19000, "cpu": 200},
    }
    assert settings["chunk_length"] == DEFAULTS["chunk_length"] and settings["samples"] == "s.tsv"


def test_config_yaml_holds_every_key_with_its_default():
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    defaults = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    assert [key for key, default, _, _ in rows(schema, defaults) if not default] == []
