"""The run's plan: every sample's shards packed into pooled shards (PLAN columns), written by the
workflow's one checkpoint once every sample is prepared. A pool is what one tokenize, embed and
score job work on: consecutive shards, in the sheet's order, of at most `shard_tokens` ESM-2 tokens
together, so that small samples share their GPU jobs. A shard lies at `offset` rows into its pool:
record IDs may repeat across samples, so rows are found by position, never by ID.

Samples are planned in generations: those a run first plans together, then each sample appended
to a finished run in the next, with a plan of its own (`results/plan/shards_{generation}.tsv`),
so that adding samples leaves the earlier pools and jobs alone. One checkpoint, not one per
sample, whose cost to Snakemake is quadratic in the samples."""

import contextlib
import functools
import os
from pathlib import Path

import pandas as pd

from workflow_lib.io.sharding import SHARDS, read_shards
from workflow_lib.io.tables import write_tsv

PLAN = ("sample", *SHARDS, "pool", "offset")


def _plans(plan_dir: str | Path) -> dict[int, Path]:
    """The plans in `plan_dir`, by generation, in generation order (str.isdigit alone takes '²')."""
    found = {p.stem.removeprefix("shards_"): p for p in Path(plan_dir).glob("shards_*.tsv")}
    return dict(sorted((int(g), p) for g, p in found.items() if g.isascii() and g.isdigit()))


def generations(sheet: list[str], plan_dir: str | Path) -> dict[str, int]:
    """Each sample's generation: that of the plan that lists it, else the one after the latest."""
    plans, listed = _plans(plan_dir), {}
    for generation, path in plans.items():
        with contextlib.suppress(OSError, ValueError):  # a plan cut short: its samples are planned again
            listed |= dict.fromkeys(read_plan(path), generation)
    new = max(plans, default=-1) + 1
    return {sample: listed.get(sample, new) for sample in sheet}


def pack(shard_tables: list[tuple[str, list[dict]]], shard_tokens: int, generation: int = 0) -> list[dict]:
    """PLAN rows of the (sample, its shards) pairs: each shard joins the latest pool while their
    tokens stay within `shard_tokens`, else starts the next. Pools are named `{generation}-{n}`."""
    rows, pool, tokens, offset = [], 0, 0, 0
    for sample, shards in shard_tables:
        for shard in shards:
            if offset and tokens + shard["tokens"] > shard_tokens:
                pool, tokens, offset = pool + 1, 0, 0
            place = {"pool": f"{generation}-{pool}", "offset": offset}
            rows.append({"sample": sample, **{c: shard[c] for c in SHARDS}, **place})
            tokens, offset = tokens + shard["tokens"], offset + shard["frames"]
    return rows


def write_plan(
    shard_tables: list[tuple[str, str | Path]], shard_tokens: int, output: str | Path, generation: int = 0
) -> dict:
    """The plan of a generation's (sample, shards table) pairs, in that order; return its counts."""
    rows = pack([(sample, read_shards(path)) for sample, path in shard_tables], shard_tokens, generation)
    write_tsv(pd.DataFrame(rows, columns=list(PLAN)), output)
    return {"shards": len(rows), "pools": len({row["pool"] for row in rows})}


def read_plan(path: str | Path) -> dict[str, list[dict]]:
    """Each sample's shards (SHARDS fields, pool and offset); read once per version of the file."""
    return _read_plan(*_version(path))[0]


def read_pools(path: str | Path) -> dict[str, list[dict]]:
    """Each pool's shards (PLAN fields), in pool order."""
    return _read_plan(*_version(path))[1]


def read_plans(plan_dir: str | Path) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """Every generation's plan in `plan_dir`: each sample's shards and each pool's."""
    samples, pools = {}, {}
    for path in _plans(plan_dir).values():
        samples |= read_plan(path)
        pools |= read_pools(path)
    return samples, pools


def _version(path: str | Path) -> tuple[str, int, int]:
    stat = os.stat(path)
    return str(path), stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=256)  # a plan per generation
def _read_plan(path: str, mtime_ns: int, size: int) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    samples: dict[str, list[dict]] = {}
    pools: dict[str, list[dict]] = {}
    for row in pd.read_csv(path, sep="\t", usecols=list(PLAN), dtype={"sample": str, "pool": str}).to_dict("records"):
        pools.setdefault(row["pool"], []).append(row)
        samples.setdefault(row["sample"], []).append({c: row[c] for c in PLAN if c != "sample"})
    return samples, pools
