"""This workflow used as a Snakemake module by a host workflow in another folder, as docs/module.md shows:
the demo's config (its shards larger) and two of its genomes run through it, with a chimera record of
the two whose inserted phage must come out as a viral region; the run, with the default
outputs.keep_embeddings, keeps no embedding or shard FASTA."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import ENV, GENOMES, ROOT, read_tsv

from harness.stages import DEFAULTS
from workflow_lib.classify.regions import REGIONS, RegionSettings, extend_to_ends, record_regions, regions_table
from workflow_lib.io.seqio import read_records
from workflow_lib.prepare.plan import read_plans

# the chimera's two parts, labelled: the classifier is trained on them in the run
DEMO_SAMPLES = {
    "lambda": ("lambda_NC_001416.fasta", "virus"),
    "ecoli": ("ecoli_536_NC_008253_first200kb.fasta", "other"),
}
INSERT_AT = 100_000  # where phage lambda goes into the E. coli piece
HOST_SNAKEMAKE = [sys.executable, "-m", "snakemake", "--cores", "2", "--resources", "gpu=2"]  # in the host folder


def sequence(name: str) -> str:
    ((_, _, bases),) = read_records(GENOMES / name)
    return bases.decode()


def overlaps_the_insert(start: int, end: int, insert: tuple[int, int]) -> bool:
    """At least 90% of the shorter of the region and the insert lies in both."""
    overlap = min(end, insert[1]) - max(start, insert[0]) + 1
    return overlap >= 0.9 * min(end - start + 1, insert[1] - insert[0] + 1)


@pytest.fixture(scope="module")
def host_run(tmp_path_factory) -> tuple[Path, str, tuple[int, int]]:
    """The host workflow run to its end: host_workflow's folder, chimera and insert."""
    host, chimera, insert = host_workflow(tmp_path_factory.mktemp("module") / "host")
    run = subprocess.run(HOST_SNAKEMAKE, cwd=host, capture_output=True, text=True, env=ENV)
    assert run.returncode == 0, run.stderr[-3000:]
    return host, chimera, insert


@pytest.mark.slow
def test_a_host_workflow_runs_the_demo_as_a_module_and_finds_an_inserted_phage(host_run):
    """The host folder holds its Snakefile, config and samples only; the module is this checkout, by
    path. The classifier is trained in the run on lambda and E. coli, the chimera's parts (the demo's
    three other genomes too would lengthen the run and assert nothing more). With
    the tiny random models it separates the chunks it was trained on, not shifted ones: in the
    chimera, whose E. coli chunks after the insert are cut at other places, it called a 6 kb run of
    E. coli viral (measured with the demo's five genomes). So the run is asserted on its plumbing and
    on finding the insert; that no region falls on the bacterial parts is asserted on the chimera's
    own chunks (the run's coordinates) with known scores: viral inside the insert, every third
    missed, two stray viral chunks in E. coli."""
    host, chimera, insert = host_run
    assert_regions(host / "results", chimera, insert)


@pytest.mark.slow
def test_the_host_makes_the_report(host_run):
    """README's `snakemake --report report.html`, in the host folder: the captions read the module's
    settings with their defaults, which the host's config leaves out."""
    host, _, _ = host_run
    run = subprocess.run(
        [*HOST_SNAKEMAKE, "--report", "report.html"], cwd=host, capture_output=True, text=True, env=ENV
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (host / "report.html").stat().st_size > 100_000


@pytest.mark.slow
def test_without_keeping_embeddings_no_embedding_or_shard_stays(host_run):
    """outputs.keep_embeddings: false (the default, as the demo's config leaves it): each embedding
    and shard FASTA goes once its shard is scored and train (the labelled samples) has read it; the
    run summary and the figures need neither, and a second run has nothing to do."""
    host = host_run[0]
    results = host / "results"
    assert (results / "train" / "classifier.pt").is_file()
    assert not list(results.glob("shards/embeddings/*/*.h5")) and not list(results.glob("*/prepare/shards"))
    assert not list(results.glob("shards/*.f?a"))
    samples = [line.split("\t")[0] for line in (host / "config" / "samples.tsv").read_text().splitlines()[1:]]
    plan = read_plans(results / "plan")[0]
    assert len(plan["chimera"]) > 1
    figures = {p.relative_to(results / "shards" / "embeddings") for p in results.glob("shards/embeddings/*/*")}
    pools = {s["pool"] for sample in samples for s in plan[sample]}
    assert figures == {Path(m) / f"shard_{pool}.json" for m in ("esm", "dnabert") for pool in pools}
    for sample in samples:
        for made in ("run_summary.json", "report/top_sequences.png", "sequences.tsv"):
            assert (results / sample / made).stat().st_size > 0
    dry = subprocess.run(HOST_SNAKEMAKE + ["-n"], cwd=host, capture_output=True, text=True, env=ENV)
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr


def host_workflow(host: Path) -> tuple[Path, str, tuple[int, int]]:
    """A host workflow folder that uses this checkout as a module, with DEMO_SAMPLES and a
    chimera: (the folder, the chimera's sequence, the insert's start and end)."""
    (host / "config").mkdir(parents=True)
    (host / "Snakefile").write_text(
        textwrap.dedent(f"""\
            configfile: "config/config.yaml"


            module virnucpro:
                snakefile:
                    "{ROOT / "Snakefile"}"
                config:
                    config


            use rule * from virnucpro
            """)
    )
    ecoli, phage = sequence(DEMO_SAMPLES["ecoli"][0]), sequence(DEMO_SAMPLES["lambda"][0])
    chimera = ecoli[:INSERT_AT] + phage + ecoli[INSERT_AT:]
    insert = (INSERT_AT + 1, INSERT_AT + len(phage))  # 1-based, inclusive
    (host / "chimera.fa").write_text(f">chimera E. coli 536 1-200000 with lambda at {INSERT_AT}\n{chimera}\n")
    rows = [f"{name}\t{GENOMES / path}\t{label}\n" for name, (path, label) in DEMO_SAMPLES.items()]
    (host / "config" / "samples.tsv").write_text("sample\tpath\tlabel\nchimera\tchimera.fa\t\n" + "".join(rows))
    config = yaml.safe_load((ROOT / "config" / "demo.yaml").read_text())
    # shards of 40,000 tokens, not the demo's 10,000: 6 embed jobs, not 20 (the chimera still in two,
    # first in the sheet, its second pooled with lambda; E. coli's one shard alone)
    config |= {"samples": "config/samples.tsv", "shard_tokens": 40_000}
    (host / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return host, chimera, insert


def assert_regions(results: Path, chimera: str, insert: tuple[int, int]) -> None:
    """The chimera's regions: as its chunks give them, one on the insert, in its tables, FASTA and report."""
    settings = RegionSettings(**DEFAULTS["regions"], min_viral_fraction=DEFAULTS["predict"]["min_viral_fraction"])
    chunks = pd.read_csv(results / "chimera" / "chunks.tsv", sep="\t")
    regions = pd.read_csv(results / "chimera" / "regions.tsv", sep="\t")
    expected = regions_table(chunks, settings)
    extend_to_ends(expected, pd.Series({"chimera": len(chimera)}))
    columns = list(REGIONS)
    pd.testing.assert_frame_equal(regions[columns], expected[columns], check_exact=False, atol=1e-6)
    assert any(overlaps_the_insert(start, end, insert) for start, end in zip(regions["start"], regions["end"]))
    (record,) = read_tsv(results / "chimera" / "sequences.tsv")
    assert record["call"] == "other" and record["viral_extent"] == "regions"  # lambda is a fifth of it
    assert int(record["n_regions"]) == len(regions)
    fasta = list(read_records(results / "chimera" / "regions.fasta"))
    assert [name for name, _, _ in fasta] == [f"chimera|region_{n}" for n in regions["region"]]
    for (_, _, bases), start, end in zip(fasta, regions["start"], regions["end"]):
        assert bases.decode() == chimera[start - 1 : end]
    (lam,) = read_tsv(results / "lambda" / "sequences.tsv")
    assert lam["call"] == "virus" and lam["viral_extent"] == "whole"
    assert (results / "chimera" / "report" / "top_regions.png").stat().st_size > 0
    counts = {row["sample"]: row for row in read_tsv(results / "report" / "samples.tsv")}
    assert counts["chimera"]["regions"] == str(len(regions))

    inside = ((chunks["chunk_start"] + chunks["chunk_end"]) / 2).between(*insert).to_numpy()
    known = inside.copy()
    known[np.flatnonzero(inside)[1::3]] = False  # every third viral chunk missed
    known[np.flatnonzero(~inside)[[10, 150]]] = True  # two stray viral chunks in E. coli
    chunks = chunks.assign(is_virus=known, max_score_virus=np.where(known, 0.9, 0.1))
    found = record_regions(chunks, settings)
    assert found and all(overlaps_the_insert(start, end, insert) for _, start, end, *_ in found), (found, insert)
    # one region over the insert, its bounds where the scores allow: halfway across the unscored
    # bases between the last chunk scored other and the first viral one, so within half of those
    # (or 1 kb) of the insert's
    ((_, start, end, *_),) = found
    before, after = _unscored_around(chunks, insert)
    assert abs(start - insert[0]) <= max(1000, before / 2 + 1), (start, insert, before)
    assert abs(end - insert[1]) <= max(1000, after / 2 + 1), (end, insert, after)
    assert min(end, insert[1]) - max(start, insert[0]) + 1 >= 0.9 * (insert[1] - insert[0] + 1)


def _unscored_around(chunks: pd.DataFrame, insert: tuple[int, int]) -> tuple[int, int]:
    """The bases with no scored chunk around the insert's start and around its end."""
    starts, ends = chunks["chunk_start"].to_numpy(), chunks["chunk_end"].to_numpy()
    gaps = []
    for edge in insert:
        i = np.searchsorted(ends, edge)  # the first chunk ending at or after the edge
        gaps.append(int(starts[i] - ends[i - 1] - 1) if starts[i] > edge else 0)
    return gaps[0], gaps[1]
