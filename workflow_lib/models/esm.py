"""ESM-2's forward over packed rows, on fair-esm's modules and weights: mean-pooled residue
embeddings of a layer.

VirNucPro's protein embedding is the chosen layer's representation of BOS + the whole sequence +
EOS (its batch converter is called without truncation), averaged over the first 1,024 residues
(positions 1..min(L, 1024): BOS and EOS excluded).
"""

import logging

import esm
import torch
import torch.nn.functional as F

from workflow_lib.models import varlen
from workflow_lib.models.checkpoints import check_esm_layer
from workflow_lib.models.tokens import ESMTokens

POOLED_RESIDUES = 1024  # VirNucPro's truncation_seq_length: it limits the mean, not the forward
log = logging.getLogger("workflow")


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (fair-esm's rotate_half form) in the dtype of cos and sin."""
    y = x.to(cos.dtype)
    half = y.shape[-1] // 2
    return (y * cos + torch.cat((-y[..., half:], y[..., :half]), dim=-1) * sin).to(x.dtype)


def attention_input(x, norm_w, norm_b, eps: float, q_w, q_b, k_w, k_b, v_w, v_b, cos, sin, heads: int):
    """A layer's pre-LayerNorm, q, k and v, rotary on q and k: [T, H, dh] each. fair-esm scales q
    by head_dim^-0.5 before rotary; rotary is linear, so the attention kernel's own 1/sqrt(dh)
    scaling is the same (exactly so for power-of-two head sizes). Three GEMMs, not one over a
    fused weight: on an H200 that was 2-3% slower (docs/gpu-check.md)."""
    h = F.layer_norm(x, x.shape[-1:], norm_w, norm_b, eps)
    q, k, v = (F.linear(h, w, b).view(x.shape[0], heads, -1) for w, b in ((q_w, q_b), (k_w, k_b), (v_w, v_b)))
    return _rotate(q, cos, sin), _rotate(k, cos, sin), v


def layer_output(x, attended, out_w, out_b, norm_w, norm_b, eps: float, fc1_w, fc1_b, fc2_w, fc2_b):
    """The attention's projection, then the feed-forward block, each added to the residual stream."""
    x = x + F.linear(attended, out_w, out_b)
    h = F.layer_norm(x, x.shape[-1:], norm_w, norm_b, eps)
    return x + F.linear(F.gelu(F.linear(h, fc1_w, fc1_b)), fc2_w, fc2_b)  # erf GELU, as esm.modules.gelu


def layer_weights(block: torch.nn.Module) -> tuple[tuple, tuple]:
    """The arguments of attention_input and layer_output for one fair-esm layer: plain tensors, so
    that one compiled graph serves every layer."""
    attn, pre, post = block.self_attn, block.self_attn_layer_norm, block.final_layer_norm
    projections = [t for p in (attn.q_proj, attn.k_proj, attn.v_proj) for t in (p.weight, p.bias)]
    return (pre.weight, pre.bias, pre.eps, *projections), (
        *(attn.out_proj.weight, attn.out_proj.bias, post.weight, post.bias, post.eps),
        *(block.fc1.weight, block.fc1.bias, block.fc2.weight, block.fc2.bias),
    )


class ESMEmbedder:
    """Mean-pooled ESM-2 embeddings of packed batches: fair-esm's weights, a varlen forward.

    Per sequence, as fair-esm's padded forward: BOS/EOS, the token-dropout rescale, rotary
    positions from 0, attention within the sequence only; the layers above `layer` and the LM
    and contact heads are skipped. Rotary angles are computed in float32 (fair-esm's half models
    compute them in half: up to 0.25 rad off at position 1,000) and applied in `rotary_dtype`, the
    model's dtype unless given (see docs/gpu-check.md: FP16 equivalence). `compiled`: the layer's
    work around the attention kernel (LayerNorms, rotary, GELU, adds) fused by torch.compile.
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
        rotary_dtype: torch.dtype | None = None,
        name: str = "this ESM-2 model",
        compiled: bool = False,
    ):
        check_esm_layer(name, layer, model.num_layers)
        # fair-esm's own frequencies, 1/10000^(arange(0, dh, 2)/dh) as the checkpoint holds them:
        # the published files store them in float16, and fair-esm uses them so even in fp32.
        self.inv_freq = model.layers[0].self_attn.rot_emb.inv_freq.to(device=device, dtype=torch.float32)
        self.model = model.to(device=device, dtype=dtype)
        self.layers = [layer_weights(block) for block in model.layers[:layer]]
        self.layer, self.device, self.dim = layer, device, model.embed_dim
        self.tokens = ESMTokens.of(alphabet)
        self.heads = model.attention_heads
        self.rotary_dtype = rotary_dtype or dtype
        self.compiled = compiled
        # dynamic: one kernel for every row length; the same code for every layer
        self.attention_input, self.layer_output = (
            (torch.compile(f, dynamic=True) for f in (attention_input, layer_output))
            if compiled
            else (attention_input, layer_output)
        )

    def _layers(self, x: torch.Tensor, cos, sin, layout: varlen.Layout) -> torch.Tensor:
        n, d = x.shape
        for before, after in self.layers:
            q, k, v = self.attention_input(x, *before, cos, sin, self.heads)
            x = self.layer_output(x, varlen.attention(q, k, v, layout).reshape(n, d), *after)
        return x

    def _layers_or_eager(self, x: torch.Tensor, cos, sin, layout: varlen.Layout) -> torch.Tensor:
        """The layers; compiled ones that fail (no C compiler on the node, an unsupported GPU)
        give way to the eager functions for the rest of the job."""
        try:
            return self._layers(x, cos, sin, layout)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # compile errors take many forms
            if not self.compiled:
                raise
            lines = str(error).strip().splitlines() or [type(error).__name__]
            log.warning("ESM-2: the compiled layers failed (%s); eager layers from now on", lines[0])
            self.compiled, self.attention_input, self.layer_output = False, attention_input, layer_output
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
        cos, sin = (
            f(torch.cat((freqs, freqs), dim=-1))[:, None, :].to(self.rotary_dtype) for f in (torch.cos, torch.sin)
        )
        x = self._layers_or_eager(x, cos, sin, layout)
        if self.layer == m.num_layers:
            x = m.emb_layer_norm_after(x)  # the last layer only: intermediate layers are pre-LN
        pos = layout.pos
        residues = (pos > 0) & (pos < layout.lengths[layout.seq] - 1) & (pos <= POOLED_RESIDUES)
        return layout.mean(x, residues)
