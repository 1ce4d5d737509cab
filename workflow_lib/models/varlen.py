"""Attention over packed rows (varlen): each sequence of a row attends only to itself.

One kernel per device, precision and model, chosen by measurement (docs/gpu-check.md):
- CPU: one scaled_dot_product_attention per sequence length, the sequences of that length
  stacked [G, H, L, dh], so that a sequence's embedding does not depend on the batch it lands in:
  no padding reaches a kernel, and each sequence's scores are its own rows of the same computation.
- CUDA in half precision without ALiBi (ESM-2): PyTorch's own `varlen_attn` (torch >= 2.10); one
  that fails on a batch (a GPU it has no kernel for) gives way to the padded path for the job.
- CUDA otherwise: the sequences gathered into a padded [B, H, L, dh] block for
  scaled_dot_product_attention and scattered back; its additive mask is B x 1 x 1 x L without
  ALiBi and B x H x L x L with it, never T x T for the whole row.
"""

import functools
import importlib.util
import logging

import torch
import torch.nn.functional as F

from workflow_lib.cli.errors import first_line

log = logging.getLogger("workflow")


class Layout:
    """Index tensors of one packed batch, on its device, shared by all layers of a forward."""

    def __init__(self, cu_seqlens: torch.Tensor, max_len: int, n_tokens: int):
        device = cu_seqlens.device
        starts = cu_seqlens[:-1].long()
        self.cu_seqlens, self.max_len = cu_seqlens, max_len
        self.lengths = cu_seqlens.diff().long()
        self.n_seqs = len(self.lengths)
        # output_size keeps repeat_interleave from synchronising with the GPU to learn the total
        self.seq = torch.repeat_interleave(torch.arange(self.n_seqs, device=device), self.lengths, output_size=n_tokens)
        self.pos = torch.arange(n_tokens, device=device) - starts[self.seq]  # restarts at 0 in each sequence
        slots = torch.arange(max_len, device=device)
        self.gather = (starts[:, None] + slots[None, :]).clamp(max=n_tokens - 1)  # token of each slot of [B, L]
        self.scatter = self.seq * max_len + self.pos  # slot of each token
        self._masks = {}  # padded_mask's, shared by the layers of a forward

    def mean(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """Per-sequence mean of x [T, d] over the tokens `keep` marks, as float32; summed in float64,
        as a float32 running sum drifts over a thousand tokens."""
        x, counts = x.double(), self.lengths.double()
        if keep is not None:
            x = x * keep[:, None]
            counts = torch.zeros(self.n_seqs, dtype=torch.float64, device=x.device).index_add_(
                0, self.seq, keep.double()
            )
        sums = torch.zeros(self.n_seqs, x.shape[1], dtype=torch.float64, device=x.device).index_add_(0, self.seq, x)
        return (sums / counts.clamp(min=1)[:, None]).float()

    @functools.cached_property
    def by_length(self) -> list[tuple[int, int, int]]:
        """(L, first token, G) for each run of G sequences of length L (a batch is sorted by length)."""
        lengths, counts = torch.unique_consecutive(self.lengths.cpu(), return_counts=True)
        firsts = torch.cat((torch.zeros(1, dtype=torch.long), (lengths * counts).cumsum(0)[:-1]))
        return list(zip(lengths.tolist(), firsts.tolist(), counts.tolist()))


def alibi_bias(slopes: torch.Tensor, length: int, dtype: torch.dtype, keys: int | None = None) -> torch.Tensor:
    """-slope_h * |i - j| for one sequence length: [H, L, keys] (keys >= L; L unless given)."""
    positions = torch.arange(keys or length, device=slopes.device)
    distance = (positions[None, :] - positions[:length, None]).abs()
    return (-slopes[:, None, None] * distance).to(dtype)


def grouped_attention(q, k, v, layout: Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    out = torch.empty_like(q)
    for length, first, g in layout.by_length:
        run = slice(first, first + g * length)
        qs, ks, vs = (t[run].unflatten(0, (g, length)).transpose(1, 2) for t in (q, k, v))  # [G, H, L, dh], views
        # ALiBi broadcast over G: as fast as a bias laid out per sequence, without its copy
        bias = None if slopes is None else alibi_bias(slopes, length, q.dtype).expand(g, -1, -1, -1)
        out[run] = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=bias).transpose(1, 2).flatten(0, 1)
    return out


MASK_ALIGN = 8  # elements: a mask row stride the memory-efficient kernel takes as it is (else it pads a copy per call)


def padded_mask(layout: Layout, slopes: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The padded path's additive mask, made once per batch: padded keys at -inf, plus ALiBi when
    slopes are given. A view of a mask whose rows are MASK_ALIGN apart."""
    key = (slopes is not None, dtype)
    if key not in layout._masks:
        length = layout.max_len
        width = -(-length // MASK_ALIGN) * MASK_ALIGN
        padding = torch.arange(width, device=layout.lengths.device)[None, :] >= layout.lengths[:, None]  # [B, width]
        if slopes is None:
            mask = torch.zeros(padding.shape, dtype=dtype, device=padding.device)[:, None, None, :]
        else:
            mask = alibi_bias(slopes, length, dtype, keys=width)[None]
        layout._masks[key] = mask.masked_fill(padding[:, None, None, :], float("-inf"))[..., :length]
    return layout._masks[key]


def padded_attention(q, k, v, layout: Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    q, k, v = (t[layout.gather].transpose(1, 2) for t in (q, k, v))  # [B, H, L, dh]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=padded_mask(layout, slopes, q.dtype))
    return out.transpose(1, 2).reshape(-1, *out.shape[1::2])[layout.scatter]


def _torch_varlen(q, k, v, layout):
    from torch.nn.attention.varlen import varlen_attn

    cu = layout.cu_seqlens
    return varlen_attn(q, k, v, cu, cu, layout.max_len, layout.max_len)


GROUPED = "sdpa by sequence length"
VARLEN = "torch varlen_attn"
PADDED = "padded sdpa"
KERNELS = {GROUPED: grouped_attention, PADDED: padded_attention}
# found, not imported: importing torch.nn.attention.varlen pulls in torch._dynamo (seconds)
_HAS_VARLEN = importlib.util.find_spec("torch.nn.attention.varlen") is not None
_varlen_failed = False  # in this process: the padded path from then on


def kernel_name(device: torch.device, dtype: torch.dtype, alibi: bool) -> str:
    if device.type != "cuda":
        return GROUPED
    if dtype in (torch.float16, torch.bfloat16) and not alibi and _HAS_VARLEN and not _varlen_failed:
        return VARLEN
    return PADDED


def attention(q, k, v, layout: Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    """Block-diagonal attention of packed q, k, v [T, H, dh] (scale 1/sqrt(dh)), ALiBi when slopes
    are given. Running out of memory is the caller's to handle."""
    global _varlen_failed
    name = kernel_name(q.device, q.dtype, slopes is not None)
    if name == VARLEN:
        try:
            return _torch_varlen(q, k, v, layout)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # a GPU or build without its kernel fails in many ways
            log.warning("attention: %s failed (%s); the padded path is used from now on", VARLEN, first_line(error))
            _varlen_failed, name = True, PADDED
    return KERNELS[name](q, k, v, layout, slopes)
