"""The embed job: HDF5 contract, shard order, every frame exactly once with any number of loader
workers, packing fill, out-of-memory halving, clean shutdown on SIGTERM, GPU claims."""

import dataclasses
import hashlib
import importlib.metadata
import io
import json
import logging
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import weakref
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from helpers import EMBEDDING_TOLERANCE, ROOT, alive, read_embeddings, read_fasta

import workflow_lib.embed.job
import workflow_lib.io.sharding
from harness.stages import (
    DEFAULTS,
    embed_command,
    embed_into,
    embed_settings,
    prepare_into,
    tokenize_into,
    write_reads,
)
from workflow_lib.cli.errors import InputError
from workflow_lib.embed.device_feed import DeviceFeed
from workflow_lib.embed.job import build_embedder, claimed_device, set_allocator_conf
from workflow_lib.embed.packing import ShardBatches, greedy_batches, open_loader, pack
from workflow_lib.embed.resume import ShardRows, sigterm_held
from workflow_lib.embed.stored_tokens import read_tokens
from workflow_lib.io import h5store, locks
from workflow_lib.io.sharding import ShardIndex
from workflow_lib.models import esm, esm_loading
from workflow_lib.models.tokens import DNABERTTokens, ESMTokens

CPU = torch.device("cpu")
# The embed jobs started here run on one torch thread, as this process does (one_thread): on the
# tiny models a second one mostly spins, taking a core from the other test worker.
ONE_THREAD = {"threads": 1}
GENOMES = ROOT / "resources" / "genomes"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """torch's ops in this process on one thread too (ONE_THREAD), for this module's tests."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """prepare's shards directory for phage gamma at 300 bp: 71 frames, 7,197 tokens, in 2 shards."""
    outdir = tmp_path_factory.mktemp("prepared")
    counts = prepare_into(GENOMES / "bacillus_phage_gamma_NC_007458.fasta", outdir, 3650, chunk_length=300)
    assert counts["shards"] == 2
    return outdir / "shards"


@pytest.fixture(scope="module")
def read_frames(tmp_path_factory):
    """Stop-free frames of 8,000 reads of 500 bp sampled from the bundled genomes, in one shard
    (prepare's shards directory)."""
    outdir = tmp_path_factory.mktemp("reads")
    write_reads(outdir / "reads.fa", 8000, 500, seed=3)
    assert prepare_into(outdir / "reads.fa", outdir, chunk_length=500)["shards"] == 1
    return outdir / "shards"


@pytest.fixture(scope="module")
def few_read_frames(tmp_path_factory):
    """As read_frames, of 500 reads (about 200 frames): for the tests that embed a shard a batch and
    a commit at a time, several times over (about a hundred batches), or a block of a few dozen
    frames at a time."""
    outdir = tmp_path_factory.mktemp("few_reads")
    write_reads(outdir / "reads.fa", 500, 500, seed=3)
    assert prepare_into(outdir / "reads.fa", outdir, chunk_length=500)["shards"] == 1
    return outdir / "shards"


def embed(shard_path, output, model, checkpoint, **options):
    settings = embed_settings(model, checkpoint, layer=2 if model == "esm" else None, **options)
    stats = embed_into(shard_path, output, settings)
    with h5py.File(output) as h5:
        return [i.decode() for i in h5["ids"][()]], h5["embeddings"][()], dict(h5.attrs), stats


@pytest.mark.parametrize("model, suffix, budget", [("esm", "faa", 600), ("dnabert", "fna", 500)])
def test_embeddings_follow_the_contract(shard, demo_models, tmp_path, model, suffix, budget):
    ids, embeddings, attrs, stats = embed(
        shard / f"shard_0.{suffix}", tmp_path / "e.h5", model, demo_models[model], token_budget=budget, num_workers=0
    )
    index = ShardIndex.read(shard / f"shard_0.{suffix}")
    assert ids == list(index)  # shard FASTA order
    assert embeddings.dtype == np.float32 and embeddings.shape == (len(ids), 64 if model == "esm" else 48)
    for key in ("model", "checkpoint", "layer", "dim", "precision", "pooling", "n_tokens", "workflow_version"):
        assert key in attrs
    for key in ("fill", "tokens_per_s", "loader_wait_s", "peak_memory_bytes", "attention", "num_workers"):
        assert key in attrs
    assert attrs["precision"] == "fp32" and attrs["checkpoint"] == str(demo_models[model])
    assert attrs["attention"] == "sdpa by sequence length" and stats["batches"] > 1
    versions = json.loads(attrs["versions"])  # the software and device that made the embeddings
    assert versions["python"] == platform.python_version() and versions["torch"] == torch.__version__
    for package in ("fair-esm", "numpy", "h5py", "tokenizers"):
        assert versions[package] == importlib.metadata.version(package)
    assert versions["cuda"] == torch.version.cuda and versions["device_name"] == (platform.processor() or "cpu")
    # Sorting and packing change nothing: each row equals the sequence embedded alone.
    settings = embed_settings(model, demo_models[model], layer=2 if model == "esm" else None)
    embedder = build_embedder(settings, CPU, "fp32")
    sequences = [s for b in range(index.n_blocks) for s in index.read_block(b)]
    for row in (0, len(ids) // 2, len(ids) - 1):
        packed = pack([0], embedder.tokens([sequences[row]]), budget).tensors()
        alone = embedder(packed.tokens, packed.layout())[0].numpy()
        assert np.abs(embeddings[row] - alone).max() < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("model, suffix", [("esm", "faa"), ("dnabert", "fna")])
def test_workers_give_every_frame_exactly_once(few_read_frames, demo_models, tmp_path, monkeypatch, model, suffix):
    """Two spawn workers over many small blocks give what the main process alone gives."""
    monkeypatch.setattr(workflow_lib.io.sharding, "BLOCK", 23)  # read by the main process only: workers get its blocks
    path = few_read_frames / f"shard_0.{suffix}"
    alone = embed(path, tmp_path / "alone.h5", model, demo_models[model], token_budget=2000, num_workers=0)
    workers = embed(path, tmp_path / "workers.h5", model, demo_models[model], token_budget=2000, num_workers=2)
    assert ShardIndex.read(path).n_blocks > 6
    assert workers[0] == alone[0] == list(ShardIndex.read(path))
    assert np.array_equal(workers[1], alone[1])
    assert workers[2]["num_workers"] == 2 and workers[2]["n_tokens"] == alone[2]["n_tokens"]


def test_stored_tokens_are_the_tokenizers_and_embed_to_the_bit(shard, demo_models, tmp_path, monkeypatch):
    """The tokenize job's file holds, block by block, what the DNABERT-S tokenizer gives; the embed
    job reading it (loader workers too) writes the same embeddings to the bit; a tokens file of
    another shard is refused."""
    monkeypatch.setattr(workflow_lib.io.sharding, "BLOCK", 13)
    path, tokens_path = shard / "shard_0.fna", tmp_path / "tokens.h5"
    n_tokens = tokenize_into(path, demo_models["dnabert"], tokens_path)
    index = ShardIndex.read(path)
    tokenizer = DNABERTTokens(Path(demo_models["dnabert"]) / "tokenizer.json")
    assert index.n_blocks > 2
    for b in range(index.n_blocks):
        assert all(
            np.array_equal(s, t)
            for s, t in zip(read_tokens(tokens_path, index.block_size, b), tokenizer(index.read_block(b)), strict=True)
        )
    settings = embed_settings("dnabert", demo_models["dnabert"], token_budget=500, num_workers=2)
    embed_into(path, tmp_path / "tokenised.h5", settings)
    stats = embed_into(path, tmp_path / "read.h5", settings, tokens_path)
    assert stats["n_tokens"] == n_tokens
    with h5py.File(tmp_path / "tokenised.h5") as a, h5py.File(tmp_path / "read.h5") as b:
        assert np.array_equal(a["embeddings"][()], b["embeddings"][()])
    with pytest.raises(InputError, match="tokens of another shard or tokenizer than .*shard_1.fna; delete it"):
        embed_into(shard / "shard_1.fna", tmp_path / "other.h5", settings, tokens_path)
    whole = tokens_path.read_bytes()
    for size in (0, len(whole) // 2, len(whole) - 1):  # cut short by a crash: refused, never a crash in h5py
        tokens_path.write_bytes(whole[:size])
        with pytest.raises(InputError, match=f"{tokens_path}: not a readable tokens file .*; delete it and run again"):
            embed_into(path, tmp_path / "cut.h5", settings, tokens_path)


def test_a_shard_of_other_length_than_its_plan_is_refused(read_frames, demo_models, tmp_path):
    """A shard FASTA cut short (or changed) since the plan counted its frames: the embed job, given
    the plan's count as the rules give it, refuses it in one line, saying what to delete so that
    the run makes it again: the file, or the prepare shards directory that holds it."""
    shard = read_frames / "shard_0.faa"
    n = len(ShardIndex.read(shard))
    command = embed_command("esm", demo_models["esm"], shard, tmp_path / "e.h5", planned_frames=n + 3)
    refused = subprocess.run(command, capture_output=True, text=True)
    expected = f"error: {shard}: {n} frames where the plan has {n + 3}: cut short or changed since it was made; "
    assert (refused.returncode, refused.stderr.splitlines()[-1]) == (
        2,
        expected + f"delete {shard} and run the workflow again",
    )
    assert not (tmp_path / "e.h5").exists()
    prepared = tmp_path / "phix" / "prepare" / "shards" / "shard_0.faa"
    prepared.parent.mkdir(parents=True)
    shutil.copy(shard, prepared)
    with pytest.raises(InputError, match=f"delete {prepared.parent} and run the workflow again$"):
        ShardIndex.read(prepared, planned=n - 1)
    assert len(ShardIndex.read(prepared, planned=n)) == n


def test_a_lost_or_repeated_frame_fails_the_job_loudly(shard, demo_models, tmp_path, monkeypatch):
    batches = ShardBatches.__iter__

    def repeat_first(self):
        first = next(batches(self))
        yield first
        yield from batches(self)  # the first batch comes twice

    monkeypatch.setattr(ShardBatches, "__iter__", repeat_first)
    with pytest.raises(RuntimeError, match=r"0 frames not embedded .* embedded more than once \(e\.g\. \['"):
        embed(shard / "shard_0.faa", tmp_path / "e.h5", "esm", demo_models["esm"], token_budget=600, num_workers=0)
    assert not (tmp_path / "e.h5").exists()


def read_pieces(monkeypatch, piece: int) -> list[int]:
    """Make the loader read its files in pieces of `piece` bytes; returns the sizes it reads."""
    sizes = []

    class Pieces(io.BufferedReader):
        def read(self, size=-1):
            data = super().read(size)
            sizes.append(len(data))
            return data

    monkeypatch.setattr(workflow_lib.io.sharding, "PIECE", piece)
    monkeypatch.setattr(workflow_lib.io.sharding, "open", lambda path, mode: Pieces(io.FileIO(path)), raising=False)
    return sizes


@pytest.mark.parametrize("piece", [1, 5, 64, 1 << 20])
def test_the_shard_index_is_read_in_pieces(tmp_path, monkeypatch, piece):
    """Records (and a two-byte character) straddle the pieces: the IDs, block offsets and SHA-256
    are those of the whole file."""
    records = [(f"read_{i}_é", "MKV"[: i % 3 + 1] * (i % 7 + 1)) for i in range(50)]
    data = "".join(f">{name}\n{sequence}\n" for name, sequence in records).encode()
    (tmp_path / "shard.faa").write_bytes(data)
    sizes = read_pieces(monkeypatch, piece)
    monkeypatch.setattr(workflow_lib.io.sharding, "BLOCK", 7)
    index = ShardIndex.read(tmp_path / "shard.faa")
    assert max(sizes) <= piece and (piece > len(data) or len(sizes) > 2)
    assert index.sha256 == hashlib.sha256(data).hexdigest()
    assert index.offsets == [m.start() for m in re.finditer(b">", data)][::7] + [len(data)]
    blocks = [s for b in range(index.n_blocks) for s in index.read_block(b)]
    assert blocks == [sequence.encode() for _, sequence in records]
    names = [name for name, _ in records]  # the IDs are read from the file, a block at a time
    assert len(index) == 50 and list(index) == names and index[-1] == names[-1] and index[13] == names[13]
    with pytest.raises(IndexError):
        index[50]


@pytest.mark.parametrize("text", [">a\nMK\n>b\nMV", ">a\nMK\n>b\n", ">a\nMK\nb\nMV\n", "\n", ">a\n\n\nMV\n"])
def test_a_malformed_shard_fails_in_one_line(tmp_path, monkeypatch, text):
    (tmp_path / "shard.faa").write_text(text)
    read_pieces(monkeypatch, 3)
    with pytest.raises(
        InputError,
        match=r"^\S+shard\.faa: not a shard written by prepare; delete the sample's prepare directory and run again$",
    ):
        ShardIndex.read(tmp_path / "shard.faa")


@pytest.mark.parametrize("suffix, model", [("faa", "esm"), ("fna", "dnabert")])
def test_packing_fill_on_read_lengths(read_frames, demo_models, suffix, model):
    """Real tokens over budget slots, through the spawn loader, as the config's default budgets."""
    budget = DEFAULTS["models"][model]["token_budget"]
    index = ShardIndex.read(read_frames / f"shard_0.{suffix}")
    if suffix == "faa":
        encode = ESMTokens.of(esm_loading.load(str(demo_models["esm"]))[1])
    else:
        from workflow_lib.models import dnabert_loading

        encode = dnabert_loading.load(str(demo_models["dnabert"]))[1]
    tokens = slots = 0
    with open_loader(ShardBatches(index, encode, budget), 2, DEFAULTS["embedding"]["prefetch_factor"]) as batches:
        for batch in batches:
            assert batch.n_tokens <= budget
            tokens, slots = tokens + batch.n_tokens, slots + batch.slots
    assert len(index) > 2000 and tokens / slots > 0.9


def test_greedy_batches_never_truncate():
    lengths = np.array([5, 100, 7, 7, 50, 300, 1, 64])
    batches = greedy_batches(lengths, 200)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))  # each once
    assert batches[0].tolist() == [5]  # longest first; alone since 300 > budget
    assert [lengths[b].sum() for b in batches] == [300, 100 + 64, 50 + 7 + 7 + 5 + 1]  # next fit, in order
    assert all(lengths[b].sum() <= 200 for b in batches[1:])


class RunsOutOfMemory:
    """The ESM-2 embedder on a device with room for `limit` tokens per batch. CUDA memory cannot
    run out on this machine; the halving logic around it is device-independent."""

    def __init__(self, embedder, limit: int):
        self.embedder, self.limit, self.seen = embedder, limit, []
        self.activations = []  # weak references to the failed forwards' activations
        self.alive_at_retry = []  # per later call: how many of them were still held

    def __call__(self, tokens, layout):
        self.seen.append(len(tokens))
        self.alive_at_retry.append(sum(ref() is not None for ref in self.activations))
        if len(tokens) > self.limit:
            activation = torch.empty(len(tokens), 1024)  # what a forward holds when memory runs out
            self.activations.append(weakref.ref(activation))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return self.embedder(tokens, layout)


def test_out_of_memory_halves_the_batch(demo_models):
    model, alphabet = esm_loading.load(str(demo_models["esm"]))
    embedder = esm.ESMEmbedder(model, alphabet, 2, CPU)
    proteins = [b"MKV" * n for n in range(1, 40)]
    encoded = embedder.tokens(proteins)
    batch = pack(np.arange(len(encoded)), encoded, 5000).tensors()
    expected = embedder(batch.tokens, batch.layout()).numpy()
    feed = DeviceFeed(RunsOutOfMemory(embedder, limit=700), CPU)
    feed.submit(batch)
    results = feed.ready()
    assert not feed.pending  # on the CPU every result is ready at once
    rows = np.concatenate([rows for rows, _, _ in results])
    assert sorted(rows.tolist()) == list(range(len(encoded)))  # nothing lost in the splits
    got = np.zeros_like(expected)
    for rows, tokens, pooled in results:
        got[rows] = pooled
        assert (tokens == np.diff(batch.cu_seqlens.numpy())[rows]).all()
    assert np.abs(got - expected).max() < 1e-5
    assert feed.splits >= 2 and feed.max_tokens < batch.n_tokens
    # every retry ran with the failed forwards' memory released (not from inside the except block)
    assert len(feed.embedder.activations) >= 2 and set(feed.embedder.alive_at_retry) == {0}
    # later batches are cut to the size that fitted, before trying
    feed.embedder.seen.clear()
    feed.submit(batch)
    assert max(feed.embedder.seen) <= feed.max_tokens
    one = pack([0], embedder.tokens([b"M" * 900]), 5000).tensors()
    with pytest.raises(RuntimeError, match="one sequence of 902 tokens does not fit in GPU memory"):
        DeviceFeed(RunsOutOfMemory(embedder, limit=700), CPU).submit(one)


def test_allocator_settings_go_where_this_torch_reads_them(monkeypatch):
    """expandable_segments in PYTORCH_ALLOC_CONF on torch >= 2.9 (the CUDA name is deprecated
    there and warns), and a user's own settings under either name are left alone."""
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        monkeypatch.delenv(name, raising=False)
    set_allocator_conf("expandable_segments:True")
    assert os.environ["PYTORCH_ALLOC_CONF"] == "expandable_segments:True"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in os.environ
    monkeypatch.delenv("PYTORCH_ALLOC_CONF")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    set_allocator_conf("expandable_segments:True")
    assert "PYTORCH_ALLOC_CONF" not in os.environ


@pytest.mark.slow
@pytest.mark.parametrize("signalled", ["main_process", "process_group"])
def test_sigterm_stops_the_job_and_its_workers(read_frames, demo_models, tmp_path, signalled):
    """SLURM preemption or a time limit: the job exits promptly with the status of a SIGTERM,
    leaves no loader worker and no output behind, and commits what it had embedded so that a rerun
    resumes; also when SLURM signals every process of the job, the loader workers too."""
    output, shard = tmp_path / "e.h5", tmp_path / "shard.faa"
    shard.write_bytes((read_frames / "shard_0.faa").read_bytes() * 6)  # several blocks, so workers are used
    # many small batches: a long job; a progress line after every batch: the frames embedded so far
    options = {"num_workers": 2, "token_budget": 64, "progress_seconds": 0.000001, "commit_seconds": 1, **ONE_THREAD}
    command = embed_command("esm", demo_models["esm"], shard, output, **options)
    job = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True)
    log = Lines(job.stderr)
    parts = tmp_path / ".e.h5.parts"
    # SIGTERM once frames were embedded since the last commit. Seen with the job stopped: a progress
    # line says `done` frames were embedded; a commit after that line would hold them all, so
    # fewer committed frames than `done` mean rows wait for the next commit, however busy the
    # machine. Else the job goes on to its next line.
    committed = None
    while committed is None:
        lines = log.new()
        assert lines is not None, "the job ended before it could be stopped:\n" + log.text()
        progress = [found for line in lines if (found := re.search(r"INFO ([\d,]+) frames of [\d,]+, ", line))]
        if not progress or not list(parts.glob("part_*.npz")):  # batches are flowing, one commit made
            continue
        done = int(progress[-1][1].replace(",", ""))
        job.send_signal(signal.SIGSTOP)
        _, status = os.waitpid(job.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), "the job ended before it could be stopped"
        files = list(parts.glob("part_*.npz"))
        if sum(_rows(part) for part in files) < done:
            committed = len(files)
            workers = [
                int(p)
                for p in subprocess.run(["pgrep", "-P", str(job.pid)], capture_output=True, text=True).stdout.split()
            ]
            if signalled == "process_group":  # the workers, running, get it now; the main process on SIGCONT
                os.killpg(job.pid, signal.SIGTERM)
            else:
                job.send_signal(signal.SIGTERM)  # delivered when the job runs on
        job.send_signal(signal.SIGCONT)
    assert len(workers) >= 2, "the loader workers did not start"
    assert job.wait(timeout=30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(alive, workers)):
        time.sleep(0.2)
    assert not any(map(alive, workers))
    assert not output.exists()
    assert "they are committed: run the job again to resume" in log.text()
    assert len(list(parts.glob("part_*.npz"))) > committed  # what was done since the last commit


def test_sigterm_stays_held_to_the_end_of_the_outermost_hold():
    """The stop's final store and commit hold SIGTERM, and a commit inside holds it again: leaving
    the inner hold must not let a second SIGTERM cut the outer one short."""
    with sigterm_held():
        with sigterm_held():
            pass
        assert signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_a_sigterm_commits_the_batches_in_flight_too(read_frames, demo_models, tmp_path, monkeypatch):
    """Stopped with batches submitted whose results are not stored yet (on a GPU up to
    RESULTS_IN_FLIGHT of them; here the one just submitted), the job stores and commits them
    before it exits: a rerun resumes after every batch it computed."""
    submitted = []

    class StoppedAtTheThird(DeviceFeed):
        def submit(self, batch):
            super().submit(batch)
            submitted.append(len(batch.rows))
            if len(submitted) == 3:  # SLURM's SIGTERM, handled here: before the job stores the result
                os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(workflow_lib.embed.job, "DeviceFeed", StoppedAtTheThird)
    output = tmp_path / "e.h5"
    settings = embed_settings("esm", demo_models["esm"], layer=2, token_budget=1024, num_workers=0, commit_seconds=1e9)
    with pytest.raises(SystemExit) as stopped:
        embed_into(read_frames / "shard_0.faa", output, settings)
    assert stopped.value.code == 128 + signal.SIGTERM and not output.exists()
    committed = sum(_rows(part) for part in (tmp_path / ".e.h5.parts").glob("part_*.npz"))
    assert committed == sum(submitted)


# The very-end tests' job: a progress line and a commit after every batch.
AT_THE_END = {"num_workers": 0, "token_budget": 1024, "progress_seconds": 1e-6, "commit_seconds": 0, **ONE_THREAD}


@pytest.fixture(scope="module")
def uninterrupted(few_read_frames, demo_models, tmp_path_factory):
    """The very-end tests' job run to its end unsignalled: what each of them must write."""
    reference = tmp_path_factory.mktemp("uninterrupted") / "reference.h5"
    command = embed_command("esm", demo_models["esm"], few_read_frames / "shard_0.faa", reference, **AT_THE_END)
    subprocess.run(command, check=True, capture_output=True)
    return reference


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["after the last batch", "after the output is written"])
def test_a_sigterm_at_the_very_end_keeps_the_shard(few_read_frames, demo_models, uninterrupted, tmp_path, moment):
    """A stop in the job's last moments, its process group signalled as SLURM does, through
    scripts/run_logged.sh as the rules run it: the job finishes with status 0, its output whole
    and its commits removed (not 143 after its output was renamed, which Snakemake would delete
    with the commits gone: a whole shard to embed again). Signalled before it could finish, it
    exits 143 with every frame committed, and its rerun embeds none again."""
    shard, output, log = few_read_frames / "shard_0.faa", tmp_path / "e.h5", tmp_path / "embed.log"
    command = ["bash", str(ROOT / "scripts" / "run_logged.sh"), str(log)]
    command += embed_command("esm", demo_models["esm"], shard, output, **AT_THE_END)
    total, distinct = len(ShardIndex.read(shard)), len({seq for _, seq in read_fasta(shard)})  # copies: not embedded
    line = f" {distinct:,} frames of {distinct:,}" if moment == "after the last batch" else f"wrote {output}"
    job = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True)
    while job.poll() is None and line not in (log.read_text() if log.exists() else ""):
        time.sleep(0.001)
    assert job.poll() is None, "the job ended before it could be signalled:\n" + log.read_text()[-3000:]
    os.killpg(job.pid, signal.SIGTERM)
    status = job.wait(timeout=120)
    if status == 128 + signal.SIGTERM:  # stopped before it could finish: every frame committed
        assert moment == "after the last batch" and not output.exists()
        rerun = subprocess.run(command, capture_output=True, text=True)
        assert rerun.returncode == 0, rerun.stderr
        assert f"resuming: {distinct} of {total} frames" in log.read_text()
    else:
        assert status == 0, log.read_text()[-3000:]
        assert "a SIGTERM came after the last batch: the job finishes first" in log.read_text()
    assert not (tmp_path / ".e.h5.parts").exists()
    with h5py.File(output) as got, h5py.File(uninterrupted) as expected:
        assert got["ids"][()].tolist() == expected["ids"][()].tolist()
        assert np.abs(got["embeddings"][()] - expected["embeddings"][()]).max() <= EMBEDDING_TOLERANCE


@pytest.mark.parametrize("model", ["esm", "dnabert"])
def test_each_distinct_frame_is_embedded_once_and_its_copies_get_its_embedding(
    few_read_frames, demo_models, tmp_path, model, caplog
):
    """A shard whose frames come three times each, in a different order each time (a sample copied
    twice over): each distinct sequence is embedded once (the progress counts it once; DNABERT-S
    from the tokenize job's stored tokens) and every copy's row is its first's. With
    embedding.embed_copies every frame is embedded, to the same embeddings."""
    suffix = "faa" if model == "esm" else "fna"
    records = read_fasta(few_read_frames / f"shard_0.{suffix}")
    shard = tmp_path / f"copies.{suffix}"
    orders = (records, records[::-1], records[1::2] + records[::2])
    shard.write_text("".join(f">{name}_{n}\n{seq}\n" for n, order in enumerate(orders) for name, seq in order))
    distinct = {seq for _, seq in records}
    tokens = None
    if model == "dnabert":
        tokens = tmp_path / "tokens.h5"
        tokenize_into(shard, demo_models[model], tokens)
    runs = {}
    caplog.set_level(logging.INFO, logger="workflow")
    for copies in (False, True):
        settings = embed_settings(model, demo_models[model], layer=2 if model == "esm" else None, embed_copies=copies)
        settings = dataclasses.replace(settings, progress_seconds=1e-9)
        output = tmp_path / f"{copies}.h5"
        caplog.clear()
        stats = embed_into(shard, output, settings, tokens)
        _, values, _ = read_embeddings(output)
        runs[copies] = stats, values, [r.getMessage() for r in caplog.records if "frames of" in r.getMessage()]
    (stats, once, lines), (every_stats, every, every_lines) = runs[False], runs[True]
    n = 3 * len(records)
    assert stats["distinct_frames"] == len(distinct) and every_stats["distinct_frames"] == n
    assert lines[-1].startswith(f"{len(distinct):,} frames of {len(distinct):,},")
    assert every_lines[-1].startswith(f"{n:,} frames of {n:,},")
    assert stats["n_tokens"] == every_stats["n_tokens"] and stats["distinct_tokens"] < stats["n_tokens"]
    first = {}
    for row, (_, seq) in enumerate(record for order in orders for record in order):
        assert (once[row] == once[first.setdefault(seq, row)]).all()  # a copy is its first to the bit
    assert np.abs(once - every).max() <= EMBEDDING_TOLERANCE


def test_run_logged_reports_the_jobs_own_status_after_a_sigterm(tmp_path):
    """SIGTERM to the process group reaches scripts/run_logged.sh too: it waits for the job and
    exits with the job's status (a job that finishes first: 0), not with 143 of its own."""
    job = (
        "import signal, time\ngot = []\nsignal.signal(signal.SIGTERM, lambda *a: got.append(1))\n"
        "print('ready', flush=True)\nwhile not got:\n    time.sleep(0.01)\ntime.sleep(0.5)\n"
    )
    log = tmp_path / "job.log"
    command = ["bash", str(ROOT / "scripts" / "run_logged.sh"), str(log), sys.executable, "-c", job]
    shell = subprocess.Popen(command, start_new_session=True)
    while "ready" not in (log.read_text() if log.exists() else ""):
        assert shell.poll() is None
        time.sleep(0.01)
    os.killpg(shell.pid, signal.SIGTERM)
    assert shell.wait(timeout=60) == 0


class Lines:
    """The lines of a child's output as they come, read by a thread (the child never blocks on a
    full pipe). The time limits only turn a hung child into a failure."""

    def __init__(self, stream):
        self.seen: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.seen.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def new(self, timeout: float = 120) -> list[str] | None:
        """The lines that came since the last call, waiting for one at least; None once the output
        is closed."""
        try:
            lines = [self._queue.get(timeout=timeout)]
        except queue.Empty:
            raise AssertionError(f"no output line in {timeout} s:\n{''.join(self.seen)[-3000:]}") from None
        while not self._queue.empty():
            lines.append(self._queue.get())
        if None in lines:
            self._queue.put(None)  # for the next call
            return lines[: lines.index(None)] or None
        return lines

    def text(self, timeout: float = 30) -> str:
        """All the output, once the child has closed it."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the output was not closed"
        return "".join(self.seen)


def _rows(part) -> int:
    with np.load(part) as data:
        return len(data["rows"])


CLAIM = (
    "import logging, sys; from pathlib import Path; from workflow_lib.io import locks; "
    "logging.basicConfig(level=logging.INFO, format='%(message)s'); "
    "gpus = [locks.Gpu(uuid, 1000) for uuid in {uuids!r}]; "
    "claim = locks.claim_gpu(gpus, {mb!r}, Path({dir!r}), 0.05, until_exit={until_exit!r}); "
    "index = claim.__enter__(); {leave}print(index, flush=True); sys.stdin.read()"
)


class Claimer:
    """A job in its own process that claims `mb` MB (None: all) of one of the 1,000 MB GPUs
    `uuids`, prints the GPU's index and holds its claim until its stdin closes or it is killed;
    `until_exit`: it leaves the claim's context before printing (the claim held all the same)."""

    def __init__(self, tmp_path: Path, uuids: list[str], mb: int | None, until_exit: bool = False):
        leave = "claim.__exit__(None, None, None); " if until_exit else ""
        code = CLAIM.format(uuids=uuids, mb=mb, dir=str(tmp_path), until_exit=until_exit, leave=leave)
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen([sys.executable, "-c", code], text=True, env=env, **pipes)
        self.log = Lines(self.process.stderr)

    def index(self) -> int:
        return int(self.process.stdout.readline())

    def waits(self, why: str) -> None:
        """Returns once the job says it waits for `why`, failing if it claims a GPU instead."""
        lines = []
        while not any(f"no GPU has {why} unclaimed" in line for line in lines):
            lines = self.log.new()
            assert lines is not None, "the job ended: " + self.log.text()

    def end(self) -> None:
        if not self.process.stdin.closed:
            self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture
def claimers(tmp_path):
    started = []

    def start(uuids, mb=None, until_exit=False):
        started.append(Claimer(tmp_path, uuids, mb, until_exit))
        return started[-1]

    yield start
    for claimer in started:
        claimer.end()


def test_concurrent_jobs_spread_over_gpus_before_they_share_one(claimers):
    """Local runs on a multi-GPU node: each embed job takes a GPU no other job holds while there is
    one; then a job shares the GPU with the most memory left where its share fits."""
    gpus = ["GPU-a", "GPU-b"]
    first = claimers(gpus, 300)
    on_first = first.index()
    second = claimers(gpus, 500)
    assert {on_first, second.index()} == {0, 1}
    assert claimers(gpus, 400).index() == on_first  # 700 MB left there, 500 on the other


def test_a_job_waits_until_its_share_fits_and_a_killed_jobs_share_comes_free(claimers):
    """Two jobs whose shares fit run on one GPU together; a third that would overfill it waits, and
    takes the share of a job killed with SIGKILL (the kernel drops its lock)."""
    gpu = ["GPU-one"]
    big, small = claimers(gpu, 600), claimers(gpu, 300)
    assert big.index() == small.index() == 0
    third = claimers(gpu, 300)
    third.waits("300 MB")
    big.process.kill()
    assert big.process.wait(timeout=30) == -signal.SIGKILL
    assert third.index() == 0


def test_a_whole_gpu_claim_shares_with_no_one(claimers):
    """A job that holds a whole GPU (None: under SLURM or with gpu=1 per embed job) waits for every
    share of it to end, and a share waits for it; a share larger than the GPU takes it whole."""
    gpu = ["GPU-one"]
    share = claimers(gpu, 100)
    assert share.index() == 0
    whole = claimers(gpu, None)
    whole.waits("all its memory")
    share.end()
    assert whole.index() == 0
    later = claimers(gpu, 100)
    later.waits("100 MB")
    whole.end()
    assert later.index() == 0
    larger = claimers(gpu, 5000)
    larger.waits("5000 MB")
    later.end()
    assert larger.index() == 0


def test_a_jobs_share_is_held_until_its_process_and_its_gpu_memory_are_gone(claimers):
    """The embed job's claim outlives embed_shard: a process holds its CUDA context and the
    allocator's cache until it ends, so the next job's share starts only then."""
    gpu = ["GPU-one"]
    job = claimers(gpu, 800, until_exit=True)
    assert job.index() == 0  # the claim's context is left
    following = claimers(gpu, 800)
    following.waits("800 MB")
    job.end()
    assert following.index() == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="stand-ins are for a machine without GPUs")
def test_a_job_on_the_cpu_claims_no_gpu(monkeypatch, tmp_path):
    """embedding.device cpu: no claim, even where GPUs (stand-ins here) are there; auto on a
    machine with only stand-ins: a claim of its share, held while in the context."""
    gpu = locks.Gpu(f"GPU-test-{uuid.uuid4()}", 1000)
    monkeypatch.setenv(workflow_lib.embed.job.GPUS_VARIABLE, f"{gpu.uuid}={gpu.memory_mb}")
    claims = Path(tempfile.gettempdir()) / f"virnucpro-gpu-claims-{os.getuid()}"
    with claimed_device("cpu", 300) as device:
        assert device.type == "cpu" and not list(claims.glob(f"{gpu.uuid}.*"))
    with claimed_device("auto", 300) as device:
        assert device.type == "cpu" and [p.name for p in claims.glob(f"{gpu.uuid}.*")] == [
            f"{gpu.uuid}.300mb.{os.getpid()}.claim"
        ]


@pytest.mark.slow
def test_embed_cli(shard, demo_models, tmp_path):
    def run(command):
        return subprocess.run(command, capture_output=True, text=True)

    output = tmp_path / "cli.h5"
    options = {"num_workers": 1, "threads": 1, "token_budget": 500, "progress_seconds": 0.000001}  # a line a batch
    command = embed_command("dnabert", demo_models["dnabert"], shard / "shard_0.fna", output, **options)
    missing = command.index("--embeddings")
    ok = run(command[:missing] + command[missing + 2 :])
    assert ok.returncode == 2 and "--embeddings" in ok.stderr  # argparse: a required option
    ok = run(command)
    assert ok.returncode == 0, ok.stderr
    assert "0 loader workers (1 asked, 1 blocks)" in ok.stderr
    frames = len(ShardIndex.read(shard / "shard_0.fna"))
    lines = re.findall(rf"INFO ([\d,]+) frames of {frames:,}, ([\d.,]+)/s, (\d+)% done, ETA [\d,]+ s, .*", ok.stderr)
    assert len(lines) >= 2, ok.stderr
    progress = [line for line in ok.stderr.splitlines() if "frames of" in line]
    assert all("tokens/s, fill" in line and "loader wait" in line for line in progress)
    done = [int(d.replace(",", "")) for d, _, _ in lines]
    assert done == sorted(done) and 0 < done[0] < frames and float(lines[0][1].replace(",", "")) > 0
    assert re.search(rf"INFO {frames:,} frames of {frames:,}, [\d.,]+/s, .*tokens/s, fill.*\n.*INFO wrote ", ok.stderr)
    bad = run(embed_command("esm", tmp_path / "missing.pt", shard / "shard_0.faa", tmp_path / "x.h5"))
    assert bad.returncode == 2
    assert (
        bad.stderr.strip() == f"error: {tmp_path / 'missing.pt'}: ESM-2 checkpoint not found; "
        "set models.esm.checkpoint to a fair-esm name or a .pt file"
    )
    workers = run(
        embed_command("esm", demo_models["esm"], shard / "shard_0.faa", tmp_path / "y.h5", num_workers="many")
    )
    assert workers.returncode == 2 and "--num-workers: expected a whole number or 'auto', got 'many'" in workers.stderr


def cut_short(files: list[Path], rng: np.random.Generator) -> list[Path]:
    """Cut every other file at a random byte offset, the first of them to zero bytes, as a crash
    leaves files whose data never reached the disk; the files cut."""
    cut = files[::2]
    for i, path in enumerate(cut):
        data = path.read_bytes()
        path.write_bytes(data[: int(rng.integers(0, len(data))) if i else 0])
    return cut


@pytest.mark.slow
def test_killed_job_resumes_from_its_last_commit(few_read_frames, demo_models, tmp_path):
    """SIGKILL in the middle of a shard, then the same command again: it embeds only what was not
    committed, says so in its log, and writes exactly what an uninterrupted run writes; also with
    every other commit and its unfinished output cut short (as a node lost before they reached the
    disk leaves them): each cut commit is named in the log and its frames embedded again, no row
    of it kept."""
    shard, output = few_read_frames / "shard_0.faa", tmp_path / "e.h5"
    options = {"num_workers": 0, "token_budget": 512, "commit_seconds": 0, **ONE_THREAD}  # a commit after every batch
    reference = subprocess.run(
        embed_command("esm", demo_models["esm"], shard, tmp_path / "reference.h5", **options),
        capture_output=True,
        text=True,
    )
    assert reference.returncode == 0, reference.stderr

    parts = tmp_path / ".e.h5.parts"
    command = embed_command("esm", demo_models["esm"], shard, output, **options)
    job = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(parts.glob("part_*.npz"))) < 20 and job.poll() is None:
        time.sleep(0.02)
    job.kill()
    assert job.wait() == -signal.SIGKILL, "the job ended before it could be killed"
    assert not output.exists() and not list(tmp_path.glob(".e.h5.tmp*"))
    intact = sorted(parts.glob("part_*.npz"))
    rng = np.random.default_rng(7)
    damaged = cut_short(intact, rng) + cut_short(list(parts.glob("output.tmp*.h5")), rng)
    kept = sum(_rows(part) for part in intact if part not in damaged)

    resumed = subprocess.run(command, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    n = len(ShardIndex.read(shard))
    committed = int(resumed.stderr.split("resuming: ")[1].split(" of ")[0])
    assert committed == kept and 10 <= committed < n and f"resuming: {committed} of {n} frames" in resumed.stderr
    unreadable = re.findall(r"(part_\d+\.npz): unreadable \(.*\); its frames are embedded again", resumed.stderr)
    assert sorted(unreadable) == sorted(part.name for part in damaged if part.suffix == ".npz")
    with h5py.File(output) as got, h5py.File(tmp_path / "reference.h5") as want:
        assert got["ids"][()].tolist() == want["ids"][()].tolist()
        # the same batches (test_a_resumed_shard_gives_the_same_batches), computed in three processes
        assert np.abs(got["embeddings"][()] - want["embeddings"][()]).max() <= EMBEDDING_TOLERANCE
        assert got.attrs["n_tokens"] == want.attrs["n_tokens"] and got.attrs["resumed_frames"] == committed
        assert got.attrs["checkpoint_sha256"] == want.attrs["checkpoint_sha256"]
    assert not parts.exists()


def test_a_resumed_shard_gives_the_same_batches(read_frames, demo_models):
    """What makes a resumed job equal to an uninterrupted one: with any rows committed, the loader
    yields the batches of a run from zero that hold a row not committed, the same to the token."""
    index = ShardIndex.read(read_frames / "shard_0.faa")
    encode = ESMTokens.of(esm_loading.load(str(demo_models["esm"]))[1])
    whole = list(ShardBatches(index, encode, 1024))
    done = np.zeros(len(index), dtype=bool)
    done[: len(index) // 3] = True  # a prefix, as commits leave it
    done[np.random.default_rng(0).choice(len(index), 50, replace=False)] = True  # and rows anywhere
    resumed = list(ShardBatches(index, encode, 1024, done))
    expected = [b for b in whole if not done[b.rows].all()]
    assert 0 < len(resumed) < len(whole) and len(resumed) == len(expected)
    for got, want in zip(resumed, expected):
        assert np.array_equal(got.rows, want.rows) and np.array_equal(got.tokens, want.tokens)
        assert np.array_equal(got.cu_seqlens, want.cu_seqlens)


def test_commits_of_other_settings_or_unreadable_parts_are_not_used(tmp_path):
    shard = tmp_path / "shard.faa"
    shard.write_text("".join(f">r{i}\nMK\n" for i in range(6)))
    index = ShardIndex.read(shard)
    out, tokens = np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6)

    def resumed(fingerprint: dict) -> ShardRows:
        """The rows of a job of `fingerprint`, an earlier run's commits replayed into a fresh file."""
        rows = ShardRows(tmp_path / "e.h5", fingerprint, interval=1e9)
        handle = h5py.File(tmp_path / f"replayed{len(list(tmp_path.glob('replayed*')))}.h5", "w")
        rows.replay(index, h5store.Writer(handle, list(index), 2, "float32"))
        return rows

    first = resumed({"token_budget": 512})
    assert not first.committed.any()
    for batch in ([0, 1], [4]):
        first.store([(np.array(batch), tokens[batch], out[batch])])
        first.commit()
    again = resumed({"token_budget": 512})
    done = again.committed
    assert done.tolist() == [True, True, False, False, True, False] and again.done == 3
    assert np.array_equal(again.writer.data[()][done], out[done]) and np.array_equal(again.tokens[done], tokens[done])

    (first.dir / "part_000001.npz").write_bytes(b"not a zip")  # rows 4: embedded again
    assert resumed({"token_budget": 512}).committed.sum() == 2
    stamp = first.dir / "fingerprint.json"
    stamp.write_bytes(stamp.read_bytes()[:5])  # cut short by a crash: from zero, not a traceback
    assert not resumed({"token_budget": 512}).committed.any()
    other = resumed({"token_budget": 1024})
    assert not other.committed.any()
    assert not list(other.dir.glob("part_*"))


def whole_array_reference(path, model, checkpoint, budget):
    """What embed wrote before it streamed: every batch's rows into one [N, D] float32 array."""
    settings = embed_settings(model, checkpoint, layer=2 if model == "esm" else None)
    embedder = build_embedder(settings, CPU, "fp32")
    index = ShardIndex.read(path)
    feed, out = DeviceFeed(embedder, CPU), np.zeros((len(index), embedder.dim), np.float32)
    with open_loader(ShardBatches(index, embedder.tokens, budget), 0, 2) as batches:
        for batch in batches:
            feed.submit(batch.tensors())
            for rows, _, pooled in feed.ready():
                out[rows] = pooled
    return out


def test_streamed_output_equals_the_whole_array(shard, demo_models, tmp_path, monkeypatch):
    """float32 storage is the whole-array result to the bit, also when the writer flushes after
    every batch into small chunks (partial chunks read back and rewritten); float16 is its rounding."""
    from workflow_lib.io import h5store

    path = shard / "shard_0.faa"
    want = whole_array_reference(path, "esm", demo_models["esm"], 600)
    plain = embed(path, tmp_path / "plain.h5", "esm", demo_models["esm"], token_budget=600, num_workers=0)
    monkeypatch.setattr(h5store, "CHUNK_ROWS", 7)
    monkeypatch.setattr(h5store, "BUFFER_BYTES", 1)
    small = embed(path, tmp_path / "small.h5", "esm", demo_models["esm"], token_budget=600, num_workers=0)
    half = embed(
        path, tmp_path / "half.h5", "esm", demo_models["esm"], token_budget=600, num_workers=0, storage="float16"
    )
    assert plain[2]["storage"] == "float32" and plain[1].dtype == np.float32 and small[2]["storage"] == "float32"
    assert np.array_equal(plain[1], want) and np.array_equal(small[1], want)
    assert half[1].dtype == np.float16 and half[2]["storage"] == "float16"
    assert np.array_equal(half[1], want.astype(np.float16))


@pytest.mark.parametrize("value, advice", [(np.nan, "embedding.precision"), (1e6, "embedding.storage to float32")])
def test_non_finite_embeddings_fail_the_job_at_their_batch(shard, demo_models, tmp_path, monkeypatch, value, advice):
    ready, calls = DeviceFeed.ready, []

    def poisoned(self):
        calls.append(len(calls))
        results = ready(self)
        if len(calls) == 2:
            rows, tokens, pooled = results[-1]
            pooled = pooled.copy()
            pooled[-1, 0] = value
            results[-1] = rows, tokens, pooled
        return results

    monkeypatch.setattr(DeviceFeed, "ready", poisoned)
    index = ShardIndex.read(shard / "shard_0.faa")
    with pytest.raises(RuntimeError, match=rf"non-finite embeddings for \['[^']+'\]; .*{advice}"):
        embed(
            shard / "shard_0.faa",
            tmp_path / "e.h5",
            "esm",
            demo_models["esm"],
            token_budget=600,
            num_workers=0,
            storage="float16",
        )
    assert len(calls) == 2 and len(index) > 2  # failed at the poisoned batch, not at the end
    assert not (tmp_path / "e.h5").exists() and not list(tmp_path.glob(".e.h5.parts/output.tmp*"))


@pytest.mark.parametrize(
    "capability, arch_list, runs",
    [
        ((9, 0), ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"], True),
        ((8, 9), ["sm_80", "sm_86", "sm_90a"], True),  # sm_86's code runs on 8.9
        ((7, 0), ["sm_75", "sm_80", "sm_90", "sm_100", "sm_120"], False),  # V100 under torch 2.11's CUDA 13 wheels
        ((7, 0), ["sm_80", "compute_70"], True),  # PTX, compiled on the device
        ((6, 1), ["sm_75", "compute_75"], False),
    ],
)
def test_gpus_this_torch_has_no_kernels_for_are_refused_at_start(capability, arch_list, runs):
    """Device-independent: the check that the embed job runs on a GPU before its first kernel."""
    from workflow_lib.embed.job import check_gpu

    if runs:
        check_gpu("GPU", capability, arch_list, "13.0")
    else:
        with pytest.raises(InputError, match=rf"GPU \(compute capability {capability[0]}\.{capability[1]}\) is not"):
            check_gpu("GPU", capability, arch_list, "13.0")


def test_fp8_is_esm_2s_on_a_gpu_and_fp32_on_the_cpu(monkeypatch):
    """embedding.precision fp8: the CPU computes in fp32 as for every precision; on a GPU the ESM-2
    job runs fp8 (its loading checks the GPU's FP8 GEMMs) and the DNABERT-S job fp16."""
    from workflow_lib.embed.job import select_precision

    assert select_precision("fp8", CPU, "esm2") == select_precision("fp8", CPU, "dnabert_s") == "fp32"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "GPU")
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_90"])
    gpu = torch.device("cuda", 0)
    assert select_precision("fp8", gpu, "esm2") == "fp8" and select_precision("fp8", gpu, "dnabert_s") == "fp16"
