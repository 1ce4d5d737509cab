"""Loading DNABERT-S: a Hugging Face model directory (local, or a hub id that fetch_models put in
cache_dir), its weights converted once into the job's precision; the embedder (dnabert.DNABERTEmbedder).
torch and the model code are imported only where a model is built: the tokenize job reads the
checkpoint's tokenizer and config through this module without them.
"""

import json
from pathlib import Path
from typing import TYPE_CHECKING

from workflow_lib.cli.errors import InputError
from workflow_lib.models.checkpoints import converted, is_local, load_weights, not_fetched, uninitialised
from workflow_lib.models.tokens import DNABERTTokens

if TYPE_CHECKING:
    import torch

    from workflow_lib.models.dnabert import DNABERT, DNABERTEmbedder

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
HUB_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", *WEIGHT_FILES]


def resolve(checkpoint: str, cache_dir: str | None = None) -> Path:
    """The local directory of a DNABERT-S checkpoint: the path itself, or an id's snapshot in cache_dir."""
    if is_local(checkpoint):
        path = Path(checkpoint)
        if not (path / "config.json").is_file():
            raise InputError(
                f"{path}: no config.json; models.dnabert.checkpoint must be a DNABERT-S directory "
                "(config.json, model.safetensors or pytorch_model.bin, tokenizer.json) or a Hugging Face id"
            )
        return path
    from huggingface_hub import constants, snapshot_download

    try:
        path = Path(snapshot_download(checkpoint, cache_dir=cache_dir, allow_patterns=HUB_FILES, local_files_only=True))
        if (path / "config.json").is_file():
            return path
    except Exception:  # huggingface_hub raises several kinds for "not in the cache"
        pass
    raise not_fetched("models.dnabert.checkpoint", checkpoint, cache_dir or constants.HF_HUB_CACHE)


def read_config(checkpoint: str, cache_dir: str | None = None) -> dict:
    """The checkpoint's config.json, with "layers" and "dim" as for ESM-2."""
    config = json.loads((resolve(checkpoint, cache_dir) / "config.json").read_text())
    return {**config, "layers": config["num_hidden_layers"], "dim": config["hidden_size"]}


def checkpoint_files(checkpoint: str, cache_dir: str | None = None) -> list[Path]:
    """The files a checkpoint loads from."""
    directory = resolve(checkpoint, cache_dir)
    names = ("config.json", *WEIGHT_FILES, "tokenizer.json")
    return [directory / name for name in names if (directory / name).is_file()]


def _state_dict(directory: Path) -> "dict[str, torch.Tensor]":
    from safetensors.torch import load_file

    safetensors, pickled = (directory / name for name in WEIGHT_FILES)
    if safetensors.is_file():
        return load_file(safetensors)
    if pickled.is_file():
        return load_weights(pickled, "DNABERT-S weights")
    raise InputError(f"{directory}: no weights ({' or '.join(WEIGHT_FILES)})")


def load(
    checkpoint: str,
    cache_dir: str | None = None,
    device: "torch.device | None" = None,
    dtype: "torch.dtype | None" = None,
) -> "tuple[DNABERT, DNABERTTokens]":
    """The model with its weights in `dtype` (None: float32) on `device` (None: the CPU), built in
    place as esm_loading.load builds ESM-2 (DNABERT-S has no safetensors copy)."""
    import torch

    from workflow_lib.models.dnabert import DNABERT

    device, directory = device or torch.device("cpu"), resolve(checkpoint, cache_dir)
    dtype = dtype or torch.float32
    with uninitialised():
        model = DNABERT(read_config(str(directory)))
    state = {k.removeprefix("bert."): v for k, v in _state_dict(directory).items()}
    wanted = model.state_dict().keys()
    missing = [k for k in wanted if k not in state]
    if missing:
        raise InputError(f"{directory}: not a DNABERT-S checkpoint, missing weights {missing[:3]}")
    state = {k: state[k] for k in wanted}  # the pooler and MLM head are not needed
    model.load_state_dict(converted(state, lambda _, t: t.to(device=device, dtype=dtype)), assign=True)
    return model.eval(), DNABERTTokens(directory / "tokenizer.json")


def stored_tokenizer(checkpoint: str, cache_dir: str | None = None) -> tuple[Path, DNABERTTokens, int]:
    """The tokenize job's tokenizer: its file, its encoder and its vocabulary's size."""
    path = resolve(checkpoint, cache_dir) / "tokenizer.json"
    return path, DNABERTTokens(path), read_config(checkpoint, cache_dir)["vocab_size"]


def embedder(
    checkpoint: str,
    cache_dir: str | None,
    layer: int | None,
    device: "torch.device",
    dtype: "torch.dtype",
    fp8=False,
    digests: dict[str, str] | None = None,
) -> "DNABERTEmbedder":
    """The embedder of the last hidden state, as VirNucPro's (the config check refuses a `layer`;
    the embed job asks for no `fp8` of DNABERT-S; `digests` name ESM-2's copy)."""
    from workflow_lib.models.dnabert import DNABERTEmbedder

    model, tokens = load(checkpoint, cache_dir, device, dtype)
    return DNABERTEmbedder(model, tokens, device, dtype)
