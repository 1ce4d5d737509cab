"""Batches that fill a token budget: sort by length, add sequences greedily, never truncate."""

import numpy as np


def padded_batches(lengths: np.ndarray, token_budget: int) -> list[np.ndarray]:
    """Split indices into batches whose padded size (count x longest) stays within the budget.

    Longest first, so an out-of-memory error shows at the start of a job, not at its end; a
    sequence longer than the budget gets a batch of its own rather than being cut.
    """
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches, current, longest = [], [], 0
    for index in order.tolist():
        length = int(lengths[index])
        if current and max(longest, length) * (len(current) + 1) > token_budget:
            batches.append(np.array(current))
            current, longest = [], 0
        current.append(index)
        longest = max(longest, length)
    if current:
        batches.append(np.array(current))
    return batches
