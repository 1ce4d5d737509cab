"""Paired-end reads simulated from a genome, with a known source: for tests and benchmarks."""

import gzip
from pathlib import Path

import numpy as np

from workflow_lib.io.seqio import read_records

_COMPLEMENT = bytes.maketrans(b"ACGTN", b"TGCAN")


def simulate_pairs(genome: Path, n: int, seed: int, prefix: str) -> list[tuple[bytes, bytes, bytes]]:
    """`n` fragments of `genome` (its records joined), each (ID, mate 1, mate 2): an insert of 300
    to 500 bp (uniformly), on either strand, read 150 bp from each end (mate 2 reverse-complemented,
    as Illumina reads it)."""
    sequence = b"".join(seq.upper() for _, _, seq in read_records(genome))
    rng = np.random.default_rng(seed)
    lengths = rng.integers(300, 501, n)
    starts = rng.integers(0, len(sequence) - lengths)
    pairs = []
    for i, (start, length, reverse) in enumerate(zip(starts.tolist(), lengths.tolist(), rng.random(n) < 0.5)):
        insert = sequence[start : start + length]
        if reverse:
            insert = insert.translate(_COMPLEMENT)[::-1]
        mate2 = insert[-150:].translate(_COMPLEMENT)[::-1]
        pairs.append((b"%s_%d" % (prefix.encode(), i), insert[:150], mate2))
    return pairs


def write_fastq_pair(pairs: list[tuple[bytes, bytes, bytes]], path1: Path, path2: Path) -> None:
    """The mates as two gzipped FASTQ files, Illumina's way: the fragment's ID, the mate in the comment."""
    for path, mate in ((path1, 1), (path2, 2)):
        with gzip.open(path, "wb", compresslevel=1) as out:
            out.writelines(
                b"@%s %d:N:0:1\n%s\n+\n%s\n" % (i, mate, r[mate - 1], b"I" * len(r[mate - 1])) for i, *r in pairs
            )
