"""docs/outputs.md documents what the workflow writes, config/README.md every config key, and both stay in step
with them; the README opens with the two commands."""

import gzip
import json
import re

import pytest
from helpers import ROOT

from harness.config_reference import END, START, markdown

README = (ROOT / "README.md").read_text()
CONFIG_README = (ROOT / "config" / "README.md").read_text()
OUTPUTS = (ROOT / "docs" / "outputs.md").read_text()


def section(title: str) -> str:
    """The README's section under `## {title}`, up to the next one."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert match, f"README.md has no section '## {title}'"
    return match.group(1)


def test_config_reference_is_generated_from_the_schema():
    generated = markdown(ROOT / "config" / "schema.yaml")
    assert f"{START}\n{generated}{END}" in CONFIG_README, "run: python scripts/config_reference.py"
    assert START not in README, "the configuration reference lives in config/README.md, README.md links to it"
    assert "(config/README.md)" in section("Configuration")


def header(path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return handle.readline().rstrip("\n").split("\t")


@pytest.mark.slow
def test_every_column_of_every_table_is_explained(workflow_run):
    outputs = OUTPUTS
    results = workflow_run[0] / "results" / "gamma"
    tables = ["frames.tsv", "chunks.tsv", "sequences.tsv", "regions.tsv", "prediction_results.txt"]
    tables += ["prediction_results_highestscore.csv", "prepare/frames.tsv.gz", "prepare/sequences.tsv.gz"]
    for name in tables:
        assert f"`{name.split('/')[-1]}`" in outputs, name
        for column in header(results / name):
            assert f"`{column}`" in outputs, f"{name}: column {column} is not explained in docs/outputs.md"
    assert "`results/report/samples.tsv`" in outputs
    for column in header(workflow_run[0] / "results" / "report" / "samples.tsv"):
        assert f"`{column}`" in outputs, f"samples.tsv: column {column} is not explained in docs/outputs.md"
    for name in ("manifest.json", "run_summary.json"):
        assert f"`{name}`" in outputs
        for key in json.loads((results / name).read_text()):
            assert f"`{key}`" in outputs, f"{name}: key {key} is not explained in docs/outputs.md"
    for key in json.loads((workflow_run[0] / "results" / "train" / "metrics.json").read_text()):
        assert f"`{key}`" in outputs, f"metrics.json: key {key} is not explained in docs/outputs.md"


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_between_the_docs_resolve():
    pages = [ROOT / "README.md", ROOT / "config" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.relative_to(ROOT)}: link to {target}: no such file"
            if fragment:
                headings = re.findall(r"^#+ (.+)$", linked.read_text(), re.M)
                assert fragment in map(anchor, headings), f"{page.relative_to(ROOT)}: link to {target}: no such heading"


def test_the_readme_opens_with_the_two_commands_and_is_read_in_five_minutes():
    lines = README.splitlines()
    assert lines[0].startswith("# ") and len(lines) <= 200
    assert lines[2].strip().startswith("bash run.sh demo") and lines[3].strip().startswith("bash run.sh test")
