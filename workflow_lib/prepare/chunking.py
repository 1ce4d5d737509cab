"""VirNucPro's overlapping chunks (units.py `split_fasta_chunk`), computed for many records at once.

A record of length L is cut into n = ceil(L / c) chunks of length c that overlap just enough to
end at L. VirNucPro spreads the overlap R = n*c - L over the chunk boundaries with a list of
steps: `need = R - (n-1)*lower` steps of `lower + 1` then steps of `lower`, where
lower = floor(R / n). Chunk k (0-based) starts at k*c minus the sum of the first k steps:

    start_k = k*c - k*lower - min(k, need)

Quirk kept on purpose: `need` is lower + R mod n, which can exceed n - 1; VirNucPro's list is
then all `lower + 1` steps, their sum falls short of R, and the LAST CHUNK ENDS BEYOND L and is
cut at L, so it is shorter than c (L=501, c=500 gives chunks [0, 500) and [250, 501)).
A record shorter than c is one chunk of its own length; an empty record has no chunk.
"""

import numpy as np


def chunk_bounds(lengths: np.ndarray, chunk_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (record index, start, end) of every chunk, 0-based half-open, in VirNucPro's order."""
    lengths = np.asarray(lengths, dtype=np.int64)
    c = int(chunk_length)
    n = -(-lengths // c)
    overlap = n * c - lengths
    lower = overlap // np.maximum(n, 1)
    need = overlap - (n - 1) * lower
    record = np.repeat(np.arange(lengths.size), n)
    first = np.cumsum(n) - n
    k = np.arange(record.size) - first[record]
    starts = k * c - k * lower[record] - np.minimum(k, need[record])
    ends = np.minimum(starts + c, lengths[record])
    return record, starts, ends
