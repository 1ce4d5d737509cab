"""Greedy packing: sequences sorted by length fill one concatenated row each up to a token budget.

A packed batch is one row of the sequences' tokens end to end, with `cu_seqlens` marking where
each sequence starts (the varlen layout of FlashAttention); nothing is padded or truncated.
"""

from typing import NamedTuple

import numpy as np
import torch

from workflow_lib.models.varlen import Layout


class PackedBatch(NamedTuple):
    """Arrays are numpy in loader workers (pickled by value: cheaper than shared-memory tensors for
    batches this small) and torch tensors from `tensors()` on."""

    rows: torch.Tensor  # int64 [B]: the sequences' rows in the shard
    tokens: torch.Tensor  # int64 [T]: their tokens, concatenated
    cu_seqlens: torch.Tensor  # int32 [B + 1]: sequence i is tokens[cu_seqlens[i]:cu_seqlens[i + 1]]
    max_len: int  # the longest sequence, in tokens
    slots: int  # the token budget this batch was packed into (its length when one sequence exceeds it)

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def layout(self) -> Layout:
        """The index tensors the models' layers share, built once for the batch on its device."""
        return Layout(self.cu_seqlens, self.max_len, self.n_tokens)

    def tensors(self, pin: bool = False) -> "PackedBatch":
        """Torch tensors of the numpy arrays, in page-locked memory when `pin` (for async copies)."""
        convert = (lambda a: torch.from_numpy(a).pin_memory()) if pin else torch.from_numpy
        return self._replace(rows=convert(self.rows), tokens=convert(self.tokens), cu_seqlens=convert(self.cu_seqlens))

    def halves(self) -> tuple["PackedBatch", "PackedBatch"]:
        """The batch (of tensors) split into two by sequence count (to retry after running out of memory)."""
        middle = len(self.rows) // 2
        cu = self.cu_seqlens.cpu()
        lengths = cu.diff()
        cut = int(cu[middle])
        first = PackedBatch(self.rows[:middle], self.tokens[:cut], cu[: middle + 1], int(lengths[:middle].max()), cut)
        rest = self.n_tokens - cut
        second = PackedBatch(
            self.rows[middle:], self.tokens[cut:], cu[middle:] - cut, int(lengths[middle:].max()), rest
        )
        return first, second


def greedy_batches(lengths: np.ndarray, token_budget: int) -> list[np.ndarray]:
    """Indices sorted longest first (an out-of-memory error shows at a block's start), cut into runs
    whose summed lengths stay within the budget; a longer sequence gets a batch of its own."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    ends = np.cumsum(np.asarray(lengths)[order])
    batches, start, base = [], 0, 0
    while start < len(order):
        # the first index whose running total passes the budget closes the batch (at least one sequence)
        stop = max(int(np.searchsorted(ends, base + token_budget, side="right")), start + 1)
        batches.append(order[start:stop])
        base, start = int(ends[stop - 1]), stop
    return batches


def pack(rows: np.ndarray, encoded: list[np.ndarray], token_budget: int) -> PackedBatch:
    """One packed row from token arrays; `rows` are their places in the shard."""
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    cu = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu[1:])
    tokens = np.concatenate(encoded).astype(np.int64, copy=False)
    return PackedBatch(np.asarray(rows, dtype=np.int64), tokens, cu, int(lengths.max()), max(token_budget, int(cu[-1])))
