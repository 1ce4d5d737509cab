"""The README documents what the workflow writes and every config key, and stays in step with them."""

import gzip
import json
import re

import pytest
from helpers import ROOT

from workflow_lib.config_reference import END, START, markdown

README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    """The README's section under `## {title}`, up to the next one."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert match, f"README.md has no section '## {title}'"
    return match.group(1)


def test_config_reference_is_generated_from_the_schema():
    generated = markdown(ROOT / "config" / "schema.yaml")
    assert f"{START}\n{generated}{END}" in README, "run: python scripts/config_reference.py --readme README.md"


def header(path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return handle.readline().rstrip("\n").split("\t")


@pytest.mark.slow
def test_every_column_of_every_table_is_explained(workflow_run):
    outputs = section("Outputs")
    results = workflow_run[0] / "results" / "gamma"
    tables = ["frames.tsv", "chunks.tsv", "sequences.tsv", "prediction_results.txt"]
    tables += ["prediction_results_highestscore.csv", "prepare/frames.tsv.gz", "prepare/sequences.tsv.gz"]
    for name in tables:
        assert f"`{name.split('/')[-1]}`" in outputs, name
        for column in header(results / name):
            assert f"`{column}`" in outputs, f"{name}: column {column} is not explained in README's Outputs"
    for name in ("manifest.json", "run_summary.json"):
        assert f"`{name}`" in outputs
        for key in json.loads((results / name).read_text()):
            assert f"`{key}`" in outputs, f"{name}: key {key} is not explained in README's Outputs"
    for key in json.loads((workflow_run[0] / "results" / "train" / "metrics.json").read_text()):
        assert f"`{key}`" in outputs, f"metrics.json: key {key} is not explained in README's Outputs"
