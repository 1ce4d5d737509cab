"""Benchmark input: reads sampled from the bundled genomes."""

import random
from pathlib import Path

from workflow_lib.seqio import read_records

GENOMES = Path(__file__).resolve().parents[1] / "resources" / "genomes"


def write_reads(path: Path, n: int, length: int, seed: int) -> None:
    """Sample n reads uniformly from the bundled genomes (both strands are covered by the frames)."""
    genomes = [seq for f in sorted(GENOMES.glob("*.fasta")) for _, _, seq in read_records(f)]
    rng = random.Random(seed)
    with open(path, "w") as out:
        for i in range(n):
            genome = rng.choice(genomes)
            start = rng.randrange(len(genome) - length)
            out.write(f">read_{i}\n{genome[start : start + length].decode()}\n")
