"""Attention over packed rows (varlen): each sequence of a row attends only to itself.

On CUDA in half precision a fused variable-length kernel runs: flash-attn's when it is installed
(it also applies ALiBi slopes), else PyTorch's own `varlen_attn` where this torch has one. Each is
checked once against the padded path before use. Everywhere else (CPU, fp32, ALiBi without
flash-attn) the sequences are gathered into a padded [B, H, L, dh] block for
scaled_dot_product_attention and scattered back: the linear layers still see no padding, and an
ALiBi bias is H x L x L for the longest sequence L of the batch, never for the whole row.
"""

import importlib
import logging

import torch
import torch.nn.functional as F

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
        j = torch.arange(max_len, device=device)
        self.valid = j[None, :] < self.lengths[:, None]  # [B, L] slots of the padded view holding a token
        self.gather = (starts[:, None] + j[None, :]).clamp(max=n_tokens - 1)  # token of each slot
        self.scatter = self.seq * max_len + self.pos  # slot of each token

    def mean(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        """Per-sequence mean of x [T, d] over its tokens (those where `keep` is True), as float32.

        Summed in float64: a float32 running sum drifts by ~1e-5 over a thousand tokens."""
        x, counts = x.double(), self.lengths.double()
        if keep is not None:
            x = x * keep[:, None]
            counts = torch.zeros(self.n_seqs, dtype=torch.float64, device=x.device).index_add_(
                0, self.seq, keep.double()
            )
        sums = torch.zeros(self.n_seqs, x.shape[1], dtype=torch.float64, device=x.device).index_add_(0, self.seq, x)
        return (sums / counts.clamp(min=1)[:, None]).float()


def alibi_bias(slopes: torch.Tensor, length: int, dtype: torch.dtype) -> torch.Tensor:
    """-slope_h * |i - j| for one sequence length: [H, L, L]."""
    positions = torch.arange(length, device=slopes.device)
    distance = (positions[None, :] - positions[:, None]).abs()
    return (-slopes[:, None, None] * distance).to(dtype)


def padded_attention(q, k, v, layout: Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(dh) + bias) v per sequence, through a padded block; q, k, v: [T, H, dh]."""
    q, k, v = (t[layout.gather].transpose(1, 2) for t in (q, k, v))  # [B, H, L, dh]
    keys = layout.valid[:, None, None, :]  # padded keys are masked out; padded queries are dropped below
    if slopes is None:
        mask = keys
    else:
        bias = alibi_bias(slopes, layout.max_len, q.dtype)[None]
        mask = bias.masked_fill(~keys, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out.transpose(1, 2).reshape(-1, *out.shape[1::2])[layout.scatter]


def _flash(q, k, v, layout, slopes):
    from flash_attn import flash_attn_varlen_func

    cu = layout.cu_seqlens
    return flash_attn_varlen_func(q, k, v, cu, cu, layout.max_len, layout.max_len, alibi_slopes=slopes)


def _torch_varlen(q, k, v, layout, slopes):
    from torch.nn.attention.varlen import varlen_attn

    cu = layout.cu_seqlens
    return varlen_attn(q, k, v, cu, cu, layout.max_len, layout.max_len)


def _importable(module: str) -> bool:
    # imported only for CUDA runs: torch.nn.attention.varlen pulls in torch._dynamo (seconds)
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


_chosen: dict[tuple, tuple[str, object]] = {}
PADDED = ("padded sdpa", None)


def _fused_kernel(q: torch.Tensor, alibi: bool) -> tuple[str, object]:
    """The first fused kernel that runs and agrees with the padded path on this device, or PADDED."""
    key = (str(q.device), q.dtype, alibi)
    if key not in _chosen:
        candidates = [("flash-attn varlen", _flash)] if _importable("flash_attn") else []
        if not alibi and _importable("torch.nn.attention.varlen"):  # torch >= 2.10
            candidates.append(("torch varlen_attn", _torch_varlen))
        _chosen[key] = PADDED
        layout = Layout(torch.tensor([0, 1, 38, 200], dtype=torch.int32, device=q.device), 162, 200)
        generator = torch.Generator(q.device).manual_seed(0)
        t = torch.randn(3, 200, *q.shape[1:], generator=generator, device=q.device).to(q.dtype)
        slopes = torch.linspace(0.5, 0.01, q.shape[1], device=q.device) if alibi else None
        expected = padded_attention(*t, layout, slopes).float()
        for name, kernel in candidates:
            try:
                got = kernel(*t, layout, slopes).float()
            except (RuntimeError, TypeError, ValueError) as error:
                log.warning("attention: %s does not run here (%s)", name, str(error).splitlines()[0])
                continue
            if F.cosine_similarity(got, expected, dim=-1).min() > 0.999:
                _chosen[key] = (name, kernel)
                break
            log.warning("attention: %s disagrees with the padded path; not used", name)
    return _chosen[key]


def kernel_name(device: torch.device, dtype: torch.dtype, alibi: bool) -> str:
    """The attention kernel that forwards on this device and dtype have used."""
    return _chosen.get((str(device), dtype, alibi), PADDED)[0]


def attention(q, k, v, layout: Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    """Block-diagonal attention of packed q, k, v [T, H, dh] (scale 1/sqrt(dh)), ALiBi when slopes are given."""
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        _, kernel = _fused_kernel(q, slopes is not None)
        if kernel is not None:
            return kernel(q, k, v, layout, slopes)
    return padded_attention(q, k, v, layout, slopes)
