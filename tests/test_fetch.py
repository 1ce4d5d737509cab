"""fetch_models: named models downloaded into models.cache_dir and verified on a machine with
internet; jobs then load them from there with no network.

A real HTTP server on 127.0.0.1 (model_server.py) stands in for the network: fair-esm's site, the
Hugging Face Hub as huggingface_hub's own client talks to it, and a classifier URL. It serves the
tiny demo models in their real formats. The demo ESM-2 file goes by the real fair-esm name
esm2_t6_8M_UR50D, which fetching and loading only use to find files; the model check takes a named
model's sizes from fair-esm's table (6 layers of 320), so the classifier served here takes
48 (demo DNABERT-S) + 320 features, and the embeddings (from the file) have 64.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
import torch
import yaml
from helpers import ENV, GENOMES, ROOT, SNAKEMAKE, job_counts
from model_server import ModelServer

from harness.stages import DEFAULTS, embed_command
from workflow_lib.classify.calibration import Calibration
from workflow_lib.cli.errors import InputError
from workflow_lib.models import Embedder, classifier
from workflow_lib.models.checkpoints import classifier_path
from workflow_lib.models.fetch_models import fetch_classifier, fetch_models

ESM, REPO = "esm2_t6_8M_UR50D", "zhihan1996/DNABERT-S"
ESM_PATH, CLASSIFIER_PATH = f"/fair-esm/models/{ESM}.pt", "/files/classifier.pt"
AGAIN = "run `snakemake --profile profiles/local fetch_models` again"
FETCH_FIRST = (
    "run `snakemake --profile profiles/local fetch_models` on a machine with internet (then copy cache_dir if needed)"
)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def sources(demo_models, tmp_path_factory) -> dict:
    """What the server serves: files by URL path, and the Hub repository's files."""
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("classifier") / "classifier.pt"
    classifier.save(classifier.MLPClassifier(48 + 320), path, chunk_length=500)
    esm = demo_models["esm"]
    repo = {p.name: p.read_bytes() for p in demo_models["dnabert"].iterdir()}
    return {
        "files": {
            ESM_PATH: esm.read_bytes(),
            f"/fair-esm/regression/{ESM}-contact-regression.pt": esm.with_name(
                f"{esm.stem}-contact-regression.pt"
            ).read_bytes(),
            CLASSIFIER_PATH: path.read_bytes(),
        },
        "repo": {**repo, "bert_layers.py": b"# model code: never fetched, never run\n"},
    }


@pytest.fixture
def server(sources, monkeypatch):
    with ModelServer() as server:
        server.files.update(sources["files"])
        server.repos[REPO] = dict(sources["repo"])
        monkeypatch.setenv("FAIR_ESM_URL", f"{server.url}/fair-esm")
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def fetch(server: ModelServer, cache, pinned: dict | None = None) -> dict:
    """The models, then the classifier, checked against them; what fetch_models records."""
    progress, pinned = DEFAULTS["progress_seconds"], pinned or {}
    models = [Embedder("dnabert", "dnabert_s", REPO), Embedder("esm", "esm2", ESM)]
    manifest = fetch_models(models, str(cache), pinned, progress)
    fetch_classifier(server.url + CLASSIFIER_PATH, models, str(cache), pinned, progress, 500, None)
    return manifest


def snapshot(server: ModelServer, cache):
    return cache / "models--zhihan1996--DNABERT-S" / "snapshots" / server.commit(REPO)


def leftovers(cache) -> list:
    return [p for p in cache.rglob("*") if ".tmp" in p.name or p.name.endswith((".incomplete", ".part"))]


def test_fetch_verifies_records_and_fetches_once(server, tmp_path):
    cache = tmp_path / "cache"
    manifest = fetch(server, cache)
    hub = cache / "torch" / "hub" / "checkpoints"  # torch hub's layout under TORCH_HOME=cache/torch
    assert (hub / f"{ESM}.pt").read_bytes() == server.files[ESM_PATH]
    assert (hub / f"{ESM}-contact-regression.pt").is_file()
    assert sorted(p.name for p in snapshot(server, cache).iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    fetched = classifier_path(server.url + CLASSIFIER_PATH, str(cache.resolve()))
    assert Path(fetched).read_bytes() == server.files[CLASSIFIER_PATH]
    assert json.loads((cache / "fetched.json").read_text()) == manifest
    assert {name: (m["source"], m["kind"]) for name, m in manifest.items()} == {
        "esm": (ESM, "fair-esm"),
        "dnabert": (REPO, "huggingface"),
    }
    assert manifest["dnabert"]["revision"] == server.commit(REPO)
    for model in manifest.values():
        for path, entry in model["files"].items():
            data = (cache / path).read_bytes()
            assert (entry["size"], entry["sha256"]) == (len(data), sha256(data))
    assert len(manifest["esm"]["files"]) == 2 and len(manifest["dnabert"]["files"]) == 4

    server.requests.clear()
    assert fetch(server, cache) == manifest
    downloads = [r for r in server.requests if r[0] == "GET" and not r[1].startswith("/api/")]
    assert downloads == []  # only metadata: sizes (HEAD) and the Hub's file list
    assert leftovers(cache) == []


@pytest.mark.parametrize("case", ["cut_download", "damaged_hub_file", "wrong_pin"])
def test_a_download_that_does_not_verify_is_deleted(server, tmp_path, case):
    cache, pinned = tmp_path / "cache", None
    if case == "cut_download":  # the connection drops after 1,000 bytes
        server.cut[ESM_PATH] = 1000
        size = len(server.files[ESM_PATH])
        expected = (
            f"{server.url}{ESM_PATH}: 1,000 bytes where the source declares {size:,} (an incomplete download), "
            f"so it is deleted; {AGAIN}"
        )
        gone = cache / "torch" / "hub" / "checkpoints" / f"{ESM}.pt"
    elif case == "damaged_hub_file":  # the bytes differ from the SHA-256 the Hub publishes
        data = server.repos[REPO]["model.safetensors"]
        server.damaged[f"/{REPO}/resolve/{server.commit(REPO)}/model.safetensors"] = damaged = data[::-1]
        expected = (
            f"{REPO}: model.safetensors: SHA-256 {sha256(damaged)} where the source declares {sha256(data)} "
            f"(a damaged download), so it is deleted; {AGAIN}"
        )
        gone = snapshot(server, cache) / "model.safetensors"
    else:
        pinned = {"classifier.pt": "0" * 64}
        expected = (
            f"{server.url}{CLASSIFIER_PATH}: SHA-256 {sha256(server.files[CLASSIFIER_PATH])} where "
            f"models.checksums pins {'0' * 64}, so it is deleted; fix the pin if the source is right"
        )
        gone = Path(classifier_path(server.url + CLASSIFIER_PATH, str(cache.resolve())))
    with pytest.raises(InputError) as error:
        fetch(server, cache, pinned)
    assert str(error.value) == expected
    assert not gone.exists() and not gone.is_symlink()
    if case == "damaged_hub_file":
        blobs = (cache / "models--zhihan1996--DNABERT-S" / "blobs").iterdir()
        assert not any(blob.read_bytes() == damaged for blob in blobs)
    assert leftovers(cache) == [] and (cache / "fetched.json").exists() == (case == "wrong_pin")


def write_shards(directory) -> dict:
    directory.mkdir()
    (directory / "shard.faa").write_text(">a_chunk_1F1\nMKVLAAGIVGLLLA\n>b_chunk_1F2\nMSTNPKPQRKTKRNTNRRPQDVKFPGG\n")
    (directory / "shard.fna").write_text(">a_chunk_1\nATGAAAGTTCTGGCAGCAGGTATC\n>b_chunk_1\nATGTCTACTAACCCGAAACCG\n")
    return {"esm": directory / "shard.faa", "dnabert": directory / "shard.fna"}


def offline_env(cache) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("FAIR_ESM_URL", "HF_ENDPOINT")}
    return {**env, "HF_HUB_OFFLINE": "1", "TORCH_HOME": str(cache / "torch")}


@pytest.mark.slow
def test_fetched_models_embed_offline(server, tmp_path):
    """With the server gone and HF_HUB_OFFLINE=1, embed jobs load both models from the cache alone."""
    cache = tmp_path / "cache"
    fetch(server, cache)
    server.stop()
    shards = write_shards(tmp_path / "shards")
    for model, checkpoint, dim in (("esm", ESM, 64), ("dnabert", REPO, 48)):
        output = tmp_path / f"{model}.h5"
        layer = {"layer": 2} if model == "esm" else {}
        command = embed_command(model, checkpoint, shards[model], output, cache_dir=cache, num_workers=0, **layer)
        result = subprocess.run(command, capture_output=True, text=True, env=offline_env(cache))
        assert result.returncode == 0, result.stderr
        with h5py.File(output) as h5:
            assert h5["embeddings"].shape == (2, dim) and h5.attrs["checkpoint"] == checkpoint


@pytest.mark.parametrize("job", ["embed", "check_models"])
def test_an_offline_job_without_the_models_says_to_fetch_them(tmp_path, job):
    cache, shards = tmp_path / "empty", write_shards(tmp_path / "shards")
    if job == "embed":
        command = embed_command("esm", ESM, shards["esm"], tmp_path / "e.h5", cache_dir=cache, layer=2)
        missing = f"models.esm.checkpoint: '{ESM}'"
    else:
        args = ["--embedder", "dnabert", "dnabert_s", REPO, "last", "--embedder", "esm", "esm2", ESM, "2"]
        args += ["--model-check", str(tmp_path / "m.json")]
        args += ["--chunk-length", "500", "--cache-dir", str(cache)]
        command = [sys.executable, str(ROOT / "scripts" / "check_models.py"), *args]
        missing = f"models.dnabert.checkpoint: '{REPO}'"
    result = subprocess.run(command, capture_output=True, text=True, env=offline_env(cache))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {missing} is not in the model cache {cache}; {FETCH_FIRST}"


@pytest.mark.slow
def test_snakemake_fetch_models_then_a_classifier_swap_reruns_the_scores_alone(server, demo_models, tmp_path):
    """`snakemake fetch_models` on a machine with internet: the named model, and the classifier given
    by URL, checked against the models; the run then needs no network, nor does a model check run
    again. A classifier swap (another URL, a local file) reruns the classifier's fetch and the
    scores, never the models' fetch, their check, the plan or an embedding; one made for other
    models is refused by its fetch, first in the run."""
    (tmp_path / "samples.tsv").write_text(f"sample\tpath\nphix\t{GENOMES / 'phiX174.fasta'}\n")
    torch.manual_seed(0)
    for name, width in (("a", 64), ("b", 64), ("wrong", 99)):  # the demo ESM-2 file gives 64
        path = tmp_path / f"{name}.pt"
        embedders = [["dnabert", 48], ["esm", width]]
        classifier.save(classifier.MLPClassifier(48 + width), path, chunk_length=500, embedders=embedders)
        server.files[f"/{name}/classifier.pt"] = path.read_bytes()
    shutil.copy(demo_models["esm"], tmp_path / "esm.pt")
    esm = {"checkpoint": str(tmp_path / "esm.pt"), "layer": 2}

    def snakemake(classifier: str, *options, env=ENV, calibration=None, fails=False) -> tuple[str, dict[str, int]]:
        models = {"esm": esm, "dnabert": {"checkpoint": REPO}, "classifier": classifier, "calibration": calibration}
        settings = {"models": models, "call": {"max_qvalue": None}, "outputs": {"keep_embeddings": True}}
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({"samples": "samples.tsv", **settings}))
        command = SNAKEMAKE + ["--directory", str(tmp_path), "--configfile", str(config), "-p", *options]
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        output = result.stdout + result.stderr
        assert (result.returncode != 0) == fails, output[-3000:]
        return output, job_counts(output)

    url = server.url + "/a/classifier.pt"
    _, jobs = snakemake(url, "fetch_models", env={**ENV, "HF_ENDPOINT": server.url})
    assert jobs.keys() == {"fetch_embedding_models", "fetch_classifier", "fetch_models"}
    assert sorted(json.loads((tmp_path / "models" / "cache" / "fetched.json").read_text())) == ["dnabert"]  # named

    def cached(url: str) -> Path:
        return tmp_path / classifier_path(url, "models/cache")

    assert cached(url).read_bytes() == server.files["/a/classifier.pt"]
    server.stop()
    output, jobs = snakemake(url)  # offline: HF_ENDPOINT is the default hub, which this test cannot reach
    assert "fetch_embedding_models" not in jobs and "fetch_classifier" not in jobs
    assert "HF_HUB_OFFLINE=1 TORCH_HOME=models/cache/torch python" in output  # the model check's
    report = json.loads((tmp_path / "results" / "checks" / "models.json").read_text())
    assert (report["dnabert"]["dim"], report["esm"]["dim"]) == (48, 64)
    # the model check again (another layer, the local checkpoint replaced or moved): no download
    checkpoint, fetches = (tmp_path / "esm.pt").read_bytes(), {"fetch_embedding_models", "fetch_classifier"}
    (tmp_path / "moved.pt").write_bytes(checkpoint)
    for change in ("layer", "replaced", "moved"):
        if change == "layer":
            esm["layer"] = 1
        elif change == "replaced":
            (tmp_path / "esm.pt").write_bytes(checkpoint + b"\0")  # other content (a dry run reads none)
        else:
            esm["checkpoint"] = str(tmp_path / "moved.pt")
        _, jobs = snakemake(url, "-n")
        assert {"check_models", "plan"} <= jobs.keys() and not fetches & jobs.keys(), change
        esm.update(layer=2, checkpoint=str(tmp_path / "esm.pt"))
    (tmp_path / "esm.pt").write_bytes(checkpoint)  # the same content: Snakemake reruns nothing for it
    scored = {"score", "predict", "call", "summarize", "overview", "plot_sample", "all"}

    def calibration_for(name: str) -> str:
        digest, path = sha256(server.files[f"/{name}/classifier.pt"]), tmp_path / f"calibration_{name}.json"
        Calibration(digest, 500, "platt", [-5, 5], [-4, 4], 0.3, 0.8, 0.2, 0.1, 0.3, 9, {}, {}).save(path)
        return str(path)

    # with b's calibration: a's file, of the same name in the cache, is not taken for b's at start-up
    _, jobs = snakemake(server.url + "/b/classifier.pt", "-n", calibration=calibration_for("b"))
    assert jobs.keys() == scored | {"fetch_classifier", "plot_calibration"}
    _, jobs = snakemake(str(tmp_path / "b.pt"), "-n")
    assert jobs.keys() == scored
    # refused by the fetch, as the run starts: a classifier for other models, a calibration for
    # another classifier (the start-up cannot check either: the URL's file is not in the cache)
    calibration = calibration_for("a")
    with ModelServer() as again:
        again.files = {path: server.files[path] for path in ("/wrong/classifier.pt", "/b/classifier.pt")}
        wrong_url, b_url = again.url + "/wrong/classifier.pt", again.url + "/b/classifier.pt"
        wrong, _ = snakemake(wrong_url, fails=True)
        other, _ = snakemake(b_url, calibration=calibration, fails=True)
    refusal = (
        f"error: {cached(wrong_url)}: the classifier was trained on 99 features of esm but its checkpoint gives 64; "
        "configure the checkpoint it was trained on, or train a classifier on this one"
    )
    assert refusal in wrong.splitlines()
    b = sha256(server.files["/b/classifier.pt"])
    assert (
        f"error: models.calibration: {calibration}: made for another classifier file (SHA-256 "
        f"{sha256(server.files['/a/classifier.pt'])[:12]}..., the configured one is {b[:12]}...); run the calibrate "
        "target for it"
    ) in other.splitlines()
    for output, url in ((wrong, wrong_url), (other, b_url)):
        assert "rule score" not in output and not cached(url).exists()  # removed with the failed job


HOLD = (
    "import logging, sys; from pathlib import Path; from workflow_lib.io import locks; "
    "logging.basicConfig(level=logging.INFO, format='%(message)s'); "
    "held = locks.exclusive(Path({path!r})); held.__enter__(); print('held', flush=True); sys.stdin.read()"
)


def test_two_fetches_into_one_cache_take_turns_and_a_killed_one_frees_it(tmp_path):
    """The cache's lock: a second fetch waits while the first holds it, and gets it once the first is
    killed (never released by the first: the kernel drops the lock with the process)."""
    code = HOLD.format(path=str(tmp_path / "cache" / ".fetched.json.lock"))
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.Popen([sys.executable, "-c", code], text=True, env=env, **pipes)
    second = None
    try:
        assert first.stdout.readline() == "held\n"
        second = subprocess.Popen([sys.executable, "-c", code], text=True, env=env, **pipes)
        assert "waiting for another job to release" in second.stdout.readline()  # not "held"
        first.kill()
        assert second.stdout.readline() == "held\n"
    finally:
        for job in (first, second):
            if job:
                job.kill()
                job.communicate()
