"""Six-frame translation of many chunks at once, keeping the frames with no stop codon.

Reproduces VirNucPro (units.py `translate_dna` and `identify_seq`), quirks included:
- Frames F1-F3 read the chunk from offsets 0-2; R1-R3 read its reverse complement from 0-2.
  The reverse complement complements A, C, G, T only; other letters stay as they are.
- A codon that holds a non-ACGT base is DROPPED from the protein (policy `drop`: VirNucPro's
  dictionary lookup with a '' default), or translated to X (policy `X`).
- The nucleotide slice of a kept frame is `seq[f : f + 3*len(protein) + 1]`: ONE BASE LONGER
  than its codons (cut at the chunk end), and shorter than its span when codons were dropped.
- A frame whose protein is empty is not kept (VirNucPro's prediction writes no such frame).

Vectorised over a batch of chunks: position p gets the index of the forward codon starting at p
and of the reverse-strand codon covering p..p+2; a frame is a stride-3 slice of these.
"""

import numpy as np

FRAME_NAMES = ("F1", "F2", "F3", "R1", "R2", "R3")
_AMINO = "FFLLSSSSYY**CC*WLLLLPPPPHHQQRRRRIIIMTTTTNNKKSSRRVVVVAAAADDEEGGGG"  # standard code, TCAG order
_DROPPED = b"-"
_COMPLEMENT = bytes.maketrans(b"ACGT", b"TGCA")


def base_codes(buf: bytes) -> tuple[np.ndarray, bool]:
    """2-bit codes of an upper-case buffer, (byte >> 1) & 3: A=0, C=1, T=2, G=3, so that the
    complement is code ^ 2; any other byte gets 4. Also returns whether any byte was not ACGT."""
    x = np.frombuffer(buf, dtype=np.uint8)
    codes = (x >> 1) & 3
    acgt = (x == 65) | (x == 67) | (x == 71) | (x == 84)
    if acgt.all():
        return codes, False
    codes[~acgt] = 4
    return codes, True


def _codon_tables(ambiguous: str) -> tuple[bytes, bytes]:
    """translate() tables from base-5 codon indices (bases coded as in base_codes) to amino acids.

    Forward: index 25*b0 + 5*b1 + b2 for the bases at p, p+1, p+2.
    Reverse: index 25*b1 + 5*b2 + b0, whose codon on the reverse strand is comp(b2) comp(b1) comp(b0).
    """
    other = _DROPPED if ambiguous == "drop" else b"X"
    forward, reverse = bytearray(other * 256), bytearray(other * 256)
    for i, amino in enumerate(_AMINO):
        b0, b1, b2 = ((ord(x) >> 1) & 3 for x in ("TCAG"[i // 16], "TCAG"[i // 4 % 4], "TCAG"[i % 4]))
        forward[25 * b0 + 5 * b1 + b2] = ord(amino)
        c0, c1, c2 = b2 ^ 2, b1 ^ 2, b0 ^ 2  # the forward-strand bases whose complement reads b0 b1 b2
        reverse[25 * c1 + 5 * c2 + c0] = ord(amino)
    return bytes(forward), bytes(reverse)


_TABLES = {policy: _codon_tables(policy) for policy in ("drop", "X")}
# the codon indices, forward and reverse, of the stop codons
_STOPS = tuple(np.flatnonzero(np.frombuffer(table, np.uint8) == ord("*")).tolist() for table in _TABLES["X"])


def _is_stop(index: np.ndarray, stops: list[int]) -> np.ndarray:
    mask = index == stops[0]  # faster than np.isin or a lookup table on these small codes
    for stop in stops[1:]:
        mask |= index == stop
    return mask


def six_frames(buf: bytes, starts: np.ndarray, ends: np.ndarray, ambiguous: str, codes: tuple[np.ndarray, bool]):
    """Translate the chunks buf[starts[i]:ends[i]] in six frames (`codes`: base_codes' of `buf`); the
    stop-free frames, in VirNucPro's order (chunk, then F1..F3, R1..R3): their chunks (index into
    `starts`), frames (0..5, see FRAME_NAMES), proteins and nucleotides."""
    forward_table, reverse_table = _TABLES[ambiguous]
    if len(buf) < 3 or starts.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), [], []
    b, any_ambiguous = codes
    pair = b[:-1] * 5 + b[1:]
    fwd = pair[:-1] * 5 + b[2:]  # codon index per position; amino acids only for kept frames
    rev = pair[1:] * 5 + b[:-2]

    length = ends - starts
    offset = np.arange(3)
    m = np.maximum(length[:, None] - offset, 0) // 3  # codons per frame, (chunks, 3)
    # Lowest buffer position of each frame's codons, (chunks, 6); reverse codons run downwards.
    lowest = np.concatenate([starts[:, None] + offset, ends[:, None] - 3 - offset - 3 * (m - 1)], axis=1)
    m = np.concatenate([m, m], axis=1)
    has_codons = m > 0
    lowest = np.where(has_codons, lowest, 0)

    stops = _reduce_in_frames(np.logical_or, _is_stop(fwd, _STOPS[0]), _is_stop(rev, _STOPS[1]), lowest, m, bool)
    residues = m
    if ambiguous == "drop" and any_ambiguous:
        other = b == 4
        dropped = other[:-2] | other[1:-1] | other[2:]  # the same codons on both strands
        residues = m - _reduce_in_frames(np.add, dropped, dropped, lowest, m, np.int64)
    chunk, frame = np.nonzero(has_codons & ~stops & (residues > 0))
    low, count, n_res = lowest[chunk, frame], m[chunk, frame], residues[chunk, frame]
    start, end = starts[chunk], ends[chunk]
    reverse = frame >= 3
    # Protein: stride-3 slice of the codon indices; reverse frames run downwards from the top.
    p_from = np.where(reverse, low + 3 * (count - 1), low)
    p_to = np.where(reverse, low - 1, low + 3 * count)
    # Nucleotides: [n_from, n_to) on the forward strand; reverse frames take it reversed and complemented.
    first = np.where(reverse, end - (frame - 3), start + frame)
    n_from = np.where(reverse, np.maximum(first - 3 * n_res - 1, start), first)
    n_to = np.where(reverse, first, np.minimum(first + 3 * n_res + 1, end))

    # Each kept frame's protein (its strand's codon indices, stride 3, translated by that strand's
    # table) and nucleotides (reversed and complemented on the reverse strand).
    proteins, nucleotides = [], []
    spans = zip(reverse.tolist(), p_from.tolist(), p_to.tolist(), n_from.tolist(), n_to.tolist())
    for is_reverse, p0, p1, n0, n1 in spans:
        if is_reverse:
            proteins.append(rev[p0 : (p1 if p1 >= 0 else None) : -3].tobytes().translate(reverse_table))
            nucleotides.append(buf[n0:n1][::-1].translate(_COMPLEMENT))
        else:
            proteins.append(fwd[p0:p1:3].tobytes().translate(forward_table))
            nucleotides.append(buf[n0:n1])
    if ambiguous == "drop" and any_ambiguous:
        proteins = [p.replace(_DROPPED, b"") for p in proteins]
    return chunk, frame, proteins, nucleotides


def _reduce_in_frames(
    ufunc, forward: np.ndarray, reverse: np.ndarray, lowest: np.ndarray, m: np.ndarray, dtype
) -> np.ndarray:
    """Reduce mask[lowest + 3*i for i < m] per frame with `ufunc` (any or count), (chunks, 6).

    Seen as rows of 3 positions, a frame is one column over a range of rows, so a single
    `reduceat` along the rows per strand covers every frame. Frames without codons get 0.
    """
    out = np.zeros(m.shape, dtype=dtype)
    for strand, mask in enumerate((forward, reverse)):
        rows = np.zeros((mask.size // 3 + 2, 3), dtype=mask.dtype)  # room for the end index
        rows.ravel()[: mask.size] = mask
        cols = slice(3 * strand, 3 * strand + 3)
        low, n = lowest[:, cols].ravel(), m[:, cols].ravel()
        bounds = np.empty(2 * low.size, dtype=np.int64)
        bounds[0::2] = low // 3
        bounds[1::2] = bounds[0::2] + np.maximum(n, 1)
        # Results at even places are the frames; odd places reduce the gaps between them.
        reduced = ufunc.reduceat(rows, bounds, axis=0, dtype=dtype)[0::2]
        out[:, cols] = np.where(n > 0, reduced[np.arange(low.size), low % 3], 0).reshape(-1, 3)
    return out
