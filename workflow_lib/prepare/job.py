"""The prepare stage: validate, chunk, translate in six frames, write shards of at most
`shard_tokens` ESM-2 tokens, each in bin order (sharding.py), the shards table, the bins file, the
frames table and the sequences table; all renamed into place at the end, then read back and
reconciled (reconcile.py).

A paired sample's record is the fragment: its mates are chunked and translated each on its own, and
their chunks numbered and placed along mate 1 then mate 2; its sequences-table row sums both mates
and gives their lengths (tables.MATE_LENGTHS); its status is `ok` where a mate's is.
"""

import contextlib
import itertools
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workflow_lib.cli.errors import InputError
from workflow_lib.cli.progress import Progress
from workflow_lib.cli.settings import PrepareSettings
from workflow_lib.io.outputs import atomic_dir, atomic_open
from workflow_lib.io.reads import SampleReads, read_sample
from workflow_lib.io.seqio import Batch
from workflow_lib.io.sharding import BIN_COUNTS, BINS, SHARDS, protein_crcs, shard_fasta, sketch, write_bins
from workflow_lib.io.tables import MATE_LENGTHS, PREPARED_FRAMES, PREPARED_SEQUENCES
from workflow_lib.prepare.chunking import chunk_bounds
from workflow_lib.prepare.reconcile import IDDigest, check_prepared
from workflow_lib.prepare.translation import FRAME_NAMES, base_codes, six_frames
from workflow_lib.prepare.unique_ids import IDHashes, check_unique_ids

# Record status: only `ok` records are chunked; the others are reported, never silently dropped.
STATUS = (b"ok", b"empty", b"too_short", b"too_ambiguous")
# Records are translated in batches of about this many bases: large enough to vectorise well,
# small enough for the temporary arrays to stay in cache.
BATCH_BASES = 1_000_000
_FRAME_IDS = [name.encode() for name in FRAME_NAMES]

log = logging.getLogger("workflow")


@dataclass(frozen=True)
class PreparedFiles:
    """Where the prepare stage writes."""

    shards: Path
    shard_table: Path
    bins: Path
    frames: Path
    sequences: Path


def prepare(reads: SampleReads, files: PreparedFiles, settings: PrepareSettings) -> dict:
    """Run the prepare stage on a sample's reads into `files`; return the counts."""
    with contextlib.ExitStack() as stack:
        writer = _Writer(stack, files, settings, reads.paired)
        id_hashes = stack.enter_context(IDHashes(files.frames.parent))
        progress = Progress(log, "records", interval=settings.progress_seconds)
        for batch in read_sample(reads, BATCH_BASES):
            id_hashes.add(batch.ids[:: batch.mates])
            writer.write_batch(batch)
            progress.update(writer.counts["records"], f"{writer.counts['frames']:,} frames kept", batch.read_fraction)
        check_unique_ids(reads, id_hashes.repeated())
        writer.finish(files.bins)
        rows = list(zip(itertools.count(), writer.shard_frames, writer.shard_tokens))
        with atomic_open(files.shard_table) as table:
            table.write("\t".join(SHARDS) + "\n" + "".join("%d\t%d\t%d\n" % row for row in rows))
        counts = dict(writer.counts, shards=len(rows), shard_tokens=writer.shard_tokens)
        log.info(progress.line(counts["records"], f"{counts['chunks']:,} chunks, {counts['frames']:,} frames kept"))
    try:
        check_prepared(files, writer.digests, counts["records"])
    except InputError:
        shutil.rmtree(files.shards, ignore_errors=True)
        for path in (files.shard_table, files.bins, files.frames, files.sequences):
            path.unlink(missing_ok=True)
        raise
    log.info(
        f"reconciled: {counts['records']} records in {files.sequences.name}, {counts['frames']} frames once each in "
        f"{files.frames.name} and {counts['shards']} shards"
    )
    if counts["shorter_than_chunk"] > writer.mates_read / 2:
        where = " ".join(map(str, reads.files()))
        log.warning("%s: %s", where, short_records_advice(writer.short_lengths, writer.mates_read))
    return counts


def short_records_advice(short_lengths: np.ndarray, records: int) -> str:
    """The warning for inputs mostly shorter than a chunk. `short_lengths[n]`: the records of n bp."""
    chunk_length, short = short_lengths.size, int(short_lengths.sum())
    cumulative = np.cumsum(short_lengths)
    tenth, median = (int(np.searchsorted(cumulative, q * short)) for q in (0.1, 0.5))
    advice = (
        "chunk_length 300 with VirNucPro's 300 bp classifier fits them better"
        if chunk_length > 300 and median >= 300
        else f"no published classifier is made for chunks this short: train one at chunk_length {median} (the "
        "train target), or read their scores with care"
    )
    return (
        f"{short:,} of {records:,} records are shorter than chunk_length {chunk_length} (median {median} bp, 10th "
        f"percentile {tenth} bp); as in VirNucPro, each is scored as one chunk of its own length, shorter than the "
        f"chunks the classifier learned from, so their scores are less reliable; {advice}"
    )


class _Writer:
    """The outputs being written: the tables, and the shards' FASTA pairs, filled in turn with
    frames up to `shard_tokens` tokens (a larger frame alone), one shard held at a time and written
    in bin order once full, with a digest of each shard's frame IDs (in that order) to reconcile
    the files."""

    def __init__(self, stack: contextlib.ExitStack, files: PreparedFiles, policy: PrepareSettings, paired: bool):
        self.directory = stack.enter_context(atomic_dir(files.shards))
        self.frames_table = stack.enter_context(atomic_open(files.frames, "wb"))
        self.sequences_table = stack.enter_context(atomic_open(files.sequences, "wb"))
        self.frames_table.write(("\t".join(PREPARED_FRAMES) + "\n").encode())
        columns = PREPARED_SEQUENCES + (MATE_LENGTHS if paired else ())
        self.sequences_table.write(("\t".join(columns) + "\n").encode())
        self.policy, self.paired = policy, paired
        self.shard_frames, self.shard_tokens, self.digests, self.bin_counts = [0], [0], [], []
        self.held = _HeldShard()  # a sample without a frame has one shard, empty
        self.mates_read = 0  # records read: a paired sample's mates one by one
        self.counts = {"records": 0, "chunks": 0, "frames": 0, "shorter_than_chunk": 0}
        self.short_lengths = np.zeros(policy.chunk_length, dtype=np.int64)  # records by length, below a chunk

    def write_batch(self, batch: Batch) -> None:
        codes = base_codes(batch.buf)
        non_acgt, status = self._status(batch, codes)
        usable = np.where(status == STATUS.index(b"ok"), batch.lengths, 0)  # records that are not ok get no chunk
        record_of_chunk, starts, ends = chunk_bounds(usable, self.policy.chunk_length)
        offsets = batch.offsets()
        # a fragment's chunks are numbered, and placed, along its mates in turn
        row_of_chunk = record_of_chunk // batch.mates
        along = offsets[record_of_chunk] - offsets[row_of_chunk * batch.mates]
        chunk_number = np.arange(row_of_chunk.size) - np.searchsorted(row_of_chunk, row_of_chunk) + 1
        ids = batch.ids[:: batch.mates]
        chunk_of = (ids, row_of_chunk, chunk_number, starts + along, ends + along)
        starts, ends = starts + offsets[record_of_chunk], ends + offsets[record_of_chunk]
        n_frames = np.zeros(len(ids), dtype=np.int64)
        # six_frames over windows of about BATCH_BASES bases of chunks, however long a record is
        per_window = max(1, BATCH_BASES // self.policy.chunk_length)
        for lo in range(0, starts.size, per_window):
            hi = lo + per_window
            base, top = int(starts[lo]), int(ends[lo:hi].max())
            chunk, frame, proteins, nucleotides = six_frames(
                batch.buf[base:top],
                starts[lo:hi] - base,
                ends[lo:hi] - base,
                self.policy.ambiguous_codons,
                (codes[0][base:top], codes[1]),
            )
            chunk += lo  # the window's chunks numbered in the batch
            self._write_frames(chunk, frame, proteins, nucleotides, chunk_of)
            n_frames += np.bincount(row_of_chunk[chunk], minlength=len(ids))

        lengths = batch.lengths.reshape(-1, batch.mates)
        ambiguous = non_acgt.reshape(-1, batch.mates).sum(axis=1) / np.maximum(lengths.sum(axis=1), 1)
        n_chunks = np.bincount(row_of_chunk, minlength=len(ids))
        rows = [ids, lengths.sum(axis=1).tolist(), n_chunks.tolist(), n_frames.tolist(), ambiguous.tolist()]
        rows.append([STATUS[i] for i in status.reshape(-1, batch.mates).min(axis=1).tolist()])  # ok where a mate is
        line = b"%s\t%d\t%d\t%d\t%.6g\t%s\n"
        if self.paired:
            rows += [lengths[:, 0].tolist(), lengths[:, -1].tolist()]
            line = line[:-1] + b"\t%d\t%d\n"
        self.sequences_table.write(b"".join([line % row for row in zip(*rows)]))
        self.counts["records"] += len(ids)
        self.mates_read += len(batch.ids)
        short = usable[(usable > 0) & (usable < self.policy.chunk_length)]
        self.short_lengths += np.bincount(short, minlength=self.policy.chunk_length)
        self.counts["shorter_than_chunk"] += short.size
        self.counts["chunks"] += int(record_of_chunk.size)
        self.counts["frames"] += int(n_frames.sum())

    def _status(self, batch: Batch, codes: tuple[np.ndarray, bool]) -> tuple[np.ndarray, np.ndarray]:
        """Non-ACGT bases and status (index into STATUS) of each record."""
        lengths = batch.lengths
        non_acgt = np.zeros(lengths.size, dtype=np.int64)
        if codes[1]:
            # count from the positions of the ambiguous bases: a running sum over the batch would
            # cost 8 bytes per base, 800 MB for a 100 Mb contig
            where = np.flatnonzero(codes[0] == 4)
            record = np.searchsorted(batch.offsets(), where, side="right") - 1
            non_acgt = np.bincount(record, minlength=lengths.size)
        ambiguous = np.divide(non_acgt, lengths, out=np.zeros(lengths.size), where=lengths > 0)
        status = np.select(
            [lengths == 0, lengths < self.policy.min_length, ambiguous > self.policy.max_ambiguous_fraction],
            [STATUS.index(b"empty"), STATUS.index(b"too_short"), STATUS.index(b"too_ambiguous")],
            STATUS.index(b"ok"),
        )
        return non_acgt, status

    def _write_frames(self, chunk: np.ndarray, frame: np.ndarray, proteins, nucleotides, chunk_of) -> None:
        """Each kept frame to the shard being filled, and its row to the frames table; `chunk_of`: the
        records' IDs, and each chunk's record, number, start and end (0-based) along its record."""
        ids, row_of_chunk, chunk_number, starts, ends = chunk_of
        records = [ids[r] for r in row_of_chunk[chunk].tolist()]
        numbers = chunk_number[chunk].tolist()
        names = [_FRAME_IDS[f] for f in frame.tolist()]
        frame_ids = [b"%s_chunk_%d%s" % row for row in zip(records, numbers, names)]
        tokens = np.fromiter(map(len, proteins), dtype=np.int64, count=len(proteins)) + 2  # BOS + EOS
        crcs, start, shards = protein_crcs(proteins), 0, []
        for shard, stop in self._fill(tokens):
            if shard > len(self.digests):
                self._write_held()
            part = slice(start, stop)
            self.held.add(frame_ids[part], nucleotides[part], proteins[part], crcs[part], tokens[part])
            shards += [shard] * (stop - start)
            start = stop
        coordinates = (starts[chunk] + 1).tolist(), ends[chunk].tolist()  # 1-based, inclusive
        rows = zip(
            frame_ids, records, numbers, *coordinates, names, (tokens - 2).tolist(), shards, (crcs % BINS).tolist()
        )
        self.frames_table.write(b"".join([b"%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\n" % row for row in rows]))

    def _fill(self, tokens: np.ndarray) -> list[tuple[int, int]]:
        """Place frames of `tokens` in the shards in turn: the last one while it has room (or no frame),
        else the next. Return each shard they went to, and where its run of them ends."""
        runs, start = [], 0
        while start < tokens.size:
            filled = self.shard_tokens[-1] + np.cumsum(tokens[start:])
            fit = int(np.searchsorted(filled, self.policy.shard_tokens, side="right"))
            if not fit and self.shard_frames[-1]:
                self.shard_frames.append(0)
                self.shard_tokens.append(0)
                continue
            fit = max(fit, 1)  # a frame larger than a shard goes alone
            self.shard_frames[-1] += fit
            self.shard_tokens[-1] = int(filled[fit - 1])
            start += fit
            runs.append((len(self.shard_frames) - 1, start))
        return runs

    def _write_held(self) -> None:
        digest, counts = self.held.write(self.directory, len(self.digests))
        self.digests.append(digest)
        self.bin_counts.append(counts)
        self.held = _HeldShard()

    def finish(self, bins: Path) -> None:
        """Write the last shard, and the bins file."""
        self._write_held()
        counts = {name: np.stack([c[name] for c in self.bin_counts]) for name in BIN_COUNTS}
        write_bins(bins, counts, [c["sketch"] for c in self.bin_counts])


class _HeldShard:
    """A shard's frames, held until it is full (its memory: about the shard's FASTA pair, which
    shard_tokens bounds), then written in bin order."""

    def __init__(self):
        self.ids: list[bytes] = []
        self.listed = IDDigest()  # of the IDs in the frames table's order
        self.records: dict[str, list[bytes]] = {"fna": [], "faa": []}  # a FASTA record each frame
        self.arrays: dict[str, list[np.ndarray]] = {"crcs": [], "tokens": [], "fna_bytes": [], "faa_bytes": []}

    def add(
        self, ids: list[bytes], nucleotides: list[bytes], proteins: list[bytes], crcs: np.ndarray, tokens: np.ndarray
    ) -> None:
        self.ids += ids
        self.listed.update(ids)
        for suffix, sequences in (("fna", nucleotides), ("faa", proteins)):
            records = [b">%s\n%s\n" % pair for pair in zip(ids, sequences)]
            self.records[suffix] += records
            self.arrays[f"{suffix}_bytes"].append(np.fromiter(map(len, records), np.int64, len(records)))
        self.arrays["crcs"].append(crcs)
        self.arrays["tokens"].append(tokens)

    def write(self, directory: Path, shard: int) -> tuple[tuple[IDDigest, IDDigest], dict[str, np.ndarray]]:
        """Write the shard's FASTA pair in bin order; return the digests of its IDs in the frames
        table's order and in that one, and its counts per bin (sharding.BIN_COUNTS) and sketch."""
        values = {
            name: np.concatenate(arrays) if arrays else np.empty(0, np.int64) for name, arrays in self.arrays.items()
        }
        bins = values["crcs"] % BINS
        order = np.argsort(bins, kind="stable")
        digest = IDDigest()
        digest.update(_gather(self.ids, order))
        counts = {"frames": np.bincount(bins, minlength=BINS), "sketch": sketch(values["crcs"], values["tokens"])}
        counts |= {name: _per_bin(bins, values[name]) for name in ("tokens", "fna_bytes", "faa_bytes")}
        for suffix, records in self.records.items():
            records = _gather(records, order)
            with open(shard_fasta(directory, shard, suffix), "wb") as out:
                # written about half a MB at a time: a join that stays in the CPU's cache, not one of the whole shard
                for lo in range(0, len(records), 1024):
                    out.write(b"".join(records[lo : lo + 1024]))
        return (self.listed, digest), counts


def _gather(items: list, order: np.ndarray) -> list:
    """`items` in `order` (a gather in C, several times faster than a list comprehension)."""
    return np.array(items, dtype=object)[order].tolist() if items else []


def _per_bin(bins: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.bincount(bins, weights=values, minlength=BINS).astype(np.int64)
