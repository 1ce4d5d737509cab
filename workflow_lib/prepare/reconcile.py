"""Counts reconciled after the prepare stage: every kept frame must be in the frames table once and
in its shard's two FASTA files once, in the frames table's order by bin, and every input record in
the sequences table once. The files are read back in blocks and digested as the writer digested
them, so the check needs memory for one shard's IDs; only when digests differ are all of a shard's
IDs collected, to name them.
"""

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from workflow_lib.cli.errors import InputError
from workflow_lib.io.sharding import shard_fasta, shard_lines
from workflow_lib.io.tables import read_chunks


class IDDigest:
    """Order-sensitive digest and count of a stream of IDs (bytes)."""

    def __init__(self):
        self.hash, self.count = hashlib.blake2b(digest_size=16), 0

    def update(self, ids: list[bytes]) -> None:
        if ids:
            self.hash.update(b"\n".join(ids) + b"\n")
            self.count += len(ids)

    def __eq__(self, other) -> bool:
        return self.count == other.count and self.hash.digest() == other.hash.digest()


def fasta_ids(path: Path) -> Iterator[list[bytes]]:
    """The IDs of a shard FASTA, a piece at a time."""
    for _, lines, first in shard_lines(path):
        yield [header[1:] for header in lines[first::2]]


def check_prepared(files, written: list[IDDigest], records: int) -> None:
    """Fail, naming the file and what differs, unless the outputs on disk hold what the writer wrote."""
    frames_path, sequences_path = files.frames, files.sequences
    in_table = [IDDigest() for _ in written]
    for shard, ids in _shards_in_bin_order(frames_path):
        if shard >= len(written):
            raise InputError(f"{frames_path}: lists frames of shard {shard}, but {len(written)} were written")
        in_table[shard].update(ids)
    n_frames = 0
    rows = 0
    for chunk in read_chunks(sequences_path, ["sequence_id", "n_frames"]):
        rows += len(chunk)
        n_frames += int(chunk["n_frames"].sum())
    if rows != records:
        raise InputError(f"{sequences_path}: {rows} rows for {records} input records; delete it and run again")
    if n_frames != sum(d.count for d in written):
        raise InputError(f"{sequences_path}: counts {n_frames} frames but {sum(d.count for d in written)} were kept")
    for shard, expected in enumerate(written):
        if in_table[shard] != expected:
            raise InputError(f"{frames_path}: shard {shard} lists other frames than were written; run prepare again")
        for path in (shard_fasta(files.shards, shard, "fna"), shard_fasta(files.shards, shard, "faa")):
            found = IDDigest()
            for ids in fasta_ids(path):
                found.update(ids)
            if found != expected:
                _name_the_difference(path, frames_path, shard)


def _shards_in_bin_order(frames_path: Path) -> Iterator[tuple[int, list[bytes]]]:
    """Each shard's frame IDs in the order its FASTA files hold them: the frames table's, by bin."""
    held: list = [None, [], []]  # shard, IDs, bins
    for chunk in read_chunks(frames_path, ["frame_id", "shard", "bin"]):
        for shard, rows in chunk.groupby("shard", sort=False):
            if shard != held[0]:
                if held[1]:
                    yield held[0], _by_bin(held)
                held = [shard, [], []]
            held[1] += rows["frame_id"].tolist()
            held[2].append(rows["bin"].to_numpy())
    if held[1]:
        yield held[0], _by_bin(held)


def _by_bin(held: list) -> list[bytes]:
    ids = held[1]
    return [ids[i].encode() for i in np.argsort(np.concatenate(held[2]), kind="stable").tolist()]


def _name_the_difference(path: Path, frames_path: Path, shard: int) -> None:
    expected = [
        i
        for chunk in read_chunks(frames_path, ["frame_id", "shard"])
        for i in chunk.loc[chunk["shard"] == shard, "frame_id"]
    ]
    found = [i.decode() for ids in fasta_ids(path) for i in ids]
    missing, extra = sorted(set(expected) - set(found)), sorted(set(found) - set(expected))
    repeated = len(found) - len(set(found))
    raise InputError(
        f"{path}: holds {len(found)} frames but {frames_path.name} gives {len(expected)} to shard {shard} "
        f"(missing {missing[:3]}, extra {extra[:3]}, {repeated} repeated); delete the prepare directory and run again"
    )
