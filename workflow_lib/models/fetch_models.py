"""fetch_models: download the configured models into models.cache_dir on a machine with internet,
verified, so that jobs on compute nodes load them with no network.

- a fair-esm name: the model and its contact regression, in torch hub's layout under
  cache_dir/torch/hub/checkpoints (jobs run with TORCH_HOME=cache_dir/torch);
- a Hugging Face id: huggingface_hub's snapshot in cache_dir (jobs find it with HF_HUB_OFFLINE=1);
- a classifier URL (fetch_classifier, a job of its own: a classifier swap reruns no model's fetch,
  check or embedding): cache_dir/classifier/<the URL's digest>/<file name>.

Every download is checked against the size its server declares, the SHA-256 the Hub publishes for
LFS files, and the SHA-256 pinned in models.checksums; a file that differs is deleted, one in the
cache that passes is not downloaded again. cache_dir/fetched.json records each named model's source
and files (relative to cache_dir, which can be copied to another machine).
"""

import hashlib
import http.client
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path

from workflow_lib.cli.errors import InputError, first_line
from workflow_lib.cli.progress import Progress
from workflow_lib.io import checksums, locks
from workflow_lib.io.outputs import atomic_path
from workflow_lib.io.tables import write_json
from workflow_lib.models import Embedder, loading_module
from workflow_lib.models.checkpoints import MANIFEST, classifier_path, is_local

log = logging.getLogger("workflow")
_BLOCK = 1 << 20
_TIMEOUT_S = 60
_AGAIN = "run `snakemake --profile profiles/local fetch_models` again"


def fetch_models(embedders: list[Embedder], cache_dir: str, pinned: dict, progress_seconds: float) -> dict:
    """Fetch the named embedding models (a local checkpoint is the model check's); write
    cache_dir/fetched.json and return what it records."""
    cache = Path(cache_dir).resolve()
    with locks.exclusive(cache / f".{MANIFEST}.lock"):  # two fetches into one cache take turns
        models = {e.name: _fetch(e, cache, pinned, progress_seconds) for e in embedders if not is_local(e.checkpoint)}
        write_json(models, cache / MANIFEST)
    log.info("models fetched into %s; jobs can run offline (%s)", cache, cache / MANIFEST)
    return models


def fetch_classifier(
    url: str,
    embedders: list[Embedder],
    cache_dir: str,
    pinned: dict,
    progress_seconds: float,
    chunk_length: int,
    stated_chunk_length: int | None,
) -> Path:
    """Download the classifier at `url` into cache_dir/classifier/, verified, and check it against
    the models' widths (read from their configs: the embedding models are fetched first)."""
    from workflow_lib.models import classifier  # torch

    cache = Path(cache_dir).resolve()
    path = Path(classifier_path(url, str(cache)))
    with locks.exclusive(cache / f".{MANIFEST}.lock"):
        _download(url, path, pinned, progress_seconds)
    widths = [(e.name, loading_module(e.architecture).read_config(e.checkpoint, cache_dir)["dim"]) for e in embedders]
    classifier.check_fits(path, widths, chunk_length, stated_chunk_length)
    return path


def _fetch(embedder: Embedder, cache: Path, pinned: dict, progress_seconds: float) -> dict:
    """A named checkpoint, downloaded from where its architecture's come from."""
    checkpoint, loading = embedder.checkpoint, loading_module(embedder.architecture)
    if embedder.declared.source == "huggingface":
        return _hugging_face(embedder, cache, pinned)
    files = {
        str(path.relative_to(cache)): _download(url, path, pinned, progress_seconds)
        for path, url in loading.hub_files(checkpoint, str(cache)).items()
    }
    return {"source": checkpoint, "kind": "fair-esm", "files": files}


def _hugging_face(embedder: Embedder, cache: Path, pinned: dict) -> dict:
    from huggingface_hub import HfApi, hf_hub_url, snapshot_download

    checkpoint, hub_files = embedder.checkpoint, loading_module(embedder.architecture).HUB_FILES
    endpoint = os.environ.get("HF_ENDPOINT")  # read now: huggingface_hub reads it once, on import
    try:
        folder = Path(snapshot_download(checkpoint, cache_dir=cache, allow_patterns=hub_files, endpoint=endpoint))
        info = HfApi(endpoint=endpoint).model_info(checkpoint, revision=folder.name, files_metadata=True)
    except Exception as error:  # huggingface_hub's many kinds: not found, gated, no network, a short download
        raise InputError(
            f"models.{embedder.name}.checkpoint: cannot download '{checkpoint}' from {endpoint or 'huggingface.co'} "
            f"({first_line(error)}); check the id and the network, then {_AGAIN}"
        ) from None
    files = {}
    for sibling in info.siblings:
        if sibling.rfilename in hub_files:
            path = folder / sibling.rfilename
            size, sha256 = path.stat().st_size, checksums.sha256(path)
            declared = sibling.lfs.sha256 if sibling.lfs else None  # the Hub publishes SHA-256 for LFS files
            if problem := _problem(sibling.rfilename, size, sha256, sibling.size, declared, pinned):
                blob = path.resolve()  # the snapshot links the name to a blob: both go
                path.unlink()
                blob.unlink(missing_ok=True)
                raise InputError(f"{checkpoint}: {sibling.rfilename}: {problem}")
            url = hf_hub_url(checkpoint, sibling.rfilename, revision=folder.name, endpoint=endpoint)
            files[str(path.relative_to(cache))] = {"url": url, "size": size, "sha256": sha256}
    log.info("%s at %s: %d files verified in %s", checkpoint, folder.name, len(files), folder)
    return {"source": checkpoint, "kind": "huggingface", "revision": folder.name, "files": files}


def _download(url: str, path: Path, pinned: dict, progress_seconds: float) -> dict:
    """Download `url` to `path`, verified, unless `path` holds it already."""
    declared = _declared_size(url)
    if path.is_file() and declared in (None, path.stat().st_size):
        sha256 = checksums.sha256(path)
        if pinned.get(path.name, sha256) == sha256:
            log.info("%s: in the cache already (%s bytes)", path, f"{path.stat().st_size:,}")
            return {"url": url, "size": path.stat().st_size, "sha256": sha256}
    log.info("downloading %s to %s", url, path)
    digest, size = hashlib.sha256(), 0
    progress = Progress(log, "bytes", total=declared, interval=progress_seconds)
    with atomic_path(path) as tmp:  # removed, not renamed, when the block fails
        try:
            with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response, open(tmp, "wb") as out:
                while block := response.read(_BLOCK):
                    out.write(block)
                    digest.update(block)
                    size += len(block)
                    progress.update(size)
        except (OSError, http.client.HTTPException) as error:
            raise InputError(f"{url}: the download failed ({first_line(error)}); {_AGAIN}") from None
        if problem := _problem(path.name, size, digest.hexdigest(), declared, None, pinned):
            raise InputError(f"{url}: {problem}")
    log.info("%s: %s", path, progress.line(size))
    return {"url": url, "size": size, "sha256": digest.hexdigest()}


def _declared_size(url: str) -> int | None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=_TIMEOUT_S) as response:
            length = response.headers.get("Content-Length")
    except urllib.error.HTTPError as error:
        raise InputError(f"{url}: the server answers {error}; check the URL") from None
    except OSError as error:  # urllib's URLError is one
        reason = getattr(error, "reason", error)
        raise InputError(f"{url}: cannot reach it ({reason}); fetch_models needs a machine with internet") from None
    return int(length) if length else None


def _problem(name: str, size: int, sha256: str, declared_size, declared_sha256, pinned: dict) -> str:
    """What is wrong with a downloaded file, and what to do; '' when nothing is."""
    advice = _AGAIN
    if declared_size is not None and size != declared_size:
        problem = f"{size:,} bytes where the source declares {declared_size:,} (an incomplete download)"
    elif declared_sha256 and sha256 != declared_sha256:
        problem = f"SHA-256 {sha256} where the source declares {declared_sha256} (a damaged download)"
    elif pinned.get(name, sha256) != sha256:
        problem = f"SHA-256 {sha256} where models.checksums pins {pinned[name]}"
        advice = "fix the pin if the source is right"
    else:
        return ""
    return f"{problem}, so it is deleted; {advice}"
