"""A sample's reads as the samples sheet gives them: its files read one after the other, and for a
paired-end sample its fragments, read in lockstep from the two mates' files (or one interleaved file).

A paired batch holds both mates of each fragment as consecutive records (`Batch.mates` 2), with the
fragment's ID (mate 1's less a `/1` suffix; mate 2's, less `/2`, must be the same) and the mates'
own headers. A mate that does not pair up is an InputError naming the file and the record.
"""

import argparse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workflow_lib.cli.errors import InputError
from workflow_lib.io.seqio import Batch, read_batches


@dataclass(frozen=True)
class SampleReads:
    """A sample's files in the sheet's order; `mates`: the mate 2 file of each (path2)."""

    paths: tuple[Path, ...]
    mates: tuple[Path, ...] = ()
    interleaved: bool = False

    @property
    def paired(self) -> bool:
        return bool(self.mates) or self.interleaved

    def files(self) -> list[Path]:
        return [*self.paths, *self.mates]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--input", required=True, nargs="+", help="FASTA or FASTQ, plain or .gz/.bz2/.xz")
        parser.add_argument("--mates", nargs="+", default=[], help="mate 2 of each --input file (paired-end)")
        parser.add_argument(
            "--interleaved", action="store_true", help="each --input file holds mate 1 and mate 2 of each fragment"
        )

    @classmethod
    def from_arguments(cls, args: argparse.Namespace) -> "SampleReads":
        if args.mates and (len(args.mates) != len(args.input) or args.interleaved):
            raise InputError("--mates: give one mate file for each --input file, and no --interleaved")
        return cls(tuple(map(Path, args.input)), tuple(map(Path, args.mates)), args.interleaved)


def read_sample(reads: SampleReads, batch_bases: int = 1_000_000, keep_case: bool = False) -> Iterator[Batch]:
    """The sample's records (a paired sample's fragments, both mates) in batches, file after file."""
    for i, path in enumerate(reads.paths):
        if reads.mates:
            batches = _pairs(path, reads.mates[i], batch_bases, keep_case)
        elif reads.interleaved:
            batches = _interleaved(path, batch_bases, keep_case)
        else:
            batches = read_batches(path, batch_bases, keep_case)
        for batch in batches:
            batch.read_fraction = (i + batch.read_fraction) / len(reads.paths)
            yield batch


def check_first_fragment(reads: SampleReads) -> None:
    """Fail as prepare would where the first fragment of a file's mates does not pair up (a start-up check)."""
    if reads.paired:
        for i, path in enumerate(reads.paths):  # batches of a base: the first fragment (with any empty reads before it)
            next(read_sample(SampleReads((path,), reads.mates[i : i + 1], reads.interleaved), 1), None)


def _records(batch: Batch) -> list[list[bytes]]:
    """A batch's IDs, headers and sequences."""
    bounds = batch.offsets().tolist()
    return [batch.ids, batch.headers, [batch.buf[a:b] for a, b in zip(bounds[:-1], bounds[1:])]]


_PAIRING = "(IDs pair up less a /1 and /2 suffix)"


def _pairs(path: Path, mate_path: Path, batch_bases: int, keep_case: bool) -> Iterator[Batch]:
    """The fragments of a pair of mate files, read in lockstep."""
    mates = read_batches(mate_path, batch_bases, keep_case)
    held: list[list[bytes]] = [[], [], []]  # mate 2's records read, not yet paired
    paired = 0
    for batch in read_batches(path, batch_bases, keep_case):
        n = len(batch.ids)
        while len(held[0]) < n:
            more = next(mates, None)
            if more is None:
                _uneven(path, batch.first + len(held[0]), batch.ids[len(held[0])], mate_path)
            held = [h + m for h, m in zip(held, _records(more))]
        mate1, mate2 = _records(batch), [h[:n] for h in held]
        fragments, i = _fragments(mate1[0], mate2[0])
        if i is not None:
            raise InputError(
                f"{mate_path}: record {batch.first + i} '{mate2[0][i].decode()}' is no mate of record "
                f"{batch.first + i} '{mate1[0][i].decode()}' of {path} {_PAIRING}; give the mates in the same order"
            )
        yield _fragment_batch(fragments, mate1, mate2, batch.first, batch.read_fraction)
        held, paired = [h[n:] for h in held], paired + n
    left = held[0] or next((more.ids for more in mates), [])
    if left:
        _uneven(mate_path, paired + 1, left[0], path)


def _uneven(longer: Path, number: int, record_id: bytes, shorter: Path) -> None:
    raise InputError(
        f"{longer}: record {number} '{record_id.decode()}' has no mate: {shorter} ends after record "
        f"{number - 1}; give the two mates' files whole, with the same reads in the same order"
    )


def _fragments(mate1: list[bytes], mate2: list[bytes]) -> tuple[list[bytes], int | None]:
    """The fragments' IDs (mate 1's less a /1 suffix), and the first mate 2 whose ID less /2 is not its
    fragment's (None: all pair up)."""
    fragments, others = [i.removesuffix(b"/1") for i in mate1], [i.removesuffix(b"/2") for i in mate2]
    if fragments == others:
        return fragments, None
    return fragments, next(i for i, (a, b) in enumerate(zip(fragments, others)) if a != b)


def _interleaved(path: Path, batch_bases: int, keep_case: bool) -> Iterator[Batch]:
    """The fragments of an interleaved file: records 1 and 2 are mates, 3 and 4, and so on."""
    held: list[list[bytes]] = [[], [], []]  # a mate 1 whose mate 2 is in the next batch
    for batch in read_batches(path, batch_bases, keep_case):
        records = [h + r for h, r in zip(held, _records(batch))]
        first = batch.first - len(held[0])  # the number of the first of `records` in the file
        n = len(records[0]) // 2 * 2
        held = [r[n:] for r in records]
        if not n:
            continue
        fragments, i = _fragments(records[0][0:n:2], records[0][1:n:2])
        if i is not None:
            raise InputError(
                f"{path}: record {first + 2 * i + 1} '{records[0][2 * i + 1].decode()}' is no mate of record "
                f"{first + 2 * i} '{records[0][2 * i].decode()}' {_PAIRING}; an interleaved file holds mate 1 "
                "and mate 2 of each fragment one after the other"
            )
        mate1, mate2 = [r[0:n:2] for r in records], [r[1:n:2] for r in records]
        yield _fragment_batch(fragments, mate1, mate2, (first + 1) // 2, batch.read_fraction)
    if held[0]:
        raise InputError(
            f"{path}: record {first + n} '{held[0][0].decode()}' has no mate: the file ends; an interleaved "
            "file holds mate 1 and mate 2 of each fragment one after the other"
        )


def _fragment_batch(fragments: list[bytes], mate1: list, mate2: list, first: int, read_fraction: float) -> Batch:
    """One batch of the fragments, each mate 1 then mate 2 (_records of each), under the fragment's ID."""
    ids, headers, seqs = ([None] * 2 * len(fragments) for _ in range(3))
    ids[0::2] = ids[1::2] = fragments
    headers[0::2], headers[1::2] = mate1[1], mate2[1]
    seqs[0::2], seqs[1::2] = mate1[2], mate2[2]
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    return Batch(ids, headers, lengths, b"".join(seqs), first, read_fraction, mates=2)
