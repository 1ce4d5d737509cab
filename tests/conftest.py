"""Fixtures shared by the tests; the plain helpers they use are in helpers.py."""

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from helpers import ENV, GENOMES, ROOT, SNAKEMAKE, write_config, write_inputs


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory) -> dict[str, Path]:
    """The tiny seeded demo models, in their real on-disk formats."""
    from workflow_lib.models.demo_models import build_in

    return build_in(tmp_path_factory.mktemp("demo_models"), [GENOMES / "lambda_NC_001416.fasta"], seed=0)


@pytest.fixture(scope="session")
def workflow_run(tmp_path_factory) -> tuple[Path, Path]:
    """One real Snakemake run of the whole workflow on the test samples (work directory, config)."""
    workdir = tmp_path_factory.mktemp("workflow")
    write_inputs(workdir)
    config = write_config(workdir)
    result = subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(config)], capture_output=True, text=True, env=ENV
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir, config


# The files that take longest on 2 cores (minutes each: whole workflow runs, a SLURM test bed;
# measured with --durations=0), longest first.
LONGEST = (
    "test_workflow.py",
    "test_slurm.py",
    "test_reliability.py",
    "test_module.py",
    "test_embed.py",
    "test_gpu_check.py",
    "test_weighing.py",
    "test_paired.py",
)


def pytest_collection_modifyitems(items):
    """The fast lane (-m "not slow") never starts the whole workflow: a test using workflow_run
    must be marked slow. The longest files go first, then those with the most slow tests: the
    workers of `bash run.sh test` take a file each at a time in this order (--no-loadscope-reorder),
    so that they end together, not one of them alone with a long file at the end."""
    unmarked = [
        item.nodeid for item in items if "workflow_run" in item.fixturenames and not item.get_closest_marker("slow")
    ]
    if unmarked:
        raise pytest.UsageError(f"tests using workflow_run must be marked slow: {', '.join(unmarked)}")
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(LONGEST)), -slow[item.path]))  # stable
