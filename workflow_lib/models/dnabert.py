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


def _layer(d: int, intermediate: int, eps: float) -> nn.ModuleDict:
    """One encoder layer's modules, named as the checkpoint's keys."""
    attention = {
        "self": nn.ModuleDict({"Wqkv": nn.Linear(d, 3 * d)}),
        "output": nn.ModuleDict({"dense": nn.Linear(d, d), "LayerNorm": nn.LayerNorm(d, eps=eps)}),
    }
    mlp = {
        "gated_layers": nn.Linear(d, 2 * intermediate, bias=False),
        "wo": nn.Linear(intermediate, d),
        "layernorm": nn.LayerNorm(d, eps=eps),
    }
    return nn.ModuleDict({"attention": nn.ModuleDict(attention), "mlp": nn.ModuleDict(mlp)})


class DNABERT(nn.Module):
    """The encoder of DNABERT-S (no pooler, no MLM head: VirNucPro uses the last hidden state)."""

    def __init__(self, cfg: dict):
        super().__init__()
        d, eps = cfg["hidden_size"], cfg.get("layer_norm_eps", 1e-12)
        self.embeddings = nn.ModuleDict(
            {
                "word_embeddings": nn.Embedding(cfg["vocab_size"], d, padding_idx=cfg.get("pad_token_id", 0)),
                "token_type_embeddings": nn.Embedding(cfg.get("type_vocab_size", 2), d),
                "LayerNorm": nn.LayerNorm(d, eps=eps),
            }
        )
        layers = (_layer(d, cfg["intermediate_size"], eps) for _ in range(cfg["num_hidden_layers"]))
        self.encoder = nn.ModuleDict({"layer": nn.ModuleList(layers)})
        self.heads = cfg["num_attention_heads"]
        # not a buffer: model.half() would round slopes such as 2^-0.5
        self.slopes = torch.tensor(alibi_slopes(self.heads), dtype=torch.float32)
        self.dim = d

    def forward(self, ids: torch.Tensor, layout: varlen.Layout) -> torch.Tensor:
        """Last hidden state [T, d] of a packed row of token IDs."""
        if self.slopes.device != ids.device:
            self.slopes = self.slopes.to(ids.device)
        e = self.embeddings
        x = e.LayerNorm(e.word_embeddings(ids) + e.token_type_embeddings.weight[0])
        n, d = x.shape
        for layer in self.encoder.layer:
            attention, mlp = layer.attention, layer.mlp
            q, k, v = attention.self.Wqkv(x).view(n, 3, self.heads, d // self.heads).unbind(1)
            # softmax(qk^T/sqrt(dh) + ALiBi): ALiBi depends only on |i - j|, exact within each sequence
            attended = varlen.attention(q, k, v, layout, self.slopes).reshape(n, d)
            x = attention.output.LayerNorm(attention.output.dense(attended) + x)
            gated, linear = mlp.gated_layers(x).chunk(2, dim=-1)
            x = mlp.layernorm(mlp.wo(F.gelu(gated) * linear) + x)  # erf GELU
        return x


class DNABERTEmbedder:
    """Mean-pooled DNABERT-S embeddings of packed batches."""

    layer = -1  # the last hidden state
    pooling = "mean over all tokens ([CLS] and [SEP] included)"
    alibi = True

    def __init__(self, model: DNABERT, tokens: DNABERTTokens, device: torch.device, dtype: torch.dtype = torch.float32):
        self.model = model.to(device=device, dtype=dtype)
        self.tokens, self.dim = tokens, model.dim

    @torch.inference_mode()
    def __call__(self, tokens: torch.Tensor, layout: varlen.Layout) -> torch.Tensor:
        """Pooled embeddings [B, dim] of a packed row of tokens [T] laid out by `layout`."""
        return layout.mean(self.model(tokens, layout))
