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
from tokenizers import Tokenizer
from torch import nn

from ..errors import InputError
from .checkpoints import is_local

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

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.attention.self.Wqkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # softmax(qk^T/sqrt(dh) + bias)
        attended = attended.transpose(1, 2).reshape(b, t, d)
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
        self.register_buffer("slopes", torch.tensor(alibi_slopes(cfg["num_attention_heads"])), persistent=False)
        self.dim = cfg["hidden_size"]

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Last hidden state of padded token batches; `mask` is True on real tokens."""
        x = self.embeddings(ids)
        positions = torch.arange(ids.shape[1], device=ids.device)
        distance = (positions[None, :] - positions[:, None]).abs().to(x.dtype)
        bias = -self.slopes.to(x.dtype)[:, None, None] * distance  # heads x T x T
        bias = bias.masked_fill(~mask[:, None, None, :], float("-inf"))  # padded keys
        for layer in self.encoder.layer:
            x = layer(x, bias)
        return x


def resolve(checkpoint: str, cache_dir: str | None = None) -> Path:
    """The local directory of a DNABERT-S checkpoint: the path itself, or the Hugging Face
    snapshot of an id (downloaded into cache_dir, or found there when HF_HUB_OFFLINE=1)."""
    if is_local(checkpoint):
        path = Path(checkpoint)
        if not (path / "config.json").is_file():
            raise InputError(
                f"{path}: no config.json; models.dnabert.checkpoint must be a DNABERT-S directory "
                "(config.json, model.safetensors or pytorch_model.bin, tokenizer.json) or a Hugging Face id"
            )
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(checkpoint, cache_dir=cache_dir, allow_patterns=HUB_FILES))


def read_config(directory: Path) -> dict:
    return json.loads((directory / "config.json").read_text())


def _state_dict(directory: Path) -> dict[str, torch.Tensor]:
    for name in WEIGHT_FILES:
        path = directory / name
        if path.is_file():
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file

                return load_file(path)
            return torch.load(path, map_location="cpu", weights_only=True)
    raise InputError(f"{directory}: no weights ({' or '.join(WEIGHT_FILES)})")


def load(checkpoint: str, cache_dir: str | None = None) -> tuple[DNABERT, Tokenizer]:
    directory = resolve(checkpoint, cache_dir)
    model = DNABERT(read_config(directory))
    state = {k.removeprefix("bert."): v for k, v in _state_dict(directory).items()}
    wanted = model.state_dict().keys()
    missing = [k for k in wanted if k not in state]
    if missing:
        raise InputError(f"{directory}: not a DNABERT-S checkpoint, missing weights {missing[:3]}")
    model.load_state_dict({k: state[k] for k in wanted})  # the pooler and MLM head are not needed
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_truncation()  # VirNucPro tokenizes whole sequences
    tokenizer.no_padding()
    return model.eval(), tokenizer


class DNABERTEmbedder:
    """Mean-pooled DNABERT-S embeddings of nucleotide sequences, in padded batches."""

    layer = -1  # the last hidden state
    pooling = "mean over all tokens ([CLS] and [SEP] included)"

    def __init__(self, model: DNABERT, tokenizer: Tokenizer, device: torch.device, dtype: torch.dtype = torch.float32):
        self.model = model.to(device=device, dtype=dtype)
        self.tokenizer, self.device, self.dim = tokenizer, device, model.dim
        self.pad = tokenizer.token_to_id("[PAD]") or 0

    def encode(self, sequences: list[str]) -> list[list[int]]:
        """Token IDs, [CLS] ... [SEP], of whole sequences."""
        return [e.ids for e in self.tokenizer.encode_batch(sequences, add_special_tokens=True)]

    n_tokens = staticmethod(len)

    @torch.inference_mode()
    def __call__(self, token_ids: list[list[int]]) -> torch.Tensor:
        lengths = torch.tensor([len(t) for t in token_ids])
        ids = torch.full((len(token_ids), int(lengths.max())), self.pad, dtype=torch.long)
        for row, t in enumerate(token_ids):
            ids[row, : len(t)] = torch.tensor(t)
        mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
        ids, mask = ids.to(self.device, non_blocking=True), mask.to(self.device, non_blocking=True)
        hidden = self.model(ids, mask).float()
        return (hidden * mask[..., None]).sum(1) / lengths.to(self.device)[:, None]
