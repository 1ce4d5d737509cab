"""Counts reconciled after the prepare stage: every kept frame must be in the frames table once, in
the order the writer wrote it, and in its shard's two FASTA files once, in the order the writer put
them (by bin), and every input record in the sequences table once. The files are read back in
blocks and digested as the writer digested them, so the check needs no memory per frame; only
when digests differ are IDs collected, to name them.
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


def check_prepared(files, written: list[tuple[IDDigest, IDDigest]], records: int) -> None:
    """Fail, naming the file and what differs, unless the outputs on disk hold what the writer wrote:
    per shard, the digests of its IDs in the frames table's order and in its FASTA files' order."""
    frames_path, sequences_path = files.frames, files.sequences
    in_table = [IDDigest() for _ in written]
    for chunk in read_chunks(frames_path, ["frame_id", "shard"]):
        shards, ids = chunk["shard"].to_numpy(), chunk["frame_id"].to_numpy()
        starts = np.flatnonzero(np.diff(shards, prepend=-1)).tolist()  # shard numbers never fall
        for lo, hi in zip(starts, [*starts[1:], len(shards)]):
            in_table[shards[lo]].update([i.encode() for i in ids[lo:hi].tolist()])
    n_frames = 0
    rows = 0
    for chunk in read_chunks(sequences_path, ["sequence_id", "n_frames"]):
        rows += len(chunk)
        n_frames += int(chunk["n_frames"].sum())
    if rows != records:
        raise InputError(f"{sequences_path}: {rows} rows for {records} input records; delete it and run again")
    if n_frames != sum(d.count for d, _ in written):
        raise InputError(f"{sequences_path}: counts {n_frames} frames but {sum(d.count for d, _ in written)} were kept")
    for shard, (listed, expected) in enumerate(written):
        if in_table[shard] != listed:
            raise InputError(f"{frames_path}: shard {shard} lists other frames than were written; run prepare again")
        for path in (shard_fasta(files.shards, shard, "fna"), shard_fasta(files.shards, shard, "faa")):
            found = IDDigest()
            for ids in fasta_ids(path):
                found.update(ids)
            if found != expected:
                _name_the_difference(path, frames_path, shard)


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
