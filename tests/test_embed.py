"""The embed job: HDF5 contract, shard order, every frame exactly once, batching invariance."""

import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
from conftest import GENOMES, ROOT

from workflow_lib.embedding import EmbedSettings, build_embedder, embed_shard, read_shard
from workflow_lib.packing import padded_batches
from workflow_lib.prepare import Policy, prepare


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    outdir = tmp_path_factory.mktemp("prepared")
    prepare(GENOMES / "bacillus_phage_gamma_NC_007458.fasta", outdir, 2, Policy(chunk_length=300))
    return outdir


@pytest.mark.parametrize("model, suffix, budget", [("esm", "faa", 600), ("dnabert", "fna", 500)])
def test_embeddings_follow_the_contract(shard, demo_models, tmp_path, model, suffix, budget):
    checkpoint = str(demo_models[model])
    settings = EmbedSettings(model, checkpoint, layer=2 if model == "esm" else None, device="cpu", token_budget=budget)
    output = tmp_path / "shard_0.h5"
    stats = embed_shard(shard / f"shard_0.{suffix}", output, settings)
    ids, sequences = read_shard(shard / f"shard_0.{suffix}")
    with h5py.File(output) as h5:
        assert [i.decode() for i in h5["ids"][()]] == ids  # shard FASTA order
        embeddings = h5["embeddings"][()]
        attrs = dict(h5.attrs)
    assert embeddings.dtype == np.float32 and embeddings.shape == (len(ids), 64 if model == "esm" else 48)
    for key in ("model", "checkpoint", "layer", "dim", "precision", "pooling", "n_tokens", "workflow_version"):
        assert key in attrs
    assert attrs["precision"] == "fp32" and attrs["checkpoint"] == checkpoint
    assert 0 < stats["fill"] <= 1
    # Sorting and padding change nothing: each row equals the sequence embedded alone.
    embedder = build_embedder(settings, torch.device("cpu"), torch.float32)
    for row in (0, len(ids) // 2, len(ids) - 1):
        alone = embedder(embedder.encode([sequences[row]]))[0].numpy()
        assert np.abs(embeddings[row] - alone).max() < 1e-5


def test_budget_below_one_sequence_still_embeds(shard, demo_models, tmp_path):
    """A sequence longer than the token budget gets a batch of its own; nothing is truncated."""
    settings = EmbedSettings("esm", str(demo_models["esm"]), layer=2, device="cpu", token_budget=10)
    embed_shard(shard / "shard_1.faa", tmp_path / "e.h5", settings)
    ids, _ = read_shard(shard / "shard_1.faa")
    with h5py.File(tmp_path / "e.h5") as h5:
        assert h5["embeddings"].shape[0] == len(ids)


def test_padded_batches():
    lengths = np.array([5, 100, 7, 7, 50, 300, 1, 64])
    batches = padded_batches(lengths, 200)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))  # each once
    assert batches[0].tolist() == [5]  # longest first; alone since 300 > budget
    assert all(lengths[b].max() * len(b) <= 200 for b in batches[1:])


def test_embed_cli(shard, demo_models, tmp_path):
    output = tmp_path / "cli.h5"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "embed.py"),
            "--model",
            "dnabert",
            "--checkpoint",
            str(demo_models["dnabert"]),
            "--input",
            str(shard / "shard_0.fna"),
            "--output",
            str(output),
            "--device",
            "cpu",
        ],
        check=True,
        capture_output=True,
    )
    assert output.exists()
    bad = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "embed.py"),
            "--model",
            "esm",
            "--checkpoint",
            str(tmp_path / "missing.pt"),
            "--input",
            str(shard / "shard_0.faa"),
            "--output",
            str(tmp_path / "x.h5"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2
    assert (
        bad.stderr.strip() == f"error: {tmp_path / 'missing.pt'}: ESM-2 checkpoint not found; "
        "set models.esm.checkpoint to a fair-esm name or a .pt file"
    )
