"""Shards sized by the work: frames fill shard 0 up to `shard_tokens` ESM-2 tokens, then shard 1,
and so on, so that an embed job's work follows the setting, never the sample's size. Each shard is a
FASTA pair, `shard_{i}.fna` and `shard_{i}.faa`, with the same IDs in the same order; the shards
table (SHARDS columns) lists every shard with its frames and ESM-2 tokens."""

import shutil
from pathlib import Path

from workflow_lib.io.outputs import atomic_open
from workflow_lib.io.tables import read_table

# the shards table of a sample: a row per shard, in shard order
SHARDS = ("shard", "frames", "tokens")


def shard_fasta(directory: str | Path, shard: int, suffix: str) -> Path:
    """A shard's nucleotide (`fna`) or protein (`faa`) FASTA in prepare's shards directory."""
    return Path(directory) / f"shard_{shard}.{suffix}"


def read_shards(path: str | Path) -> list[dict]:
    """A shards table's rows, in shard order (one per shard: small whatever the sample)."""
    return read_table(path).to_dict("records")


def pool_shards(pieces: list[tuple[str | Path, int]], fna: str | Path, faa: str | Path) -> int:
    """A pooled shard's FASTA pair: the (shards directory, shard) pieces' pairs in order; the bytes written."""
    written = 0
    for suffix, output in (("fna", fna), ("faa", faa)):
        with atomic_open(output, "wb") as out:
            for directory, shard in pieces:
                with open(shard_fasta(directory, shard, suffix), "rb") as piece:
                    shutil.copyfileobj(piece, out, 1 << 20)
            written += out.tell()
    return written
