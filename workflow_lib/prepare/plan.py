"""The run's plan: every sample's shards cut into pooled shards (PLAN columns), written by the
workflow's one checkpoint once every sample is prepared. A pool is what one tokenize, embed and
score job work on: a range of bins (sharding.py) of every shard of the generation, of at most
`shard_tokens` distinct ESM-2 tokens together (distinct_tokens), so that copies of a frame meet in
one embed job and small samples share their GPU jobs (a range of too many copies is split between
shards: MOST_COPIES). A pool's pieces are each shard's frames of its bins, in the
sheet's and shard order; a piece lies at `offset` rows into its pool: record IDs may repeat across
samples, so rows are found by position, never by ID.

Samples are planned in generations: those a run first plans together, then each sample appended
to a finished run in the next, with a plan of its own (`results/plan/shards_{generation}.tsv`),
so that adding samples leaves the earlier pools and jobs alone. One checkpoint, not one per
sample, whose cost to Snakemake is quadratic in the samples."""

import contextlib
import functools
import itertools
import math
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from workflow_lib.io.sharding import BINS, SHARDS, SKETCH, read_bins, sketches
from workflow_lib.io.tables import write_tsv

# a row per piece: a sample's shard's frames and tokens in bins first_bin to end_bin (excluded)
PLAN = ("sample", *SHARDS, "pool", "offset", "first_bin", "end_bin")
# A pool's tokens, copies included, at most this many times shard_tokens: its rows, its embeddings
# on disk and its score job follow them. A range of bins of more (a sample of many copies) is
# split between shards, and its copies are embedded once in each part.
MOST_COPIES = 4


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


def distinct_tokens(bins_files: Iterable[str | Path]) -> np.ndarray:
    """Each bin's distinct ESM-2 tokens over the shards of `bins_files` (read one at a time), from
    their merged sketches (sharding.SKETCH): exact where a bin holds fewer distinct proteins than
    the sketch keeps, else their estimated number times the sketched ones' mean tokens."""
    none = np.iinfo(np.int64).max
    smallest = np.full((BINS, SKETCH), none)
    for path in bins_files:
        for shard in sketches(path):
            rows = np.flatnonzero(shard[:, 0])  # the bins it holds proteins of: a small sample's few
            merged = np.sort(np.concatenate([smallest[rows], np.where(shard[rows] == 0, none, shard[rows])], axis=1))
            hashes = merged >> 30
            merged[:, 1:][hashes[:, 1:] == hashes[:, :-1]] = none  # a protein the sketch holds already
            smallest[rows] = np.sort(merged, axis=1)[:, :SKETCH]
    held = smallest != none
    tokens = np.where(held, smallest & (1 << 30) - 1, 0).sum(axis=1)
    # k smallest of hashes uniform in [0, 2^20): (k - 1) 2^20 / the k-th's (hash + 1) distinct (KMV)
    proteins = (SKETCH - 1) * 2**20 / np.where(held[:, -1], smallest[:, -1] >> 30, 1)
    return np.where(held[:, -1], proteins * tokens / SKETCH, tokens)


def cut(distinct: np.ndarray, shard_tokens: int) -> list[int]:
    """The bounds of consecutive ranges of bins of at most `shard_tokens` of the `distinct` tokens
    per bin (a larger bin alone): a pool each."""
    bounds, total = [0], 0
    for b, tokens in enumerate(distinct.tolist()):
        if total and tokens and total + tokens > shard_tokens:  # bins without tokens join the range before
            bounds.append(b)
            total = 0
        total += tokens
    return bounds + [BINS]


def pack(
    samples: Iterable[tuple[str, dict[str, np.ndarray]]], bounds: list[int], generation: int = 0, most_tokens=math.inf
) -> list[dict]:
    """PLAN rows of the (sample, its bins file's counts) pairs, taken one at a time: a pool per
    range of bins (cut), cut again between shards where its tokens, copies included, would pass
    `most_tokens`; pools named `{generation}-{n}` in bin order; a shard without frames is a piece
    of the first."""
    ranges: list[list[list[dict]]] = [[[]] for _ in bounds[1:]]  # per range, its pools' pieces
    held = [0] * len(ranges)  # tokens of each range's last pool
    for sample, counts in samples:
        empty = counts["frames"].sum(axis=1) == 0
        for r, (first, end) in enumerate(itertools.pairwise(bounds)):
            frames, tokens = (counts[key][:, first:end].sum(axis=1).tolist() for key in ("frames", "tokens"))
            for shard, (n, t) in enumerate(zip(frames, tokens)):
                if n or (r == 0 and empty[shard]):
                    if ranges[r][-1] and held[r] + t > most_tokens:
                        ranges[r].append([])
                        held[r] = 0
                    pool = ranges[r][-1]
                    offset = pool[-1]["offset"] + pool[-1]["frames"] if pool else 0
                    place = {"offset": offset, "first_bin": first, "end_bin": end}
                    pool.append({"sample": sample, "shard": shard, "frames": n, "tokens": t, **place})
                    held[r] += t
    pools = [pool for pools in ranges for pool in pools if pool]
    return [row | {"pool": f"{generation}-{n}"} for n, pool in enumerate(pools) for row in pool]


def write_plan(
    bins_files: list[tuple[str, str | Path]], shard_tokens: int, output: str | Path, generation: int = 0
) -> dict:
    """The plan of a generation's (sample, bins file) pairs, in that order; return its counts. The
    bins files are read twice, one at a time: the plan's memory does not grow with the samples."""
    samples = ((sample, read_bins(path)) for sample, path in bins_files)
    bounds = cut(distinct_tokens(path for _, path in bins_files), shard_tokens)
    rows = pack(samples, bounds, generation, MOST_COPIES * shard_tokens)
    write_tsv(pd.DataFrame(rows, columns=list(PLAN)), output)
    return {"pieces": len(rows), "pools": len({row["pool"] for row in rows})}


def read_plan(path: str | Path) -> dict[str, list[dict]]:
    """Each sample's pieces (PLAN fields but the sample), by pool then shard; read once per version of
    the file."""
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
