"""Fixtures shared by the tests; the plain helpers they use are in helpers.py."""

import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml
from helpers import ENV, GENOMES, ROOT, SNAKEMAKE, lanes, seed_demo_models, write_config, write_inputs

from workflow_lib.io.seqio import read_records
from workflow_lib.models import classifier


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def demo_models(tmp_path_factory) -> dict[str, Path]:
    """The tiny seeded demo models, in their real on-disk formats."""
    from workflow_lib.models.checkpoints import DEMO_DNABERT, DEMO_ESM
    from workflow_lib.models.demo_models import build

    outdir = tmp_path_factory.mktemp("demo_models")
    return build(outdir / f"{DEMO_ESM}.pt", outdir / DEMO_DNABERT, [GENOMES / "lambda_NC_001416.fasta"], seed=0)


@pytest.fixture(scope="session")
def workflow_run(tmp_path_factory) -> tuple[Path, Path]:
    """One real Snakemake run of the whole workflow on the test samples (work directory, config): the
    sheet with reads first, in shards of at most 5,000 tokens, makes 5 pooled shards: reads in
    three shards, its last pooled with phix's; gamma in two, its second pooled with plasmid's and
    mito's. The config names the sheet relative to the work directory: a copy of the directory
    reads its own sheet, and its results (whose summaries name the sheet) stay up to date."""
    workdir = tmp_path_factory.mktemp("workflow")
    write_inputs(workdir)
    sheet = workdir / "samples.tsv"
    header, *rows = sheet.read_text().splitlines(keepends=True)
    sheet.write_text(header + "".join(sorted(rows, key=lambda row: not row.startswith("reads\t"))))
    config = write_config(workdir, samples=sheet.name, shard_tokens=5000)
    result = subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(config)], capture_output=True, text=True, env=ENV
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return workdir, config


@pytest.fixture(scope="session")
def pooled_run(workflow_run, tmp_path_factory) -> Path:
    """One more whole run, for four tests: workflow_run's samples with its trained classifier, all
    in one pooled shard (shard_tokens without bound), and three samples beside them: first `none`, a
    record of 90 bp (shorter than input.min_length: no frame, an empty shard), then `phix_copy`,
    phix's file again, and last `mixed`, a paired sample of two lanes of gzipped mate files
    (helpers.lanes). Returns its work directory."""
    workdir = tmp_path_factory.mktemp("pooled")
    write_inputs(workdir)
    ((_, _, genome),) = read_records(GENOMES / "phiX174.fasta")
    (workdir / "inputs" / "none.fa").write_bytes(b">short\n" + genome[:90] + b"\n")
    found = lanes(workdir / "inputs")
    sheet = workdir / "samples.tsv"
    _, *rows = sheet.read_text().splitlines(keepends=True)
    sheet.write_text(
        "sample\tpath\tpath2\tlabel\n"
        + f"none\t{workdir / 'inputs' / 'none.fa'}\t\t\n"
        + "".join("{}\t{}\t\t{}".format(*row.split("\t")) for row in rows)
        + f"phix_copy\t{workdir / 'inputs' / 'phix.fa'}\t\t\n"
        + "".join(f"mixed\t{r1}\t{r2}\t\n" for r1, r2, _ in found)
    )
    # the trained weights in a file that does not say its chunk length, as another tool's would:
    # the config states it, and the model check must be told
    model, metadata = classifier.load(workflow_run[0] / "results" / "train" / "classifier.pt")
    classifier.save(model, workdir / "classifier.pt", embedders=metadata["embedders"])
    seed_demo_models(workflow_run[0] / "resources" / "demo_models", workdir)
    config = write_config(
        workdir, classifier=str(workdir / "classifier.pt"), shard_tokens=10**9, input={"min_length": 100}
    )
    settings = yaml.safe_load(config.read_text())
    settings["models"]["classifier_chunk_length"] = 300
    config.write_text(yaml.safe_dump(settings))
    command = SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(config)]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    return workdir


# The files whose tests use workflow_run (a whole run, minutes): `bash run.sh test` runs them on one
# worker, so that the run is made once (pytest_xdist_make_scheduler).
WORKFLOW_RUN_FILES = (
    "test_workflow.py",
    "test_weighing.py",
    "test_paired.py",
    "test_report.py",
    "test_compare.py",
    "test_docs.py",
)
# The groups of files that take longest on 2 cores (minutes each: whole workflow runs, a SLURM test
# bed; measured with --durations=0), longest first.
LONGEST = (
    "workflow_run",
    "test_slurm.py",
    "test_reliability.py",
    "test_gpu_check.py",
    "test_embed.py",
    "test_module.py",
    "test_doc_commands.py",
)


def group(path: Path) -> str:
    """The group of the test file `path`: its name, or workflow_run for WORKFLOW_RUN_FILES."""
    return "workflow_run" if path.name in WORKFLOW_RUN_FILES else path.name


def pytest_collection_modifyitems(items):
    """The fast lane (-m "not slow") never starts the whole workflow: a test using workflow_run
    must be marked slow, and be in WORKFLOW_RUN_FILES. The longest groups go first, then the files
    with the most slow tests: the workers take a group each at a time in this order
    (--no-loadscope-reorder), so that they end together, not one of them alone at the end."""
    uses = [item for item in items if "workflow_run" in item.fixturenames]
    unmarked = [item.nodeid for item in uses if not item.get_closest_marker("slow")]
    if unmarked:
        raise pytest.UsageError(f"tests using workflow_run must be marked slow: {', '.join(unmarked)}")
    elsewhere = sorted({item.path.name for item in uses} - set(WORKFLOW_RUN_FILES))
    if elsewhere:
        raise pytest.UsageError(f"tests/conftest.py: add {', '.join(elsewhere)} to WORKFLOW_RUN_FILES")
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    rank = {name: i for i, name in enumerate(LONGEST)}
    items.sort(key=lambda item: (rank.get(group(item.path), len(LONGEST)), -slow[item.path]))  # stable


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile, with WORKFLOW_RUN_FILES one unit. (xdist 3.8's --dist loadgroup reads its
    groups from node IDs that pytest 9 no longer lets it change.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LoadFileGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group(Path(nodeid.split("::")[0]))

    return LoadFileGroups(config, log)
