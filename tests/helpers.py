"""What the tests share besides fixtures: paths, readers of the tables, the Snakemake command and the
test samples and config. Tests import it as `from helpers import ...` (pytest puts tests/ on sys.path
for the conftest.py there); fixtures live in conftest.py."""

import bz2
import gzip
import os
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
GENOMES = ROOT / "resources" / "genomes"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # stages.py: the stages outside the workflow, as tests run them

from workflow_lib.seqio import read_records  # noqa: E402 - after the path insert


def read_tsv(path: Path) -> list[dict[str, str]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as handle:
        header, *rows = handle.read().splitlines()
    names = header.split("\t")
    return [dict(zip(names, row.split("\t"))) for row in rows]


def read_fasta(path: Path) -> list[tuple[str, str]]:
    lines = Path(path).read_text().splitlines()
    return [(lines[i][1:], lines[i + 1]) for i in range(0, len(lines), 2)]


SNAKEMAKE = [
    sys.executable,
    "-m",
    "snakemake",
    "--snakefile",
    str(ROOT / "Snakefile"),
    "--cores",
    "2",
    "--resources",
    "gpu=2",
]
# The rules call `python`: the one running the tests, as in an activated environment.
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
SAMPLES = {"phix": "virus", "gamma": "virus", "plasmid": "other", "mito": "other", "reads": ""}


def write_inputs(workdir: Path) -> None:
    """Samples: real genomes (one bzip2-compressed) and gzipped FASTQ reads cut from lambda."""
    inputs = workdir / "inputs"
    inputs.mkdir()
    shutil.copy(GENOMES / "phiX174.fasta", inputs / "phix.fa")
    shutil.copy(GENOMES / "bacillus_phage_gamma_NC_007458.fasta", inputs / "gamma.fa")
    (inputs / "plasmid.fa.bz2").write_bytes(
        bz2.compress((GENOMES / "yersinia_pestis_plasmid_pPCP1_NC_005816.fasta").read_bytes())
    )
    shutil.copy(GENOMES / "human_mtDNA.fasta", inputs / "mito.fa")
    ((_, _, lam),) = read_records(GENOMES / "lambda_NC_001416.fasta")
    with gzip.open(inputs / "reads.fq.gz", "wt") as out:
        for i in range(0, 30000, 250):
            read = lam[i : i + 280].decode()
            out.write(f"@read{i} from lambda\n{read}\n+\n{'F' * len(read)}\n")
    paths = {
        "phix": "phix.fa",
        "gamma": "gamma.fa",
        "plasmid": "plasmid.fa.bz2",
        "mito": "mito.fa",
        "reads": "reads.fq.gz",
    }
    (workdir / "samples.tsv").write_text(
        "sample\tpath\tlabel\n"
        + "".join(f"{name}\t{inputs / paths[name]}\t{label}\n" for name, label in SAMPLES.items())
    )


def write_config(workdir: Path, classifier: str = "results/train/classifier.pt", **settings) -> Path:
    """The test config: tiny demo models, shards of at most 4,000 tokens (1 to 4 a sample), the
    embeddings kept, and `settings` in place of the top-level keys they name."""
    config = {
        "samples": str(workdir / "samples.tsv"),
        "chunk_length": 300,
        "shard_tokens": 4000,
        "models": {
            "esm": {"checkpoint": "resources/demo_models/esm2_t2_demo.pt", "layer": 2},
            "dnabert": {"checkpoint": "resources/demo_models/dnabert_s_demo"},
            "classifier": classifier,
        },
        "embedding": {"esm_token_budget": 2048, "dnabert_token_budget": 2048},
        "train": {"epochs": 8},
        "outputs": {"keep_embeddings": True},
        **settings,
    }
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in next(line for line in status if line.startswith("State:"))
    except FileNotFoundError:
        return False
