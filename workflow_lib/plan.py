"""The run's plan: every sample's shards, from the shards tables that prepare writes, in one table
(PLAN columns) written by the workflow's one checkpoint once every sample is prepared. The rules
read it once (cached per version of the file) to know each sample's shards and the tokens of each
embed job; a checkpoint per sample would cost Snakemake time quadratic in the samples. Whether the
plan on disk is still the one it would write (plan_is_current) decides how it waits for the model
check (rules/common.smk, plan_check)."""

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


def plan_is_current(path: str | Path, shard_tables: list[tuple[str, str | Path]]) -> bool:
    """Whether the plan at `path` is the one write_plan would make now of the (sample, shards table)
    pairs: it lists these samples, in this order, and each shards table written after it holds the
    shards it lists (one not newer is one it was made from). Reads only the plan and those tables."""
    try:
        made = os.stat(path).st_mtime_ns
        plan = read_plan(path)
    except (FileNotFoundError, ValueError):  # no plan yet, or not one (pandas' errors are ValueErrors)
        return False
    if list(plan) != [sample for sample, _ in shard_tables]:
        return False
    for sample, table in shard_tables:
        try:
            newer = os.stat(table).st_mtime_ns > made
        except FileNotFoundError:
            return False
        if newer and [{c: row[c] for c in SHARDS} for row in read_shards(table)] != plan[sample]:
            return False
    return True


@functools.lru_cache(maxsize=2)
def _read_plan(path: str, mtime_ns: int, size: int) -> dict[str, list[dict]]:
    plan: dict[str, list[dict]] = {}
    for row in read_table(path, list(PLAN)).to_dict("records"):
        plan.setdefault(str(row.pop("sample")), []).append(row)
    return plan
