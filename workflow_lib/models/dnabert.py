"""DNABERT-S in native PyTorch: the DNABERT-2 (MosaicBERT) architecture, loading the published weights.

The public model code (MAGICS-LAB/DNABERT_S, bert_layers.py) needs `trust_remote_code` and no
longer loads with current transformers; this module rebuilds the same network from its
state-dict keys: no position embeddings, ALiBi attention bias -slope_h * |i - j|, post-LN
layers, a GLU feed-forward (gated_layers d -> 2I without bias, GELU(a) * b, then wo I -> d).
VirNucPro's nucleotide embedding is the mean of the last hidden state over ALL tokens,
[CLS] and [SEP] included.
"""

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from workflow_lib.cli.errors import InputError
from workflow_lib.models import varlen
from workflow_lib.models.checkpoints import converted, is_local, load_weights, not_fetched, uninitialised
from workflow_lib.models.tokens import DNABERTTokens

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
HUB_FILES = ["config.json", "tokenizer.json", "tokenizer_config.json", *WEIGHT_FILES]


def alibi_slopes(heads: int) -> list[float]:
    """ALiBi head slopes; for a head count that is no power of two, the slopes of the next
    power of two fill in every other one (2^-0.5, 2^-1.5, ... for 12 heads)."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(heads).is_integer():
        return power_of_two(heads)
    closest = 2 ** math.floor(math.log2(heads))
    return power_of_two(closest) + alibi_slopes(2 * closest)[0::2][: heads - closest]


class _Embeddings(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            cfg["vocab_size"], cfg["hidden_size"], padding_idx=cfg.get("pad_token_id", 0)
        )
        self.token_type_embeddings = nn.Embedding(cfg.get("type_vocab_size", 2), cfg["hidden_size"])
        self.LayerNorm = nn.LayerNorm(cfg["hidden_size"], eps=cfg.get("layer_norm_eps", 1e-12))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.word_embeddings(ids) + self.token_type_embeddings.weight[0])


class _SelfAttention(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.Wqkv = nn.Linear(d, 3 * d)


class _Output(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.dense = nn.Linear(d, d)
        self.LayerNorm = nn.LayerNorm(d, eps=eps)


class _Attention(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.self = _SelfAttention(d)
        self.output = _Output(d, eps)


class _GatedMLP(nn.Module):
    def __init__(self, d: int, intermediate: int, eps: float):
        super().__init__()
        self.gated_layers = nn.Linear(d, 2 * intermediate, bias=False)
        self.wo = nn.Linear(intermediate, d)
        self.layernorm = nn.LayerNorm(d, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gated, linear = self.gated_layers(x).chunk(2, dim=-1)
        return self.layernorm(self.wo(F.gelu(gated) * linear) + x)  # erf GELU, post-LN


class _Layer(nn.Module):
    def __init__(self, d: int, heads: int, intermediate: int, eps: float):
        super().__init__()
        self.heads = heads
        self.attention = _Attention(d, eps)
        self.mlp = _GatedMLP(d, intermediate, eps)

    def forward(self, x: torch.Tensor, layout: varlen.Layout, slopes: torch.Tensor) -> torch.Tensor:
        n, d = x.shape
        q, k, v = self.attention.self.Wqkv(x).view(n, 3, self.heads, d // self.heads).unbind(1)
        attended = varlen.attention(q, k, v, layout, slopes).reshape(n, d)  # softmax(qk^T/sqrt(dh) + ALiBi)
        out = self.attention.output
        return self.mlp(out.LayerNorm(out.dense(attended) + x))


class _Encoder(nn.Module):
    def __init__(self, cfg: dict):
        super().__init__()
        d, eps = cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-12)
        self.layer = nn.ModuleList(
            _Layer(d, cfg["num_attention_heads"], cfg["intermediate_size"], eps)
            for _ in range(cfg["num_hidden_layers"])
        )


class DNABERT(nn.Module):
    """The encoder of DNABERT-S (no pooler, no MLM head: VirNucPro uses the last hidden state)."""

    def __init__(self, cfg: dict):
        super().__init__()
        self.embeddings = _Embeddings(cfg)
        self.encoder = _Encoder(cfg)
        # not a buffer: model.half() would round slopes such as 2^-0.5
        self.slopes = torch.tensor(alibi_slopes(cfg["num_attention_heads"]), dtype=torch.float32)
        self.dim = cfg["hidden_size"]

    def forward(self, ids: torch.Tensor, layout: varlen.Layout) -> torch.Tensor:
        """Last hidden state [T, d] of a packed row of token IDs."""
        if self.slopes.device != ids.device:
            self.slopes = self.slopes.to(ids.device)
        x = self.embeddings(ids)
        for layer in self.encoder.layer:
            x = layer(x, layout, self.slopes)  # ALiBi depends only on |i - j|: exact within each sequence
        return x


def resolve(checkpoint: str, cache_dir: str | None = None) -> Path:
    """The local directory of a DNABERT-S checkpoint: the path itself, or the Hugging Face snapshot
    of an id that fetch_models downloaded into cache_dir (found there with no network)."""
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
    config = _hf_config(resolve(checkpoint, cache_dir))
    return {**config, "layers": config["num_hidden_layers"], "dim": config["hidden_size"]}


def _hf_config(directory: Path) -> dict:
    return json.loads((directory / "config.json").read_text())


def checkpoint_files(checkpoint: str, cache_dir: str | None = None) -> list[Path]:
    """The files a checkpoint loads from."""
    directory = resolve(checkpoint, cache_dir)
    names = ("config.json", *WEIGHT_FILES, "tokenizer.json")
    return [directory / name for name in names if (directory / name).is_file()]


def _state_dict(directory: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        path = directory / name
        if path.is_file():
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file

                return load_file(path)
            return load_weights(path, "DNABERT-S weights")
    raise InputError(f"{directory}: no weights ({' or '.join(WEIGHT_FILES)})")


def load(
    checkpoint: str,
    cache_dir: str | None = None,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[DNABERT, DNABERTTokens]:
    """The model with its weights in `dtype` on `device`, built in place as esm.load builds ESM-2
    (parameters uninitialised, each checkpoint tensor converted once)."""
    device, directory = device or torch.device("cpu"), resolve(checkpoint, cache_dir)
    config = _hf_config(directory)
    with uninitialised():
        model = DNABERT(config)
    state = {k.removeprefix("bert."): v for k, v in _state_dict(directory).items()}
    wanted = model.state_dict().keys()
    missing = [k for k in wanted if k not in state]
    if missing:
        raise InputError(f"{directory}: not a DNABERT-S checkpoint, missing weights {missing[:3]}")
    state = {k: state[k] for k in wanted}  # the pooler and MLM head are not needed
    model.load_state_dict(converted(state, lambda _, t: t.to(device=device, dtype=dtype)), assign=True)
    return model.eval(), DNABERTTokens(directory / "tokenizer.json")


def embedder(
    checkpoint: str, cache_dir: str | None, layer: int | None, device: torch.device, dtype: torch.dtype
) -> "DNABERTEmbedder":
    """VirNucPro embeds with the last hidden state: `layer` must be None."""
    if layer is not None:
        raise ValueError("DNABERT-S embeds with its last hidden state: no layer is chosen")
    model, tokens = load(checkpoint, cache_dir, device, dtype)
    return DNABERTEmbedder(model, tokens, device, dtype)


class DNABERTEmbedder:
    """Mean-pooled DNABERT-S embeddings of packed batches."""

    layer = -1  # the last hidden state
    pooling = "mean over all tokens ([CLS] and [SEP] included)"
    alibi = True

    def __init__(self, model: DNABERT, tokens: DNABERTTokens, device: torch.device, dtype: torch.dtype = torch.float32):
        self.model = model.to(device=device, dtype=dtype)
        self.tokens, self.device, self.dim = tokens, device, model.dim

    @torch.inference_mode()
    def __call__(self, tokens: torch.Tensor, layout: varlen.Layout) -> torch.Tensor:
        """Pooled embeddings [B, dim] of a packed row of tokens [T] laid out by `layout`."""
        return layout.mean(self.model(tokens, layout))
