"""The run's plan: every sample's shards, from the shards tables that prepare writes, packed into
pooled shards (PLAN columns), written by the workflow's one checkpoint once every sample is
prepared. A pool is what one tokenize, embed (per model) and score job work on: consecutive shards,
in the sheet's order, of at most `shard_tokens` ESM-2 tokens together, so that many small samples
share their GPU jobs while a large sample's shards (each near `shard_tokens`) stay pools of their
own. A shard lies at `offset` rows into its pool, whose files keep the frames of its shards in
plan order: record IDs may repeat across samples, so rows are found by position, never by ID.

The rules read the plan once (cached per version of the file) to know each sample's shards and
each pool's; a checkpoint per sample would cost Snakemake time quadratic in the samples. Whether
the plan on disk is still the one it would write (plan_is_current) decides how it waits for the
model check (rules/common.smk, plan_check)."""

import functools
import os
from pathlib import Path

from .outputs import atomic_open
from .sharding import SHARDS, read_shards
from .tables import read_table

PLAN = ("sample", *SHARDS, "pool", "offset")


def pack(shard_tables: list[tuple[str, list[dict]]], shard_tokens: int) -> list[dict]:
    """PLAN rows of the (sample, its shards) pairs: each shard, in order, joins the latest pool
    while their tokens stay within `shard_tokens`, else starts the next (a shard is never cut)."""
    rows, pool, tokens, offset = [], 0, 0, 0
    for sample, shards in shard_tables:
        for shard in shards:
            if offset and tokens + shard["tokens"] > shard_tokens:
                pool, tokens, offset = pool + 1, 0, 0
            rows.append({"sample": sample, **{c: shard[c] for c in SHARDS}, "pool": pool, "offset": offset})
            tokens, offset = tokens + shard["tokens"], offset + shard["frames"]
    return rows


def write_plan(shard_tables: list[tuple[str, str | Path]], shard_tokens: int, output: str | Path) -> dict:
    """The plan of the (sample, shards table) pairs, in that order; return its counts."""
    rows = pack([(sample, read_shards(path)) for sample, path in shard_tables], shard_tokens)
    with atomic_open(output) as handle:
        handle.write("\t".join(PLAN) + "\n")
        handle.writelines("\t".join(str(row[c]) for c in PLAN) + "\n" for row in rows)
    return {"shards": len(rows), "pools": rows[-1]["pool"] + 1 if rows else 0}


def read_plan(path: str | Path) -> dict[str, list[dict]]:
    """Each sample's shards (SHARDS fields, pool and offset), in shard order; read once per version
    of the file."""
    return _read_plan(*_version(path))[0]


def read_pools(path: str | Path) -> dict[int, list[dict]]:
    """Each pool's shards (PLAN fields), in pool order."""
    return _read_plan(*_version(path))[1]


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
        if newer and read_shards(table) != [{c: row[c] for c in SHARDS} for row in plan[sample]]:
            return False
    return True


def _version(path: str | Path) -> tuple[str, int, int]:
    stat = os.stat(path)
    return str(path), stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=2)
def _read_plan(path: str, mtime_ns: int, size: int) -> tuple[dict[str, list[dict]], dict[int, list[dict]]]:
    samples: dict[str, list[dict]] = {}
    pools: dict[int, list[dict]] = {}
    for row in read_table(path, list(PLAN)).to_dict("records"):
        row["sample"] = str(row["sample"])
        pools.setdefault(row["pool"], []).append(row)
        samples.setdefault(row["sample"], []).append({c: row[c] for c in PLAN if c != "sample"})
    return samples, pools
