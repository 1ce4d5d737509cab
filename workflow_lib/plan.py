"""The run's plan: every sample's shards, from the shards tables that prepare writes, in one table
(PLAN columns) written by the workflow's one checkpoint once every sample is prepared. The rules
read it once (cached per version of the file) to know each sample's shards and the tokens of each
embed job; a checkpoint per sample would cost Snakemake time quadratic in the samples."""

import functools
import os
from pathlib import Path

from .outputs import atomic_open
from .sharding import SHARDS, read_shards
from .tables import read_table

PLAN = ("sample", *SHARDS)


def write_plan(shard_tables: list[tuple[str, str | Path]], output: str | Path) -> int:
    """The plan of the (sample, shards table) pairs, in that order; return the number of shards."""
    rows = [(sample, row) for sample, path in shard_tables for row in read_shards(path)]
    with atomic_open(output) as handle:
        handle.write("\t".join(PLAN) + "\n")
        handle.writelines(f"{sample}\t" + "\t".join(str(row[c]) for c in SHARDS) + "\n" for sample, row in rows)
    return len(rows)


def read_plan(path: str | Path) -> dict[str, list[dict]]:
    """Each sample's shards (SHARDS fields), in shard order; read once per version of the file."""
    stat = os.stat(path)
    return _read_plan(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=2)
def _read_plan(path: str, mtime_ns: int, size: int) -> dict[str, list[dict]]:
    plan: dict[str, list[dict]] = {}
    for row in read_table(path, list(PLAN)).to_dict("records"):
        plan.setdefault(str(row.pop("sample")), []).append(row)
    return plan
