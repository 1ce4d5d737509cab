"""A sample's reads as the samples sheet gives them: its files read one after the other, and for a
paired-end sample its fragments, read in lockstep from the two mates' files (or one interleaved file).

A paired batch holds both mates of each fragment as consecutive records (`Batch.mates` 2), with the
fragment's ID (mate 1's less a `/1` suffix; mate 2's, less `/2`, must be the same) and the mates'
own headers. A mate that does not pair up is an InputError naming the file and the record.
"""

import argparse
from collections.abc import Iterator
from dataclasses import dataclass, replace
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
    for i, path in enumerate(reads.paths):
        if reads.mates:
            mate1, mate2 = (next(read_batches(p, 1)) for p in (path, reads.mates[i]))
            _paired(_take(mate1, 1)[0], _take(mate2, 1)[0], path, reads.mates[i])
        elif reads.interleaved:
            next(_interleaved(path, 1, False), None)


def _take(batch: Batch, n: int) -> tuple[Batch, Batch]:
    """The batch's first `n` records and the rest."""
    cut = int(batch.lengths[:n].sum())
    head = replace(batch, ids=batch.ids[:n], headers=batch.headers[:n], lengths=batch.lengths[:n], buf=batch.buf[:cut])
    rest = replace(
        batch,
        ids=batch.ids[n:],
        headers=batch.headers[n:],
        lengths=batch.lengths[n:],
        buf=batch.buf[cut:],
        first=batch.first + n,
    )
    return head, rest


def _join(first: Batch, second: Batch) -> Batch:
    """Consecutive records of one file in one batch."""
    return replace(
        second,
        ids=first.ids + second.ids,
        headers=first.headers + second.headers,
        lengths=np.concatenate([first.lengths, second.lengths]),
        buf=first.buf + second.buf,
        first=first.first,
    )


def _pairs(path: Path, mate_path: Path, batch_bases: int, keep_case: bool) -> Iterator[Batch]:
    """The fragments of a pair of mate files, read in lockstep."""
    mates = read_batches(mate_path, batch_bases, keep_case)
    held = None  # mate 2's records read, not yet paired
    for batch in read_batches(path, batch_bases, keep_case):
        while held is None or len(held.ids) < len(batch.ids):
            more = next(mates, None)
            if more is None:
                _uneven(path, batch, len(held.ids) if held else 0, mate_path)
            held = more if held is None else _join(held, more)
        mate2, held = _take(held, len(batch.ids))
        yield _paired(batch, mate2, path, mate_path)
    left = held if held is not None and held.ids else next(mates, None)
    if left is not None:
        _uneven(mate_path, left, 0, path)


def _uneven(longer: Path, batch: Batch, index: int, shorter: Path) -> None:
    number = batch.first + index
    raise InputError(
        f"{longer}: record {number} '{batch.ids[index].decode()}' has no mate: {shorter} ends after record "
        f"{number - 1}; give the two mates' files whole, with the same reads in the same order"
    )


def _fragments(mate1: list[bytes], mate2: list[bytes]) -> tuple[list[bytes], int | None]:
    """The fragments' IDs (mate 1's less a /1 suffix), and the first mate 2 whose ID less /2 is not its
    fragment's (None: all pair up)."""
    fragments, others = [i.removesuffix(b"/1") for i in mate1], [i.removesuffix(b"/2") for i in mate2]
    if fragments == others:
        return fragments, None
    return fragments, next(i for i, (a, b) in enumerate(zip(fragments, others)) if a != b)


_PAIRING = "(IDs pair up less a /1 and /2 suffix)"


def _paired(mate1: Batch, mate2: Batch, path1: Path, path2: Path) -> Batch:
    """One batch of the fragments of two batches of as many mates, each mate 1 then mate 2."""
    fragments, i = _fragments(mate1.ids, mate2.ids)
    if i is not None:
        raise InputError(
            f"{path2}: record {mate2.first + i} '{mate2.ids[i].decode()}' is no mate of record {mate1.first + i} "
            f"'{mate1.ids[i].decode()}' of {path1} {_PAIRING}; give the mates in the same order"
        )
    ids, headers, seqs = ([None] * 2 * len(fragments) for _ in range(3))
    ids[0::2] = ids[1::2] = fragments
    headers[0::2], headers[1::2] = mate1.headers, mate2.headers
    seqs[0::2], seqs[1::2] = _sequences(mate1), _sequences(mate2)
    lengths = np.empty(2 * len(fragments), dtype=np.int64)
    lengths[0::2], lengths[1::2] = mate1.lengths, mate2.lengths
    return Batch(ids, headers, lengths, b"".join(seqs), mate1.first, mate1.read_fraction, mates=2)


def _sequences(batch: Batch) -> list[bytes]:
    bounds = batch.offsets().tolist()
    return [batch.buf[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _interleaved(path: Path, batch_bases: int, keep_case: bool) -> Iterator[Batch]:
    """The fragments of an interleaved file: records 1 and 2 are mates, 3 and 4, and so on."""
    held = None  # a mate 1 whose mate 2 is in the next batch
    for batch in read_batches(path, batch_bases, keep_case):
        batch = batch if held is None else _join(held, batch)
        batch, held = _take(batch, len(batch.ids) // 2 * 2)
        if batch.ids:
            yield _interleaved_batch(batch, path)
    if held is not None and held.ids:
        raise InputError(
            f"{path}: record {held.first} '{held.ids[0].decode()}' has no mate: the file ends; an interleaved "
            "file holds mate 1 and mate 2 of each fragment one after the other"
        )


def _interleaved_batch(batch: Batch, path: Path) -> Batch:
    fragments, i = _fragments(batch.ids[0::2], batch.ids[1::2])
    if i is not None:
        raise InputError(
            f"{path}: record {batch.first + 2 * i + 1} '{batch.ids[2 * i + 1].decode()}' is no mate of record "
            f"{batch.first + 2 * i} '{batch.ids[2 * i].decode()}' {_PAIRING}; an interleaved file holds mate 1 "
            "and mate 2 of each fragment one after the other"
        )
    ids = [None] * len(batch.ids)
    ids[0::2] = ids[1::2] = fragments
    return replace(batch, ids=ids, first=(batch.first + 1) // 2, mates=2)
