"""The workflow lints clean, and the code is formatted (snakefmt for Snakemake files, ruff for Python)."""

import subprocess
import sys

import pytest
from helpers import ROOT

PYTHON_DIRS = ["workflow_lib", "scripts", "tests", "benchmarks"]


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True)


def test_snakemake_lint_is_clean():
    result = run("snakemake", "--lint")
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr, result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ("snakefmt", "--check", "Snakefile", "rules"),
        ("ruff", "check", *PYTHON_DIRS),
        ("ruff", "format", "--check", *PYTHON_DIRS),
    ],
    ids=["snakefmt", "ruff-check", "ruff-format"],
)
def test_formatted(command):
    result = run(*command)
    assert result.returncode == 0, result.stdout + result.stderr
