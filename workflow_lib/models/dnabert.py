"""DNABERT-S in native PyTorch: the DNABERT-2 (MosaicBERT) architecture and its packed forward
(the published weights are loaded by dnabert_loading).

The public model code (MAGICS-LAB/DNABERT_S) needs `trust_remote_code` and no longer loads with
current transformers; this rebuilds the network from its state-dict keys: no position embeddings,
ALiBi bias -slope_h * |i - j|, post-LN layers, a GLU feed-forward (GELU(a) * b).
VirNucPro's nucleotide embedding is the mean of the last hidden state over ALL tokens,
[CLS] and [SEP] included.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from workflow_lib.models import varlen
from workflow_lib.models.tokens import DNABERTTokens


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
