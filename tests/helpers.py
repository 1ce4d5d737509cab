"""What the tests share besides fixtures: paths, readers of the tables, the Snakemake command and the
test samples and config. Tests import it as `from helpers import ...` (pytest puts tests/ on sys.path
for the conftest.py there); fixtures live in conftest.py."""

import bz2
import contextlib
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import yaml

from harness.simulate import simulate_pairs, write_fastq_pair
from workflow_lib.io.seqio import read_records
from workflow_lib.models import varlen

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
GENOMES = ROOT / "resources" / "genomes"

# How far the floats of two runs of the same frames may lie apart (another sharding, a rerun, a
# resumed job). Packing moves float32 rounding: torch splits GELU over threads where the batch's size
# says (1.2e-7 in DNABERT-S embeddings; a trained classifier amplified such rounding to 6.2e-6 in
# scores). And on this project's 2-core development VM, 3 of about 8 full test runs had one ESM-2 job
# whose first batch came out 1.1e-5 to 2.0e-5 off in its later sequences, never reproduced in about 350
# other jobs (docs/design.md). A frame scored against another frame's features is ~0.1 off.
EMBEDDING_TOLERANCE, SCORE_TOLERANCE = 1e-4, 1e-3


def run_results(workdir: Path) -> dict[str, Path]:
    """The files of a run's results/ that its inputs and config decide: not the benchmarks, the run
    summary, the throughput plot and the embed jobs' figures (run times), nor the model check (model
    files' paths and times)."""
    results = workdir / "results"

    def decided(path: Path) -> bool:
        parts = set(path.relative_to(results).parts)
        if "embeddings" in parts:
            return path.suffix == ".h5"
        return path.name not in {"run_summary.json", "throughput.png"} and not {"benchmarks", "checks"} & parts

    return {str(p.relative_to(results)): p for p in sorted(results.rglob("*")) if p.is_file() and decided(p)}


def assert_same_results(a: Path, b: Path) -> None:
    """Two runs of the same inputs and config wrote the same results: the same files; the same
    bytes where no float is written; tables, JSON, arrays and the classifier equal but for floats
    within SCORE_TOLERANCE, embeddings within EMBEDDING_TOLERANCE; figures and pages present (their
    pixels and digits follow the floats)."""
    left, right = run_results(a), run_results(b)
    assert left.keys() == right.keys()
    for name, path in left.items():
        other = right[name]
        if path.suffix in (".png", ".html"):
            continue
        if path.suffix == ".h5":
            with h5py.File(path) as x, h5py.File(other) as y:
                assert x["ids"][()].tolist() == y["ids"][()].tolist(), name
                assert np.abs(x["embeddings"][()] - y["embeddings"][()]).max(initial=0) <= EMBEDDING_TOLERANCE, name
        elif path.suffix in (".tsv", ".txt", ".csv"):
            x, y = (pd.read_csv(p, sep="\t", na_values=["NA"], keep_default_na=False) for p in (path, other))
            assert list(x.columns) == list(y.columns) and len(x) == len(y), name
            for column in x.columns:
                if x[column].dtype.kind == "f":
                    close = np.allclose(x[column], y[column], rtol=0, atol=SCORE_TOLERANCE, equal_nan=True)
                    assert close, (name, column)
                else:
                    assert x[column].tolist() == y[column].tolist(), (name, column)
        elif path.suffix == ".json":
            _assert_close(json.loads(path.read_text()), json.loads(other.read_text()), name)
        elif path.suffix in (".npz", ".pt"):
            load = np.load if path.suffix == ".npz" else lambda p: torch.load(p, weights_only=True)
            _assert_close(_plain(load(path)), _plain(load(other)), name)
        else:
            assert path.read_bytes() == other.read_bytes(), name


def _plain(value):
    """Arrays and tensors as nested lists, an npz file as a dict: what _assert_close compares."""
    if isinstance(value, (np.lib.npyio.NpzFile, dict)):
        return {k: _plain(value[k]) for k in value}
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return np.asarray(value).tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _assert_close(x, y, where: str) -> None:
    """Equal but for floats within SCORE_TOLERANCE. The SHA-256 of a file the run wrote (the trained
    classifier, under results/) follows that file's floats, so it is not compared."""
    if isinstance(x, dict):
        assert isinstance(y, dict) and x.keys() == y.keys(), where
        written = str(x.get("path", "")).startswith("results/")
        for key in x:
            if not (key == "sha256" and written):
                _assert_close(x[key], y[key], f"{where}: {key}")
    elif isinstance(x, list):
        assert isinstance(y, list) and len(x) == len(y), where
        for u, v in zip(x, y):
            _assert_close(u, v, where)
    elif isinstance(x, float):
        assert abs(x - y) <= SCORE_TOLERANCE, where
    else:
        assert x == y, where


def read_tsv(path: Path) -> list[dict[str, str]]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as handle:
        header, *rows = handle.read().splitlines()
    names = header.split("\t")
    return [dict(zip(names, row.split("\t"))) for row in rows]


def read_fasta(path: Path) -> list[tuple[str, str]]:
    """(header, sequence) of each record, its lines joined."""
    records = []
    for line in Path(path).read_text().splitlines():
        if line.startswith(">"):
            records.append((line[1:], []))
        else:
            records[-1][1].append(line)
    return [(header, "".join(lines)) for header, lines in records]


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
def job_counts(output: str) -> dict[str, int]:
    """Snakemake's table of jobs per rule in its output: {rule: jobs}; {} when it lists none."""
    stats = re.search(r"job +count\n[- ]+\n(.*?)\ntotal", output, re.S)
    return {line.split()[0]: int(line.split()[1]) for line in stats.group(1).splitlines()} if stats else {}


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


def seed_demo_models(models: Path, workdir: Path) -> None:
    """The demo models in the directory `models` (a run's resources/demo_models, or conftest.py's
    demo_models: the files build_demo_models writes), copied with their times to where
    write_config's config names them in `workdir`: a run there finds them made, with no build job."""
    shutil.copytree(models, workdir / "resources" / "demo_models")


def lane_pairs(n: int = 40) -> list[list[tuple[bytes, bytes, bytes]]]:
    """Two lanes of paired fragments (ID, mate 1, mate 2), each of `n` phage and `n` bacterial ones."""
    phix, ecoli = GENOMES / "phiX174.fasta", GENOMES / "ecoli_536_NC_008253_first200kb.fasta"
    return [
        simulate_pairs(phix, n, lane, f"phix_L{lane}") + simulate_pairs(ecoli, n, lane, f"ecoli_L{lane}")
        for lane in (1, 2)
    ]


def lanes(directory: Path, n: int = 40) -> list[tuple[Path, Path, list]]:
    """lane_pairs as two lanes of gzipped mate files: (R1, R2, fragments) of each."""
    found = []
    for lane, pairs in enumerate(lane_pairs(n), 1):
        r1, r2 = directory / f"mixed_L00{lane}_R1.fastq.gz", directory / f"mixed_L00{lane}_R2.fastq.gz"
        write_fastq_pair(pairs, r1, r2)
        found.append((r1, r2, pairs))
    return found


def write_config(workdir: Path, classifier: str = "results/train/classifier.pt", **settings) -> Path:
    """The test config: tiny demo models, shards of at most 4,000 tokens (1 to 4 a sample), the
    embeddings kept, and `settings` in place of the top-level keys they name."""
    config = {
        "samples": str(workdir / "samples.tsv"),
        "chunk_length": 300,
        "shard_tokens": 4000,
        "models": {
            "esm": {"checkpoint": "resources/demo_models/esm2_t2_demo.pt", "layer": 2, "token_budget": 2048},
            "dnabert": {"checkpoint": "resources/demo_models/dnabert_s_demo", "token_budget": 2048},
            "classifier": classifier,
        },
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


@contextlib.contextmanager
def tmpfs(path: Path, options: str):
    """A tmpfs mounted at `path` with `options` (size=...) for the block; the test is skipped,
    with its reason, where it cannot mount one."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root and mount(8) to mount a small tmpfs")
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def per_sequence_attention(q, k, v, layout: varlen.Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    """The attention kernels' reference: softmax(q k^T / sqrt(dh) + bias) v, one sequence at a time;
    q, k, v: [T, H, dh]."""
    out = torch.empty_like(q)
    for start, end in pairwise(layout.cu_seqlens.tolist()):
        qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))  # [H, L, dh]
        bias = None if slopes is None else varlen.alibi_bias(slopes, end - start, q.dtype)
        out[start:end] = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=bias).transpose(0, 1)
    return out


def random_row(lengths: list[int], heads: int = 2, head_dim: int = 4, seed: int = 0):
    """q, k, v [T, H, dh] and the Layout of a packed row of sequences of these lengths."""
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
    generator = torch.Generator().manual_seed(seed)
    q, k, v = torch.randn(3, int(cu[-1]), heads, head_dim, generator=generator).unbind(0)
    return q, k, v, varlen.Layout(cu, max(lengths), int(cu[-1]))


def write_embeddings(path, ids: list[str], embeddings: np.ndarray, attrs: dict, storage: str = "float32") -> None:
    """A whole embeddings file at once, through the embed job's own writer."""
    from workflow_lib.io import h5store

    embeddings = np.asarray(embeddings)
    with h5store.create(path, ids, embeddings.shape[1] if embeddings.ndim == 2 else 0, storage) as writer:
        writer.write(np.arange(len(ids)), embeddings.astype(writer.dtype, copy=False))
        writer.attrs = attrs


def read_embeddings(path) -> tuple[list[str], np.ndarray, dict]:
    """A whole embeddings file: its IDs, its embeddings as float32 and its attributes."""
    with h5py.File(path, "r") as handle:
        return handle["ids"].asstr()[()].tolist(), handle["embeddings"][()].astype(np.float32), dict(handle.attrs)
