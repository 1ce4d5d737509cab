"""Attention over packed rows (varlen): each sequence of a row attends only to itself.

Kernels, by device and precision:
- CPU: one scaled_dot_product_attention per sequence length, the sequences of that length
  stacked [G, H, L, dh] (frames of one chunk length mostly share theirs), so that a sequence's
  embedding does not depend on the batch it lands in: no padding reaches a kernel, and each
  sequence's scores are its own rows of the same computation.
- CUDA in half precision: the first kernel that passes a check against a float32 per-sequence
  reference on this device: flash-attn's varlen kernel when it is installed (it also applies
  ALiBi slopes); then without ALiBi (ESM-2) PyTorch's own `varlen_attn` (torch >= 2.10), with
  ALiBi (DNABERT-S) the padded path below, which needs no compile; then FlexAttention with a
  document mask over the packed row and ALiBi as a score_mod (neither mask nor bias is ever
  materialised), compiled at the job's first batch.
- Otherwise (CUDA in fp32, or no fused kernel passes): the sequences are gathered into a padded
  [B, H, L, dh] block for scaled_dot_product_attention and scattered back, L the longest
  sequence of the batch. Its additive mask is B x 1 x 1 x L without ALiBi and B x H x L x L
  with it; never T x T for the whole row.
"""

import functools
import importlib
import logging
from itertools import pairwise

import torch
import torch.nn.functional as F

log = logging.getLogger("workflow")

FLEX_BLOCK = 128  # FlexAttention's block size: the packed row is padded to a multiple of it


class Layout:
    """Index tensors of one packed batch, on its device, shared by all layers of a forward."""

    def __init__(self, cu_seqlens: torch.Tensor, max_len: int, n_tokens: int):
        device = cu_seqlens.device
        starts = cu_seqlens[:-1].long()
        self.cu_seqlens, self.max_len, self.n_tokens = cu_seqlens, max_len, n_tokens
        self.lengths = cu_seqlens.diff().long()
        self.n_seqs = len(self.lengths)
        # output_size keeps repeat_interleave from synchronising with the GPU to learn the total
        self.seq = torch.repeat_interleave(torch.arange(self.n_seqs, device=device), self.lengths, output_size=n_tokens)
        self.pos = torch.arange(n_tokens, device=device) - starts[self.seq]  # restarts at 0 in each sequence
        j = torch.arange(max_len, device=device)
        self.valid = j[None, :] < self.lengths[:, None]  # [B, L] slots of the padded view holding a token
        self.gather = (starts[:, None] + j[None, :]).clamp(max=n_tokens - 1)  # token of each slot
        self.scatter = self.seq * max_len + self.pos  # slot of each token
        self._block_mask = None
        self._by_length = None
        self._masks = {}  # padded_mask's, shared by the layers of a forward

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

    def by_length(self) -> list[tuple[int, int, int]]:
        """(L, first token, G) for each run of G consecutive sequences of length L, computed once.
        A packed batch is sorted by length (packing.greedy_batches), so a length is one run."""
        if self._by_length is None:
            lengths, counts = torch.unique_consecutive(self.lengths.cpu(), return_counts=True)
            firsts = torch.cat((torch.zeros(1, dtype=torch.long), (lengths * counts).cumsum(0)[:-1]))
            self._by_length = list(zip(lengths.tolist(), firsts.tolist(), counts.tolist()))
        return self._by_length

    def block_mask(self):
        """FlexAttention's BlockMask of the row padded to FLEX_BLOCK: a token sees the tokens of its
        own sequence; the padding is a sequence of its own. Built from each block's first and last
        sequence (sequences are contiguous), with no T x T mask."""
        if self._block_mask is None:
            from torch.nn.attention.flex_attention import BlockMask

            # two blocks at least: dynamic shapes keep sizes of 1 static, so a one-block row would
            # compile the kernel a second time, in the middle of a job
            n_blocks = max(2, -(-self.n_tokens // FLEX_BLOCK))
            padded = n_blocks * FLEX_BLOCK
            doc = F.pad(self.seq, (0, padded - self.n_tokens), value=self.n_seqs)
            first, last = doc.view(n_blocks, FLEX_BLOCK)[:, 0], doc.view(n_blocks, FLEX_BLOCK)[:, -1]
            shares = (first[:, None] <= last[None, :]) & (first[None, :] <= last[:, None])  # [q block, kv block]
            single = first == last
            full = single[:, None] & single[None, :] & (first[:, None] == first[None, :])

            def ordered(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                counts = dense.sum(-1, dtype=torch.int32)[None, None]
                indices = torch.argsort(dense.to(torch.int8), dim=-1, descending=True, stable=True)
                return counts, indices.to(torch.int32)[None, None]

            def same_sequence(b, h, q_idx, kv_idx):
                return doc[q_idx] == doc[kv_idx]

            self._block_mask = BlockMask.from_kv_blocks(
                *ordered(shares & ~full),
                *ordered(full),
                BLOCK_SIZE=FLEX_BLOCK,
                mask_mod=same_sequence,
                seq_lengths=(padded, padded),
                compute_q_blocks=False,  # the backward pass's index: forwards only here
            )
        return self._block_mask


def alibi_bias(slopes: torch.Tensor, length: int, dtype: torch.dtype, keys: int | None = None) -> torch.Tensor:
    """-slope_h * |i - j| for one sequence length: [H, L, keys] (keys >= L; L unless given)."""
    positions = torch.arange(keys or length, device=slopes.device)
    distance = (positions[None, :] - positions[:length, None]).abs()
    return (-slopes[:, None, None] * distance).to(dtype)


def per_sequence_attention(q, k, v, layout: Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q k^T / sqrt(dh) + bias) v, one sequence at a time; q, k, v: [T, H, dh]."""
    out = torch.empty_like(q)
    for start, end in pairwise(layout.cu_seqlens.tolist()):
        qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))  # [H, L, dh]
        bias = None if slopes is None else alibi_bias(slopes, end - start, q.dtype)
        out[start:end] = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=bias).transpose(0, 1)
    return out


def grouped_attention(q, k, v, layout: Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    """per_sequence_attention with the sequences of one length in one call; q, k, v: [T, H, dh]."""
    out = torch.empty_like(q)
    for length, first, g in layout.by_length():
        run = slice(first, first + g * length)
        qs, ks, vs = (t[run].unflatten(0, (g, length)).transpose(1, 2) for t in (q, k, v))  # [G, H, L, dh], views
        # ALiBi broadcast over G: as fast as a bias laid out per sequence, without its copy
        bias = None if slopes is None else alibi_bias(slopes, length, q.dtype).expand(g, -1, -1, -1)
        out[run] = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=bias).transpose(1, 2).flatten(0, 1)
    return out


MASK_ALIGN = 8  # elements: a mask row stride the memory-efficient kernel takes as it is (else it pads a copy per call)


def padded_mask(layout: Layout, slopes: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The padded path's additive attention mask: padded keys at -inf, ALiBi added when slopes are
    given; [B, 1, 1, L], or [B, H, L, L] with ALiBi. Made once per batch (a layout serves one model's
    forward), as a view of a mask whose rows are MASK_ALIGN apart: the memory-efficient kernel
    copies a mask with other strides into an aligned one at every call (a bool mask too, which
    it first makes additive)."""
    key = (slopes is not None, dtype)
    if key not in layout._masks:
        length = layout.max_len
        width = -(-length // MASK_ALIGN) * MASK_ALIGN
        padding = torch.arange(width, device=layout.valid.device)[None, :] >= layout.lengths[:, None]  # [B, width]
        if slopes is None:
            mask = torch.zeros(padding.shape, dtype=dtype, device=padding.device)[:, None, None, :]
        else:
            mask = alibi_bias(slopes, length, dtype, keys=width)[None]
        layout._masks[key] = mask.masked_fill(padding[:, None, None, :], float("-inf"))[..., :length]
    return layout._masks[key]


def padded_attention(q, k, v, layout: Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sequence attention through one padded block; q, k, v: [T, H, dh]. Padded queries are dropped."""
    q, k, v = (t[layout.gather].transpose(1, 2) for t in (q, k, v))  # [B, H, L, dh]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=padded_mask(layout, slopes, q.dtype))
    return out.transpose(1, 2).reshape(-1, *out.shape[1::2])[layout.scatter]


def _flash(q, k, v, layout, slopes):
    from flash_attn import flash_attn_varlen_func

    cu = layout.cu_seqlens
    return flash_attn_varlen_func(q, k, v, cu, cu, layout.max_len, layout.max_len, alibi_slopes=slopes)


def _torch_varlen(q, k, v, layout, slopes):
    from torch.nn.attention.varlen import varlen_attn

    cu = layout.cu_seqlens
    return varlen_attn(q, k, v, cu, cu, layout.max_len, layout.max_len)


@functools.cache
def compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=True)  # dynamic: one kernel for every row length


def _flex_kernel(device: torch.device):
    """Compiled on CUDA; elsewhere eager (it materialises the scores: for tests only)."""
    if device.type == "cuda":
        return compiled_flex()
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention


def _flex(q, k, v, layout, slopes):
    """FlexAttention over the row padded to FLEX_BLOCK, [1, H, T', dh]."""
    kernel = _flex_kernel(q.device)
    mask = layout.block_mask()
    pad = mask.seq_lengths[0] - layout.n_tokens
    q, k, v = (F.pad(t, (0, 0, 0, 0, 0, pad)).transpose(0, 1)[None] for t in (q, k, v))
    score_mod = None
    if slopes is not None:

        def score_mod(score, b, h, q_idx, kv_idx):  # within one sequence |q_idx - kv_idx| is its own |i - j|
            return score - slopes[h] * (q_idx - kv_idx).abs()

    return kernel(q, k, v, score_mod=score_mod, block_mask=mask)[0].transpose(0, 1)[: layout.n_tokens]


def _importable(module: str) -> bool:
    # imported only for CUDA runs: torch.nn.attention.varlen pulls in torch._dynamo (seconds)
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


def candidates(alibi: bool) -> list[tuple[str, object]]:
    """The kernels this installation has, best first. With ALiBi the padded path comes before
    FlexAttention: DNABERT-S's frames are short (about 100 tokens, attention about 2% of its FLOPs),
    and FlexAttention's compile took 15-20 s of every job's start-up (docs/performance.md)."""
    found = [("flash-attn varlen", _flash)] if _importable("flash_attn") else []
    if alibi:
        found.append(("padded sdpa", padded_attention))
    elif _importable("torch.nn.attention.varlen"):  # torch >= 2.10
        found.append(("torch varlen_attn", _torch_varlen))
    if _importable("torch.nn.attention.flex_attention"):
        found.append(("flex_attention", _flex))
    return found


PADDED = ("padded sdpa", None)
GROUPED = ("sdpa by sequence length", grouped_attention)
MIN_COSINE = 0.999  # against float32: what a correct half-precision kernel reaches with room to spare
_chosen: dict[tuple, tuple[str, object]] = {}
_named: dict[tuple, tuple[str, object]] = {}  # the last choice per device, dtype and ALiBi: kernel_name's


def check_kernel(kernel, q: torch.Tensor, alibi: bool) -> float:
    """Minimum cosine of `kernel` on q's device and dtype against the float32 per-sequence
    reference, over a row of three sequences (1, 37 and 162 tokens: two flex blocks). Errors,
    out-of-memory errors included, reach the caller."""
    layout = Layout(torch.tensor([0, 1, 38, 200], dtype=torch.int32, device=q.device), 162, 200)
    generator = torch.Generator(q.device).manual_seed(0)
    t = torch.randn(3, 200, *q.shape[1:], generator=generator, device=q.device)
    slopes = torch.linspace(0.5, 0.01, q.shape[1], device=q.device) if alibi else None
    expected = per_sequence_attention(*t, layout, slopes)
    got = kernel(*t.to(q.dtype), layout, slopes).float()
    return float(F.cosine_similarity(got, expected, dim=-1).min())


def fused_kernel(q: torch.Tensor, alibi: bool, found: list[tuple[str, object]] | None = None) -> tuple[str, object]:
    """The first fused kernel that runs and agrees with the float32 reference on this device
    and dtype, or PADDED. The choice is kept for the process only when every check ended: an
    out-of-memory error reaches the caller (the embed job halves the batch) with nothing kept."""
    # the check depends on the heads and the head size too (Triton refuses head sizes below 16)
    key = (str(q.device), q.dtype, alibi, tuple(q.shape[1:]))
    if key in _chosen:
        return _chosen[key]
    choice = PADDED
    for name, kernel in candidates(alibi) if found is None else found:
        try:
            cosine = check_kernel(kernel, q, alibi)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # a kernel that cannot run here fails in many ways (compile, dtype, arch)
            lines = str(error).strip().splitlines() or [type(error).__name__]
            log.warning("attention: %s does not run here (%s)", name, lines[0])
            continue
        if cosine > MIN_COSINE:
            choice = (name, kernel)
            break
        log.warning("attention: %s disagrees with the float32 reference (cosine %.6f); not used", name, cosine)
    _chosen[key] = _named[key[:3]] = choice
    log.info("attention on %s in %s%s: %s", q.device, q.dtype, " with ALiBi" if alibi else "", choice[0])
    return choice


def _kernel(q: torch.Tensor, alibi: bool) -> tuple[str, object]:
    if not q.is_cuda:
        return GROUPED
    if q.dtype in (torch.float16, torch.bfloat16):
        return fused_kernel(q, alibi)
    return PADDED


def kernel_name(device: torch.device, dtype: torch.dtype, alibi: bool) -> str:
    """The attention kernel that forwards on this device and dtype use (after the first forward)."""
    if device.type != "cuda":
        return GROUPED[0]
    return _named.get((str(device), dtype, alibi), PADDED)[0]


def attention(q, k, v, layout: Layout, slopes: torch.Tensor | None = None) -> torch.Tensor:
    """Block-diagonal attention of packed q, k, v [T, H, dh] (scale 1/sqrt(dh)), ALiBi when slopes are given.
    A fused kernel that fails later (a compile for a new shape) gives way to the padded path for
    the rest of the job instead of ending it; running out of memory is the caller's to handle."""
    name, kernel = _kernel(q, slopes is not None)
    if kernel is None or (name, kernel) == GROUPED:
        return (kernel or padded_attention)(q, k, v, layout, slopes)
    try:
        return kernel(q, k, v, layout, slopes)
    except torch.OutOfMemoryError:
        raise
    except Exception as error:  # compile and launch errors take many forms
        lines = str(error).strip().splitlines() or [type(error).__name__]
        log.warning("attention: %s failed on a batch (%s); the padded path is used from now on", name, lines[0])
        key = (str(q.device), q.dtype, slopes is not None, tuple(q.shape[1:]))
        _chosen[key] = _named[key[:3]] = PADDED
        return padded_attention(q, k, v, layout, slopes)
