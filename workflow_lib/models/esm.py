"""ESM-2's forward over packed rows, on fair-esm's modules and weights: mean-pooled residue
embeddings of a layer.

VirNucPro's protein embedding is the chosen layer's representation of BOS + the whole sequence +
EOS (its batch converter is called without truncation), averaged over the first 1,024 residues
(positions 1..min(L, 1024): BOS and EOS excluded).
"""

import logging
from typing import NamedTuple

import esm
import torch
import torch.nn.functional as F

from workflow_lib.cli.errors import InputError, first_line
from workflow_lib.models import varlen
from workflow_lib.models.tokens import ESMTokens

POOLED_RESIDUES = 1024  # VirNucPro's truncation_seq_length: it limits the mean, not the forward
log = logging.getLogger("workflow")


# The layer's levers (docs/gpu-check.md), on by name: the exact ones on by default; `ffn_chunks`
# (smaller GEMMs) and `gelu_epilogue` (GELU's tanh form on CUDA) only when asked.
LEVERS = frozenset({"residual_norm", "rotary_in_place", "ffn_chunks", "gelu_epilogue"})
DEFAULT_LEVERS = frozenset({"residual_norm", "rotary_in_place"})
FFN_CHUNK = 2048  # tokens: a chunk's 4d-wide activation at the 3B shape fits a Hopper GPU's L2 cache
E4M3_MAX = 448.0  # float8_e4m3fn's largest value


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, in_place: bool) -> torch.Tensor:
    """Rotary embedding, fair-esm's rotate_half form; `in_place`: written into x itself, without
    the concatenated copy."""
    half = x.shape[-1] // 2
    if not in_place:
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
    x1, x2, c, s = x[..., :half], x[..., half:], cos[..., :half], sin[..., :half]
    x1_sin = x1 * s
    x1.mul_(c).sub_(x2 * s)
    x2.mul_(c).add_(x1_sin)
    return x


class FP8Weight(NamedTuple):
    """A linear's weight [out, in] in float8 e4m3 and its float32 scales [1, out]. `fast_accum`
    (unmeasured, off unless asked): the GEMM accumulates in the tensor cores' own precision."""

    weight: torch.Tensor
    scale: torch.Tensor
    fast_accum: bool = False

    @classmethod
    def of(cls, weight: torch.Tensor, fast_accum: bool = False) -> "FP8Weight":
        quantised, scale = quantise(weight)
        return cls(quantised, scale.reshape(1, -1), fast_accum)


def quantise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [n, k] in float8 e4m3 and one float32 scale per row [n, 1]: each row's largest magnitude
    becomes 448, so x is about quantised * scale."""
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12) / E4M3_MAX
    return (x.float() / scale).to(torch.float8_e4m3fn), scale


def linear(x: torch.Tensor, w, b: torch.Tensor) -> torch.Tensor:
    """F.linear, or for an FP8Weight an FP8 GEMM with x quantised per token, in x's dtype."""
    if isinstance(w, FP8Weight):
        x8, scale = quantise(x)
        return torch._scaled_mm(x8, w.weight.t(), scale, w.scale, out_dtype=x.dtype, use_fast_accum=w.fast_accum) + b
    return F.linear(x, w, b)


def check_fp8(device: torch.device, dtype: torch.dtype) -> None:
    """One FP8 GEMM as the forward runs it, on `device` against float32, before the model loads: a
    GPU without FP8 tensor cores, or a torch without the kernel for it, stops the job here."""
    generator = torch.Generator(device).manual_seed(0)
    x, w = (torch.randn(n, 64, device=device, generator=generator) for n in (32, 48))
    try:
        got = linear(x.to(dtype), FP8Weight.of(w.to(dtype)), torch.zeros(48, device=device, dtype=dtype)).float()
        error = None if F.cosine_similarity(got.flatten(), (x @ w.t()).flatten(), dim=0) > 0.99 else "wrong results"
    except (RuntimeError, ValueError) as failure:  # newer builds refuse unsupported scalings with ValueError
        error = first_line(failure)
    if error:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
        raise InputError(f"embedding.precision fp8: {name} cannot run FP8 GEMMs ({error}); set it to fp16")


def attention_input(
    x, norm_w, norm_b, eps: float, q_w, q_b, k_w, k_b, v_w, v_b, cos, sin, heads: int, pending=None, in_place=False
):
    """x, and its pre-LayerNorm's q, k and v [T, H, dh], rotary on q and k. fair-esm scales q by
    head_dim^-0.5 before rotary; rotary is linear, so the attention kernel's own scaling is the
    same. Three GEMMs: one over a fused weight measured slower (docs/gpu-check.md). `pending`
    (lever residual_norm): the last layer's feed-forward output, added here, in the LayerNorm's
    kernel when compiled. `in_place`: lever rotary_in_place."""
    if pending is not None:
        x = x + pending
    h = F.layer_norm(x, x.shape[-1:], norm_w, norm_b, eps)
    q, k, v = (F.linear(h, w, b).view(x.shape[0], heads, -1) for w, b in ((q_w, q_b), (k_w, k_b), (v_w, v_b)))
    return x, _rotate(q, cos, sin, in_place), _rotate(k, cos, sin, in_place), v


def attention_output(x, attended, out_w, out_b, norm_w, norm_b, eps: float):
    """The residual stream after the attention's projection, and its LayerNorm for the feed-forward."""
    x = x + F.linear(attended, out_w, out_b)
    return x, F.layer_norm(x, x.shape[-1:], norm_w, norm_b, eps)


def feed_forward(h, fc1_w, fc1_b, fc2_w, fc2_b, gelu_epilogue=False):
    """`gelu_epilogue` (lever): bias and GELU in cuBLASLt's epilogue of the first GEMM, which
    computes GELU's tanh form on CUDA (ESM-2's and the CPU's are erf)."""
    if gelu_epilogue and not isinstance(fc1_w, FP8Weight):
        a = torch._addmm_activation(fc1_b, h, fc1_w.t(), use_gelu=True)
    else:
        a = F.gelu(linear(h, fc1_w, fc1_b))  # erf GELU, as esm.modules.gelu
    return linear(a, fc2_w, fc2_b)


def layer_output(x, attended, out_w, out_b, norm_w, norm_b, eps: float, fc1_w, fc1_b, fc2_w, fc2_b, gelu_epilogue=False,
                 defer=False):  # fmt: skip
    """(x, None) after the attention's projection and the feed-forward; with `defer` (lever
    residual_norm), (x, the feed-forward's output) for the next layer's attention_input to add."""
    x, h = attention_output(x, attended, out_w, out_b, norm_w, norm_b, eps)
    y = feed_forward(h, fc1_w, fc1_b, fc2_w, fc2_b, gelu_epilogue)
    return (x, y) if defer else (x + y, None)


def layer_weights(block: torch.nn.Module, fp8: bool = False, fast_accum: bool = False) -> tuple[tuple, tuple]:
    """The arguments of attention_input and layer_output for one fair-esm layer: plain tensors, so
    that one compiled graph serves every layer; `fp8`: the feed-forward's weights as FP8Weight, their
    half-precision originals dropped from the module (else the FP8 model would hold more, not less)."""
    attn, pre, post = block.self_attn, block.self_attn_layer_norm, block.final_layer_norm
    projections = [t for p in (attn.q_proj, attn.k_proj, attn.v_proj) for t in (p.weight, p.bias)]
    fc1, fc2 = (FP8Weight.of(fc.weight, fast_accum) if fp8 else fc.weight for fc in (block.fc1, block.fc2))
    if fp8:
        block.fc1.weight = block.fc2.weight = None
    return (pre.weight, pre.bias, pre.eps, *projections), (
        *(attn.out_proj.weight, attn.out_proj.bias, post.weight, post.bias, post.eps),
        *(fc1, block.fc1.bias, fc2, block.fc2.bias),
    )


LAYER_FUNCTIONS = (attention_input, attention_output, feed_forward, layer_output)


class ESMEmbedder:
    """Mean-pooled ESM-2 embeddings of packed batches: fair-esm's weights, a varlen forward.

    Per sequence, as fair-esm's padded forward: BOS/EOS, the token-dropout rescale, rotary
    positions from 0, attention within the sequence only; the layers above `layer` and the heads
    are skipped. Rotary angles are computed in float32 (fair-esm's half models compute them in half,
    far off at long positions), applied in the model's dtype. `compiled`: the layer's work around
    the attention kernel fused by torch.compile. `levers`: names from LEVERS. `fp8`: the
    feed-forward GEMMs of every layer but the first and the last in FP8; `fast_accum`: FP8Weight's.
    """

    pooling = "mean over the first 1024 residues (BOS and EOS excluded)"
    alibi = False

    def __init__(
        self,
        model: esm.ESM2,
        alphabet: esm.Alphabet,
        layer: int,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
        compiled: bool = False,
        levers: frozenset[str] = DEFAULT_LEVERS,
        fp8: bool = False,
        fast_accum: bool = False,
    ):
        # fair-esm's own frequencies, 1/10000^(arange(0, dh, 2)/dh) as the checkpoint holds them:
        # the published files store them in float16, and fair-esm uses them so even in fp32.
        self.inv_freq = model.layers[0].self_attn.rot_emb.inv_freq.to(device=device, dtype=torch.float32)
        self.model = model.to(device=device, dtype=dtype)
        self.layers = [
            layer_weights(block, fp8 and 0 < i < layer - 1, fast_accum) for i, block in enumerate(model.layers[:layer])
        ]
        if fp8 and device.type == "cuda":
            torch.cuda.empty_cache()  # the dropped half-precision weights: not held for a GPU's other jobs
        self.layer, self.dim = layer, model.embed_dim
        self.tokens, self.heads, self.dtype = ESMTokens.of(alphabet), model.attention_heads, dtype
        self.levers, self.compiled = frozenset(levers), compiled
        # dynamic: one kernel for every row length; the same code for every layer
        self.f = {f.__name__: torch.compile(f, dynamic=True) if compiled else f for f in LAYER_FUNCTIONS}

    def _layers(self, x: torch.Tensor, cos, sin, layout: varlen.Layout) -> torch.Tensor:
        n, d = x.shape
        f, levers, pending = self.f, self.levers, None
        gelu = "gelu_epilogue" in levers
        for before, after in self.layers:
            x, q, k, v = f["attention_input"](x, *before, cos, sin, self.heads, pending, "rotary_in_place" in levers)
            attended = varlen.attention(q, k, v, layout).reshape(n, d)
            if "ffn_chunks" in levers:  # chunks of tokens, so that the 4d-wide activation stays in L2
                x, h = f["attention_output"](x, attended, *after[:5])
                for start in range(0, n, FFN_CHUNK):
                    x[start : start + FFN_CHUNK] += f["feed_forward"](h[start : start + FFN_CHUNK], *after[5:], gelu)
            else:
                x, pending = f["layer_output"](x, attended, *after, gelu, "residual_norm" in levers)
        return x if pending is None else x + pending

    def _layers_or_eager(self, x: torch.Tensor, cos, sin, layout: varlen.Layout) -> torch.Tensor:
        """The layers; compiled ones that fail give way to the eager functions for the rest of the job."""
        try:
            return self._layers(x, cos, sin, layout)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # compile errors take many forms
            if not self.compiled:
                raise
            log.warning("ESM-2: the compiled layers failed (%s); eager layers from now on", first_line(error))
            self.compiled, self.f = False, {f.__name__: f for f in LAYER_FUNCTIONS}
            return self._layers(x, cos, sin, layout)

    @torch.inference_mode()
    def __call__(self, tokens: torch.Tensor, layout: varlen.Layout) -> torch.Tensor:
        """Pooled embeddings [B, dim] of a packed row of tokens [T] laid out by `layout`."""
        m = self.model
        x = m.embed_scale * m.embed_tokens(tokens)
        if m.token_dropout:
            masked = tokens == m.mask_idx
            x = x.masked_fill(masked[:, None], 0.0)
            ratio = torch.zeros(layout.n_seqs, device=x.device).index_add_(0, layout.seq, masked.float())
            ratio = (ratio / layout.lengths).to(x.dtype)  # <mask> share of each sequence, BOS and EOS counted
            x = x * (1 - 0.15 * 0.8) / (1 - ratio)[layout.seq, None]  # the constant 0.88 without <mask>
        freqs = layout.pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = (f(torch.cat((freqs, freqs), dim=-1))[:, None, :].to(self.dtype) for f in (torch.cos, torch.sin))
        x = self._layers_or_eager(x, cos, sin, layout)
        if self.layer == m.num_layers:
            x = m.emb_layer_norm_after(x)  # the last layer only: intermediate layers are pre-LN
        pos = layout.pos
        residues = (pos > 0) & (pos < layout.lengths[layout.seq] - 1) & (pos <= POOLED_RESIDUES)
        return layout.mean(x, residues)
