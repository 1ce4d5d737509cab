"""Reading FASTA and FASTQ, plain or gzip/bz2/xz, as a stream of validated batches of records.

Compression is recognised by its magic bytes, not the file name, and undone by xopen (gzip through
ISA-L). Records are parsed a block at a time with bytes operations, not line by line in Python as
Biopython's parsers do, nor by dnaio, which refuses headers that are not ASCII where Biopython (and
so VirNucPro) reads them, and was slower here on plain FASTA. Sequences are upper-cased
(soft-masked bases too, as VirNucPro does), U is read as T, and anything that is not an IUPAC
nucleotide code is an InputError naming the file, the record (number and ID) and what to do.
"""

import itertools
import lzma
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from xopen import xopen

from workflow_lib.cli.errors import InputError

try:  # xopen's gzip, where ISA-L has a build (x86-64, aarch64)
    from isal.isal_zlib import IsalError
except ImportError:
    IsalError = zlib.error

IUPAC_NUCLEOTIDES = b"ACGTUNRYKMSWBDHVacgtunrykmswbdhv"
_UPPER_IUPAC = IUPAC_NUCLEOTIDES[:16]
_WHITESPACE = b" \t\r\n\v\f"
# Every ASCII byte but those that str.split() treats as whitespace (\n is the join separator).
_ASCII_NOT_SPACE = bytes(c for c in range(128) if not chr(c).isspace()) + b"\n"
# Letters that occur in proteins but are no nucleotide code: their presence means a protein file.
_PROTEIN_ONLY = set(b"EFILPQXZJOefilpqxzjo*")
_MAGIC = {b"\x1f\x8b": "gz", b"BZh": "bz2", b"\xfd7zXZ\x00": "xz"}
_ZSTD = b"\x28\xb5\x2f\xfd"
_BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark, which some Windows editors write first
_STREAM_ERRORS = (EOFError, OSError, zlib.error, lzma.LZMAError, IsalError)
_BLOCK = 1 << 20


@dataclass(slots=True)
class Batch:
    """Consecutive records: IDs (first word of the header), full headers, and all sequences
    concatenated in `buf` (upper-case unless read with keep_case) with their lengths."""

    ids: list[bytes]
    headers: list[bytes]
    lengths: np.ndarray
    buf: bytes
    first: int  # 1-based number of the first record in the file
    read_fraction: float = 0.0  # share of the (compressed) input file read so far, for progress
    mates: int = 1  # records per fragment: 2 where a paired sample's mates follow each other (reads.py)

    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths)])


def _open(path: Path):
    """`path` opened for reading bytes, and the same decompressed where its magic bytes say so."""
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise InputError(f"{path}: file not found; check the path in the samples sheet") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory; give a FASTA or FASTQ file") from None
    except OSError as error:
        raise InputError(f"{path}: cannot read the file ({error.strerror})") from None
    if raw.peek(4).startswith(_ZSTD):
        raw.close()
        raise InputError(f"{path}: zstd-compressed, which this workflow cannot read; decompress it or use gzip")
    compression = next((kind for magic, kind in _MAGIC.items() if raw.peek(6).startswith(magic)), None)
    # threads=0: decompressed in this process, reading `raw`, whose position tells the progress
    return raw, xopen(raw, "rb", threads=0, format=compression) if compression else raw


def read_batches(path: str | Path, batch_bases: int = 1_000_000, keep_case: bool = False) -> Iterator[Batch]:
    """Yield the records of a FASTA or FASTQ file in order, in batches of about `batch_bases`."""
    path = Path(path)
    done = bases = 0
    pending: list[tuple[list[bytes], list[bytes]]] = []
    last_id = b""
    try:
        raw, handle = _open(path)
        with raw, handle:
            size = max(path.stat().st_size, 1)
            blocks = iter(lambda: handle.read(_BLOCK), b"")
            first = next((block for block in map(bytes.lstrip, blocks) if block), b"").removeprefix(_BOM).lstrip()
            if not first:
                raise InputError(
                    f"{path}: no sequences: the file is empty or holds only blank lines; "
                    "give a FASTA or FASTQ file with nucleotide sequences"
                )
            if first[:1] not in (b">", b"@"):
                kind = "binary data" if not _is_text(first[:4096]) else "text"
                raise InputError(
                    f"{path}: starts with {kind}, not a FASTA ('>') or FASTQ ('@') record; "
                    "give a nucleotide FASTA or FASTQ file"
                )
            split = _split_fasta if first[:1] == b">" else _split_fastq
            pending_bases = 0
            try:  # None after the last piece: the rest is a batch
                for piece in itertools.chain(split(itertools.chain([first], blocks)), [None]):
                    if piece is not None:
                        pending.append(piece)
                        pending_bases += sum(map(len, piece[1]))
                    if pending and (piece is None or pending_bases >= batch_bases):
                        fraction = 1.0 if piece is None else raw.tell() / size
                        batch = _batch(pending, done + 1, path, fraction, keep_case)
                        done, bases, last_id = done + len(batch.ids), bases + len(batch.buf), batch.ids[-1]
                        pending, pending_bases = [], 0
                        yield batch
            except _RecordError as error:
                index, message = error.args
                number = done + sum(len(h) for h, _ in pending) + index + 1
                raise InputError(f"{path}: record {number} {message}") from None
    except _STREAM_ERRORS as error:
        parsed = [h for headers, _ in pending for h in headers]
        last = _first_word(parsed[-1]) if parsed else last_id.decode()
        where = f" after record {done + len(parsed)} '{last}'" if last else ""
        raise InputError(
            f"{path}: the file is truncated or corrupt{where} ({error}); re-download or re-compress it"
        ) from None
    if not bases:
        raise InputError(
            f"{path}: no sequences: every record ({done} in all) is empty; "
            "give a FASTA or FASTQ file with nucleotide sequences"
        )


def _is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start > len(data) - 4  # a character cut at the end of the sample
    return True


def _split_fasta(blocks: Iterator[bytes]) -> Iterator[tuple[list[bytes], list[bytes]]]:
    """Yield (headers, sequences) for the complete records of each block. A record longer than a
    block is collected block by block and joined once: linear time on chromosome-sized records."""
    rest = b""  # raw text of the unfinished last record, from its '>'
    header, pieces = None, []  # a record longer than a block: its header and sequence so far
    for block in blocks:
        data = rest + block
        if header is not None:
            end = data.find(b"\n>")
            if end < 0:  # the last byte waits: it may be the '\n' of a '\n>' across blocks
                pieces.append(data[:-1].translate(None, _WHITESPACE))
                rest = data[-1:]
                continue
            pieces.append(data[:end].translate(None, _WHITESPACE))
            pieces = [b"".join(pieces)]  # the pieces go before the record is used
            yield [header], pieces
            header, pieces, data = None, [], data[end + 1 :]
        found = data.rfind(b"\n>")
        if found >= 0:
            yield _fasta_records(data[: found + 1])
            data = data[found + 1 :]
        newline = data.find(b"\n")
        if len(data) > _BLOCK and newline >= 0:
            header, pieces, rest = (
                data[1:newline].rstrip(),
                [data[newline + 1 : -1].translate(None, _WHITESPACE)],
                data[-1:],
            )
        else:
            rest = data
    if header is not None:
        pieces = [b"".join([*pieces, rest.translate(None, _WHITESPACE)])]
        yield [header], pieces
    elif rest.strip():
        yield _fasta_records(rest)


def _fasta_records(text: bytes) -> tuple[list[bytes], list[bytes]]:
    # Fast path: every record is one header line and one sequence line (reads), so a single
    # split gives headers and sequences, checked by counting the header lines.
    if b"\r" not in text:
        lines = text.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        headers = lines[0::2]
        # No '>' other than the headers' own (bytes.count of one byte is fast; of two is not).
        if len(lines) % 2 == 0 and text.count(b">") == len(headers) and all(h[:1] == b">" for h in headers):
            return [h[1:] for h in headers], lines[1::2]
    parts = text[1:].split(b"\n>")
    headers, seqs = [], []
    for part in parts:
        header, _, seq = part.partition(b"\n")
        headers.append(header.rstrip())
        seq = seq.rstrip()
        # Deleting bytes with translate() is slow; only multi-line records need it. Blanks
        # inside a line are removed in _batch's slow path, when validation trips on them.
        seqs.append(seq.translate(None, _WHITESPACE) if b"\n" in seq else seq)
    return headers, seqs


def _split_fastq(blocks: Iterator[bytes]) -> Iterator[tuple[list[bytes], list[bytes]]]:
    rest = b""
    for block in blocks:
        data = rest + block
        lines = data.split(b"\n")
        end = len(lines) - 1  # the last element is an unfinished line
        while end and not lines[end - 1].strip():  # blank lines wait: they may end the file
            end -= 1
        complete = end // 4 * 4
        rest = b"\n".join(lines[complete:])
        if complete:
            yield _fastq_records(lines[:complete])
    lines = rest.split(b"\n")
    # Drop blank lines at the end of the file, but not the empty lines of an empty last read.
    while lines and not lines[-1].strip() and (len(lines) % 4 or lines[-4][:1] != b"@"):
        lines.pop()
    if lines:
        if len(lines) % 4:
            raise _RecordError(
                len(lines) // 4, f"is incomplete ({len(lines) % 4} of 4 lines); the file is truncated: re-download it"
            )
        yield _fastq_records(lines)


def _fastq_records(lines: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    headers, seqs, plus, quals = lines[0::4], lines[1::4], lines[2::4], lines[3::4]
    seqs = [s.rstrip() for s in seqs]
    bad = next((i for i, (h, p) in enumerate(zip(headers, plus)) if h[:1] != b"@" or p[:1] != b"+"), None)
    if bad is not None:
        if not headers[bad].strip():  # blank lines cannot be dropped: an empty read's lines are blank
            raise _RecordError(bad, "follows a blank line; FASTQ has no blank lines between records: remove it")
        if bad and len(seqs[bad - 1]) != len(quals[bad - 1].rstrip()):
            bad -= 1  # qualities wrapped over two lines: they shifted the next record's lines
        raise _RecordError(
            bad,
            "is not a 4-line FASTQ record ('@' header, sequence, '+', qualities); "
            "multi-line FASTQ is not supported: reformat the file",
        )
    for i, (s, q) in enumerate(zip(seqs, quals)):
        if len(s) != len(q.rstrip()):
            raise _RecordError(
                i,
                f"'{_first_word(headers[i][1:])}' has {len(s)} bases but {len(q.rstrip())} quality values; "
                "the file is truncated or corrupt: re-download it",
            )
    return [h[1:].rstrip() for h in headers], seqs


class _RecordError(Exception):
    """(index, message): a problem with the index-th record of a parsed piece; read_batches names the file."""


def _batch(
    pieces: list[tuple[list[bytes], list[bytes]]], first: int, path: Path, read_fraction: float, keep_case: bool
) -> Batch:
    headers = [h for piece_headers, _ in pieces for h in piece_headers]
    seqs = [s for _, piece_seqs in pieces for s in piece_seqs]
    joined = b"\n".join(headers)
    try:
        joined.decode("utf-8")
    except UnicodeDecodeError as error:
        index = joined.count(b"\n", 0, error.start)  # the header that holds the bad byte
        raise InputError(
            f"{path}: record {first + index} has a header that is not UTF-8 text; fix its encoding"
        ) from None
    if b"\r" in joined:
        index = next(i for i, h in enumerate(headers) if b"\r" in h)
        raise InputError(
            f"{path}: record {first + index} has a carriage return inside its header: the file has "
            "old Mac (CR-only) line endings; convert them, e.g. with tr '\\r' '\\n'"
        )
    # The ID is the header's first word, split on any whitespace as Biopython (and so VirNucPro)
    # does; plain ASCII headers without blanks, the common case, are their own ID.
    if joined.isascii() and not joined.translate(None, _ASCII_NOT_SPACE):
        ids = headers
    else:
        ids = [_first_word(h).encode() for h in headers]
    if not all(ids):
        index = ids.index(b"")
        raise InputError(f"{path}: record {first + index} has an empty header; give every record an ID")
    buf = b"".join(seqs)
    # One pass in the common case (clean upper-case sequences); soft-masked or oddly spaced
    # input takes the slower repairs before anything is called invalid.
    if buf.translate(None, _UPPER_IUPAC):
        if buf.translate(None, IUPAC_NUCLEOTIDES):
            seqs = [s.translate(None, _WHITESPACE) for s in seqs]
            buf = b"".join(seqs)
        if buf.translate(None, IUPAC_NUCLEOTIDES):
            index = next(i for i, s in enumerate(seqs) if s.translate(None, IUPAC_NUCLEOTIDES))
            raise InputError(f"{path}: record {first + index} '{ids[index].decode()}' {_describe(seqs[index])}")
        if not keep_case:
            buf = buf.upper()
    if not keep_case and b"U" in buf:  # RNA: read as the DNA the models know (VirNucPro would drop its codons)
        buf = buf.replace(b"U", b"T")
    return Batch(ids, headers, np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs)), buf, first, read_fraction)


def _first_word(header: bytes) -> str:
    return (header.decode(errors="replace").split(None, 1) or [""])[0]


def _describe(seq: bytes) -> str:
    found = sorted(set(seq.translate(None, IUPAC_NUCLEOTIDES)))
    shown = ", ".join(repr(chr(c)) if 32 <= c < 127 else f"byte 0x{c:02x}" for c in found[:6])
    if _PROTEIN_ONLY.intersection(found) and all(chr(c).isalpha() or c == 42 for c in found):
        return f"looks like a protein sequence (contains {shown}); give nucleotide sequences"
    return f"contains characters that are no IUPAC nucleotide code ({shown}); fix or remove the record"


def read_records(path: str | Path) -> Iterator[tuple[str, str, bytes]]:
    """Yield (id, header, sequence) for every record, one at a time (tests, small tools)."""
    for batch in read_batches(path):
        offsets = batch.offsets()
        for i, (record_id, header) in enumerate(zip(batch.ids, batch.headers)):
            yield record_id.decode(), header.decode(), batch.buf[offsets[i] : offsets[i + 1]]
