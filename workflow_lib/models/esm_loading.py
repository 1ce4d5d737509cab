"""Loading ESM-2: by fair-esm name (from torch hub's cache that fetch_models fills) or local .pt
checkpoint, built in place in the job's precision; the embedder of a layer (esm.ESMEmbedder).
"""

import argparse
import hashlib
import json
import logging
import os
from pathlib import Path

import esm
import torch
from safetensors import SafetensorError, safe_open

from workflow_lib.cli.errors import InputError
from workflow_lib.io import checksums, locks
from workflow_lib.io.outputs import atomic_path
from workflow_lib.models.checkpoints import (
    ESM2_MODELS,
    converted,
    is_local,
    load_weights,
    not_fetched,
    uninitialised,
    write_safetensors,
)
from workflow_lib.models.esm import ESMEmbedder, check_fp8

FAIR_ESM_URL = "https://dl.fbaipublicfiles.com/fair-esm"
CONTACT_HEAD = ("contact_head.regression.weight", "contact_head.regression.bias")  # in the regression file
HALF = (torch.float16, torch.bfloat16)  # the precisions whose weights are copied to safetensors (copy_path)
CONFIG_KEYS = ("encoder_layers", "encoder_embed_dim", "encoder_attention_heads", "token_dropout")  # what ESM2 takes
COPY_FORMAT = "virnucpro-esm2-copy-1"
log = logging.getLogger("workflow")


def _torch_load(path: Path):
    # Real fair-esm checkpoints hold their config as an argparse.Namespace: torch >= 2.6 loads
    # with weights_only=True and refuses it unless it is allowlisted.
    return load_weights(path, "fair-esm ESM-2 checkpoint", [argparse.Namespace], mmap=True)


def read_config(checkpoint: str, cache_dir: str | None = None) -> dict:
    """{"layers", "dim"} of an ESM-2 checkpoint, without building the model (a name: the config
    check has refused one fair-esm lacks)."""
    if is_local(checkpoint):
        cfg = _local_data(Path(checkpoint))["cfg"]["model"]
        return {"layers": cfg.encoder_layers, "dim": cfg.encoder_embed_dim}
    layers, dim = ESM2_MODELS[checkpoint]
    return {"layers": layers, "dim": dim}


def _local_data(path: Path) -> dict:
    if not path.is_file():
        raise InputError(
            f"{path}: ESM-2 checkpoint not found; set models.esm.checkpoint to a fair-esm name or a .pt file"
        )
    data = _torch_load(path)
    if not isinstance(data, dict) or "cfg" not in data or "model" not in data:
        raise InputError(f"{path}: not a fair-esm ESM-2 checkpoint (no 'cfg' and 'model' entries)")
    return data


def hub_files(name: str, cache_dir: str | None) -> dict[Path, str]:
    """A named model's files in torch hub's layout under cache_dir (else torch's own), and their
    URLs (FAIR_ESM_URL in the environment: a mirror)."""
    base = os.environ.get("FAIR_ESM_URL", FAIR_ESM_URL).rstrip("/")
    checkpoints = (Path(cache_dir) / "torch" / "hub" if cache_dir else Path(torch.hub.get_dir())) / "checkpoints"
    return {
        checkpoints / f"{name}.pt": f"{base}/models/{name}.pt",
        checkpoints / f"{name}-contact-regression.pt": f"{base}/regression/{name}-contact-regression.pt",
    }


def resolve(checkpoint: str, cache_dir: str | None = None) -> Path:
    """The .pt file of a checkpoint: the path itself, or a named model's in cache_dir (jobs never download)."""
    if is_local(checkpoint):
        return Path(checkpoint)
    files = hub_files(checkpoint, cache_dir)
    if not all(p.is_file() for p in files):
        raise not_fetched("models.esm.checkpoint", checkpoint, cache_dir or torch.hub.get_dir())
    return next(iter(files))


def checkpoint_files(checkpoint: str, cache_dir: str | None = None) -> list[Path]:
    """The files a checkpoint loads from, those that exist (a named model's once it is fetched)."""
    path = Path(checkpoint) if is_local(checkpoint) else next(iter(hub_files(checkpoint, cache_dir)))
    return [p for p in (path, regression_path(path)) if p.is_file()]


def regression_path(path: Path) -> Path:
    """fair-esm's contact regression file, beside the checkpoint, as its loaders look for it."""
    return path.with_name(f"{path.stem}-contact-regression.pt")


def load(
    checkpoint: str,
    cache_dir: str | None = None,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
    digests: dict[str, str] | None = None,
) -> tuple[esm.ESM2, esm.Alphabet]:
    """An ESM-2 model by fair-esm name (fetched into cache_dir) or local .pt path, its weights in
    `dtype` on `device`, built in place: parameters uninitialised (never written, so not held), each
    memory-mapped checkpoint tensor converted once straight to `dtype` on `device` (never a float32
    copy on the host). Not fair-esm's load_model_and_alphabet_hub, which downloads and unpickles
    with weights_only=False. In half precision with a cache_dir, the first job also writes the
    converted weights to a safetensors copy (copy_path) that later jobs map straight to the device;
    `digests` ({file name: SHA-256}) name it, hashed here when not given."""
    device, path = device or torch.device("cpu"), resolve(checkpoint, cache_dir)
    copy = None
    if dtype in HALF and cache_dir:
        sources = content_of(path, digests)  # taken before reading: a file changed meanwhile never matches
        copy = copy_path(sources, cache_dir, dtype)
        if loaded := _from_copy(copy, sources, device):
            log.info("ESM-2 loaded from %s, the %s copy of %s", copy, dtype, path)
            return loaded
    data = _local_data(path)
    if regression_path(path).exists():
        data["model"].update(_torch_load(regression_path(path))["model"])
    model, alphabet, state = _built(data["cfg"]["model"], data["model"])
    parameters, built = dict(model.named_parameters()).keys(), model.state_dict()
    wrong = (set(built) - set(state) - set(CONTACT_HEAD)) | (set(state) - set(built))
    if wrong:
        raise InputError(f"{path}: not a fair-esm ESM-2 checkpoint of its own config (keys {sorted(wrong)[:3]})")
    # buffers (the rotary frequencies) as fair-esm's float32 model holds them: the file's values, in float32
    state = converted(
        state, lambda name, t: t.to(device=device, dtype=dtype if name in parameters else built[name].dtype)
    )
    model.load_state_dict(state, strict=False, assign=True)
    if copy:
        config = {key: getattr(data["cfg"]["model"], key) for key in CONFIG_KEYS}
        metadata = {"format": COPY_FORMAT, "sources": sources, "cfg": json.dumps(config)}
        _write_copy(copy, state, metadata | {"checkpoint": str(path.absolute())})
    return model.eval(), alphabet


def _built(cfg: argparse.Namespace, state: dict) -> tuple[esm.ESM2, esm.Alphabet, dict]:
    with uninitialised():  # fair-esm's ESM-2 builder, whatever the file is called
        return esm.pretrained._load_model_and_alphabet_core_v2({"cfg": {"model": cfg}, "model": state})


def copy_path(sources: str, cache_dir: str, dtype: torch.dtype) -> Path:
    """Where the safetensors copy of the checkpoint files `sources` (content_of) is kept: in
    cache_dir (a local .pt may sit in a read-only folder), named after the files' content, so that
    the same checkpoint at another path finds the same copy."""
    content = hashlib.sha256(sources.encode()).hexdigest()[:16]
    return Path(cache_dir) / "esm-copies" / f"esm2-{content}.{str(dtype).removeprefix('torch.')}.safetensors"


def content_of(path: Path, digests: dict[str, str] | None) -> str:
    """The content of the checkpoint's files as its copy records it: their SHA-256, by role."""
    files = [p for p in (path, regression_path(path)) if p.is_file()]
    digests = digests or checksums.digests(checksums.describe(files))
    return json.dumps({role: digests[p.name] for role, p in zip(("checkpoint", "regression"), files)})


def _metadata(copy: Path) -> dict:
    """The copy's metadata; {} when there is no readable copy."""
    try:
        with safe_open(copy, framework="pt") as f:
            return f.metadata() or {}
    except (OSError, SafetensorError):
        return {}


def _from_copy(copy: Path, sources: str, device: torch.device) -> tuple[esm.ESM2, esm.Alphabet] | None:
    """The model from its copy, mapped straight to `device`; None without a copy of these very files."""
    try:
        with safe_open(copy, framework="pt", device=str(device)) as f:
            metadata = f.metadata() or {}
            if metadata.get("format") != COPY_FORMAT or metadata.get("sources") != sources:
                return None
            state = {name: f.get_tensor(name) for name in f.keys()}
    except FileNotFoundError:
        return None
    except (OSError, SafetensorError) as error:  # a damaged copy: made again from the checkpoint
        log.warning("ESM-2: %s is unreadable (%s); loading the checkpoint and copying it again", copy, error)
        return None
    model, alphabet, _ = _built(argparse.Namespace(**json.loads(metadata["cfg"])), {})
    model.load_state_dict(state, strict=False, assign=True)
    return model.eval(), alphabet


def _write_copy(copy: Path, state: dict, metadata: dict[str, str]) -> None:
    """Write the loaded weights to `copy`, unless another job is writing it now or has just done so;
    then remove older copies of the same path. A read-only or full disk costs a line, not the job."""
    try:
        with locks.exclusive(copy.with_name(f".{copy.name}.lock"), wait=False) as held:
            if held and _metadata(copy) != metadata:  # another job may have just written it
                with atomic_path(copy) as tmp:
                    write_safetensors(tmp, state, metadata)
                log.info("ESM-2: weights copied to %s, which later jobs load instead", copy)
                for old in copy.parent.glob(f"*{''.join(copy.suffixes)}"):
                    if old != copy and _metadata(old).get("checkpoint") == metadata["checkpoint"]:
                        old.unlink(missing_ok=True)
    except (OSError, InputError) as error:
        log.warning("ESM-2: no copy of the weights written to %s (%s); jobs load the checkpoint as before", copy, error)


def embedder(
    checkpoint: str,
    cache_dir: str | None,
    layer: int | None,
    device: torch.device,
    dtype: torch.dtype,
    fp8=False,
    digests: dict[str, str] | None = None,
) -> "ESMEmbedder":
    """The embedder of `layer` (None: the last, as VirNucPro), compiled on CUDA; `fp8` checked first."""
    if fp8:
        check_fp8(device, dtype)
    model, alphabet = load(checkpoint, cache_dir, device, dtype, digests)
    layer = model.num_layers if layer is None else layer
    return ESMEmbedder(model, alphabet, layer, device, dtype, compiled=device.type == "cuda", fp8=fp8)
