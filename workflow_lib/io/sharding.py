"""Shards sized by the work: frames fill shard 0 up to `shard_tokens` ESM-2 tokens, then shard 1,
and so on, so that an embed job's work follows the setting, never the sample's size. Each shard is a
FASTA pair, `shard_{i}.fna` and `shard_{i}.faa`, with the same IDs in the same order; the shards
table (SHARDS columns) lists every shard with its frames and ESM-2 tokens. A shard is read a
block of records at a time (ShardIndex): by the tokenize job, and by the embed job's loader workers.

Frames are placed by content: a frame's bin is the CRC-32 of its protein modulo BINS, each shard is
written in bin order (frames of a bin in the order the frames table lists them), and the bins file
counts each shard's frames, tokens and bytes per bin. A pooled shard is a range of bins of every
shard of its generation (plan.py), so that copies of a frame meet in one embed job whichever
records, shards or samples they come from (equal nucleotide frames have equal proteins)."""

import hashlib
import operator
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workflow_lib.cli.errors import InputError
from workflow_lib.io.outputs import atomic_open

# the shards table of a sample: a row per shard, in shard order
SHARDS = ("shard", "frames", "tokens")
# Records per block: the partly filled last batch of a block costs little, a worker's first batch comes soon.
BLOCK = 8192
PIECE = 4 << 20  # bytes of a shard read at a time while indexing it
BINS = 4096  # a pooled shard is at least a bin: 1/4096 of its generation's distinct tokens
# the bins file's counts, each [shards, BINS]; and a sketch a shard, `sketch_{shard}`
BIN_COUNTS = ("frames", "tokens", "fna_bytes", "faa_bytes")
# Of each bin, the SKETCH smallest distinct hashes of its proteins (the CRC-32's 20 bits above the
# bin's), each with its protein's tokens: a uniform sample of the bin's distinct proteins that
# merges across shards and samples, from which the plan finds their number (exact below SKETCH,
# else within about 1/sqrt(SKETCH)) and tokens in bounded memory (plan.distinct_tokens). Stored
# as bin << 51 | (hash + 1) << 30 | tokens.
SKETCH = 64


def protein_crcs(proteins: list[bytes]) -> np.ndarray:
    """Each frame's CRC-32 of its protein: its bin is the CRC modulo BINS."""
    return np.fromiter(map(zlib.crc32, proteins), dtype=np.int64, count=len(proteins))


def sketch(crcs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """A shard's sketch (SKETCH) of its frames' CRCs and tokens (under 2^30 a frame): each bin's
    smallest distinct hashes, in rising bin and hash order."""
    packed = np.sort(((crcs % BINS) << 21 | ((crcs >> 12) + 1)) << 30 | tokens)
    keys = packed >> 30
    first = np.diff(keys, prepend=-1) != 0  # of each hash (a hash two proteins share: the fewer tokens)
    packed, of_bin = packed[first], keys[first] >> 21
    return packed[np.arange(of_bin.size) - np.searchsorted(of_bin, of_bin) < SKETCH]


def write_bins(path: str | Path, counts: dict[str, np.ndarray], sketches: list[np.ndarray]) -> None:
    with atomic_open(path, "wb") as handle, zipfile.ZipFile(handle, "w") as archive:
        arrays = {name: counts[name] for name in BIN_COUNTS} | {f"sketch_{i}": s for i, s in enumerate(sketches)}
        for name, values in arrays.items():
            member = zipfile.ZipInfo(f"{name}.npy")
            # hashes barely compress, and zlib would be most of the write's time: stored as they are
            member.compress_type = zipfile.ZIP_STORED if name.startswith("sketch") else zipfile.ZIP_DEFLATED
            with archive.open(member, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asarray(values))


def read_bins(path: str | Path) -> dict[str, np.ndarray]:
    """A sample's bins file: each BIN_COUNTS array, [shards, BINS]."""
    try:
        with np.load(path) as data:
            return {name: data[name] for name in BIN_COUNTS}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise _not_bins(path, error) from None


def sketches(path: str | Path) -> Iterator[np.ndarray]:
    """Each shard's sketch of a bins file, [BINS, SKETCH] of (hash + 1) << 30 | tokens in rising
    order, then 0s: one shard's in memory at a time."""
    try:
        with np.load(path) as data:
            for shard in range(len(data["frames"])):
                values = data[f"sketch_{shard}"]
                of_bin = values >> 51
                dense = np.zeros((BINS, SKETCH), np.int64)
                dense[of_bin, np.arange(values.size) - np.searchsorted(of_bin, of_bin)] = values & (1 << 51) - 1
                yield dense
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise _not_bins(path, error) from None


def _not_bins(path: str | Path, error: Exception) -> InputError:
    return InputError(f"{path}: not a bins file written by prepare ({error}); delete it and run again")


def shard_fasta(directory: str | Path, shard: int, suffix: str) -> Path:
    """A shard's nucleotide (`fna`) or protein (`faa`) FASTA in prepare's shards directory."""
    return Path(directory) / f"shard_{shard}.{suffix}"


def pool_shards(pieces: list[tuple[str | Path, str | Path, int, int, int]], fna: str | Path, faa: str | Path) -> int:
    """A pooled shard's FASTA pair: of each (shards directory, bins file, shard, first bin, end bin)
    piece in order, the shard's records of those bins; the bytes written."""
    spans, counts, read = {}, {}, None  # per piece and suffix: where its bytes lie in its shard
    for i, (_, bins_path, shard, first, end) in enumerate(pieces):
        if bins_path != read:  # a sample's pieces come together: its bins file read once, one held
            counts, read = read_bins(bins_path), bins_path
        for suffix in ("fna", "faa"):
            sizes = counts[f"{suffix}_bytes"][shard]
            spans[i, suffix] = int(sizes[:first].sum()), int(sizes[first:end].sum())
    written = 0
    for suffix, output in (("fna", fna), ("faa", faa)):
        with atomic_open(output, "wb") as out:
            for i, (directory, _, shard, _, _) in enumerate(pieces):
                start, size = spans[i, suffix]
                path = shard_fasta(directory, shard, suffix)
                with open(path, "rb") as piece:
                    piece.seek(start)
                    while size > 0:
                        data = piece.read(min(size, 1 << 20))
                        if not data:
                            raise _not_a_shard(path)
                        out.write(data)
                        size -= len(data)
            written += out.tell()
    return written


@dataclass(frozen=True)
class ShardIndex:
    """A shard FASTA written by prepare (a header line, a sequence line per record): where each
    block of BLOCK records starts (all a loader worker is given), its record count, and its SHA-256
    (an interrupted job's commits belong to this shard only). It is the sequence of the record IDs,
    read from the file a block at a time when asked for."""

    path: Path
    block_size: int
    offsets: list[int]  # byte offset of record i * block_size, then the file size
    n: int
    sha256: str

    @classmethod
    def read(cls, path: str | Path, planned: int | None = None) -> "ShardIndex":
        """Read in pieces; `planned`: the frames the run's plan gives the shard (else refused)."""
        path, block_size = Path(path), BLOCK
        n, offsets, digest, start = 0, [], hashlib.sha256(), 0  # `start`: where the next line starts
        for piece, lines, first in shard_lines(path):
            digest.update(piece)
            sizes = np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)) + 1
            record_starts = (start + np.cumsum(sizes) - sizes)[first::2]
            offsets += record_starts[-n % block_size :: block_size].tolist()
            n += len(record_starts)
            start += int(sizes.sum())
        if planned is not None and n != planned:
            # a prepare shard lies in the sample's shards directory, which Snakemake makes as a whole
            made = path.parent if path.parent.name == "shards" and path.parent.parent.name == "prepare" else path
            raise InputError(
                f"{path}: {n} frames where the plan has {planned}: cut short or changed since it was made; delete "
                f"{made} and run the workflow again"
            )
        return cls(path, block_size, offsets + [start], n, digest.hexdigest())

    def __len__(self) -> int:
        return self.n

    @property
    def n_blocks(self) -> int:
        return len(self.offsets) - 1

    def _lines(self, b: int) -> list[bytes]:
        """Block b's lines, header then sequence for each record, then an empty one."""
        with open(self.path, "rb") as handle:
            handle.seek(self.offsets[b])
            return handle.read(self.offsets[b + 1] - self.offsets[b]).split(b"\n")

    def read_block(self, b: int) -> list[bytes]:
        """The sequences of block b, read from the file."""
        return self._lines(b)[1::2]

    def block_ids(self, b: int) -> list[str]:
        return [header[1:].decode("utf-8") for header in self._lines(b)[:-1:2]]

    def __getitem__(self, key: int) -> str:
        """The ID of record `key`, read from its block."""
        i = operator.index(key) + (self.n if key < 0 else 0)
        if not 0 <= i < self.n:
            raise IndexError(f"record {key} of a shard of {self.n}")
        return self.block_ids(i // self.block_size)[i % self.block_size]

    def __iter__(self) -> Iterator[str]:
        """The record IDs, read from the file a block at a time: a job holds none."""
        for b in range(self.n_blocks):
            yield from self.block_ids(b)


def shard_lines(path: str | Path) -> Iterator[tuple[bytes, list[bytes], int]]:
    """A shard FASTA read in pieces: each piece, the whole lines it ends, and the index among them of
    the first header line; refused unless every record is a header line and a sequence line."""
    tail, before = b"", 0  # the unfinished line, the lines before it
    with open(path, "rb") as handle:
        while piece := handle.read(PIECE):
            lines = (tail + piece).split(b"\n")
            tail = lines.pop()
            headers = lines[before % 2 :: 2]
            if (b"\n" + b"\n".join(headers)).count(b"\n>") != len(headers):  # each starts with ">"
                raise _not_a_shard(Path(path))
            yield piece, lines, before % 2
            before += len(lines)
    if tail or before % 2:
        raise _not_a_shard(Path(path))


def _not_a_shard(path: Path) -> InputError:
    return InputError(f"{path}: not a shard written by prepare; delete the sample's prepare directory and run again")
