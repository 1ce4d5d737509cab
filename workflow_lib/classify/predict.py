"""The predict stage: a sample's tables from its shards' scores (score.py), joined on prepare's
frames table. It writes the frames table (a score per frame), the chunks table (VirNucPro's call
per chunk), the scoring JSON (the checkpoints with their SHA-256) and optionally VirNucPro's own
tables, a block of rows at a time. Calls per record are the call stage's (call.py), so that a new
threshold needs no embeddings."""

import contextlib
import heapq
import json
import logging
import struct
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from workflow_lib.classify.calibration import Calibration
from workflow_lib.classify.weighing import ChunkWeighing
from workflow_lib.cli.errors import InputError
from workflow_lib.cli.progress import Progress
from workflow_lib.io.outputs import atomic_open
from workflow_lib.io.sharding import BINS, read_bins
from workflow_lib.io.tables import CHUNKS, FRAMES, read_chunks, tsv_writer, whole_groups, write_json
from workflow_lib.prepare.reconcile import IDDigest
from workflow_lib.prepare.translation import FRAME_NAMES

log = logging.getLogger("workflow")


class ScoreFiles(NamedTuple):
    frames: Path  # the frames table
    chunks: Path  # the chunks table
    scoring: Path  # JSON
    virnucpro: tuple[Path, Path] | None  # VirNucPro's prediction_results.txt and _highestscore.csv, or none


# Frames-table rows read and written at a time, with their scores, whatever the sample's size.
TABLE_ROWS = 32768
_FRAME_INDEX = {name: i for i, name in enumerate(FRAME_NAMES)}


class ListedFrames:
    """prepare's frames table checked block by block against its sequences table, read alongside:
    each record's frames together, once each, in chunk and frame order, and as many as listed."""

    def __init__(self, frames_path: str | Path, sequences_path: str | Path):
        self.paths = Path(frames_path), Path(sequences_path)
        self.listed = (b[b["n_frames"] > 0] for b in read_chunks(sequences_path, ["sequence_id", "n_frames"]))
        self.ids, self.counts = np.empty(0, dtype=object), np.empty(0, dtype=np.int64)  # listed, not yet matched
        self.last = (None, -1)  # record and (chunk, frame) key of the frame before this block
        self.run: list | None = None  # the record whose frames the last block ended in, and their count
        self.rows = 0

    def check(self, block: pd.DataFrame) -> None:
        if block.empty:  # a table of no frames is read as one empty block
            return
        records = block["sequence_id"].to_numpy(dtype=object)
        keys = block["chunk"].to_numpy(dtype=np.int64) * len(FRAME_NAMES) + block["frame"].map(_FRAME_INDEX).to_numpy()
        same = records == np.concatenate(([self.last[0]], records[:-1]))
        unordered = np.flatnonzero(same & (keys <= np.concatenate(([self.last[1]], keys[:-1]))))
        if unordered.size:
            i = unordered[0]
            raise InputError(
                f"{self.paths[0]}: row {self.rows + i + 2} repeats a frame of '{records[i]}' or lists it out of "
                "chunk and frame order; delete the sample's prepare outputs and run again"
            )
        self.rows += len(block)
        self.last = (records[-1], keys[-1])
        starts = np.flatnonzero(~same)
        counts = np.diff(np.append(starts, len(records)))
        if self.run is not None:
            self.run[1] += int(starts[0]) if starts.size else len(records)
        if starts.size:
            done = ([self.run[0]], [self.run[1]]) if self.run is not None else ([], [])
            self._match(done[0] + records[starts[:-1]].tolist(), done[1] + counts[:-1].tolist())
            self.run = [records[starts[-1]], int(counts[-1])]

    def finish(self) -> None:
        if self.run is not None:
            self._match([self.run[0]], [self.run[1]])
        self._pull(1)
        if self.ids.size:
            self._disagree(f"'{self.ids[0]}' has {self.counts[0]} frames listed, none in the frames table")

    def _pull(self, n: int) -> None:
        while self.ids.size < n:
            block = next(self.listed, None)
            if block is None:
                return
            self.ids = np.concatenate((self.ids, block["sequence_id"].to_numpy(dtype=object)))
            self.counts = np.concatenate((self.counts, block["n_frames"].to_numpy(dtype=np.int64)))

    def _match(self, records: list[str], counts: list[int]) -> None:
        self._pull(len(records))
        if self.ids.size < len(records):
            self._disagree(f"the frames of '{records[self.ids.size]}' are not listed")
        wrong = np.flatnonzero(
            (self.ids[: len(records)] != np.array(records, dtype=object)) | (self.counts[: len(records)] != counts)
        )
        if wrong.size:
            i = wrong[0]
            if records[i] != self.ids[i]:
                self._disagree(f"the frames of '{records[i]}' come where those of '{self.ids[i]}' are listed")
            self._disagree(f"'{records[i]}' has {self.counts[i]} frames listed, {counts[i]} in the frames table")
        self.ids, self.counts = self.ids[len(records) :], self.counts[len(records) :]

    def _disagree(self, what: str) -> None:
        raise InputError(
            f"{self.paths[0]} and {self.paths[1]} disagree: {what}; delete the sample's prepare outputs and run again"
        )


class ShardScores:
    """A sample's shards' scores, read in shard order as the frames table asks for them. A shard's
    scores are its pieces in the (pooled) scores files `paths` (score.py), taken in the files' order
    (the plan's: by bin), and so in its FASTA's order: by bin, then as the frames table lists them
    (sharding.py). A frame is found by its bin, after the shard's frames of the bins before it
    (prepare's bins file) and those of its bin before it. Memory holds one shard's scores and IDs:
    the scores files are mapped, not read. Each piece's frame IDs are digested and checked once
    its shard is read."""

    def __init__(self, paths: list[str | Path], bins_path: str | Path, sample: str = ""):
        self.paths = list(dict.fromkeys(Path(p) for p in paths))
        self.per_bin = read_bins(bins_path)["frames"]  # [shards, BINS]
        self.bin_starts = np.cumsum(self.per_bin, axis=1) - self.per_bin
        self.pieces: list[list[tuple]] = [[] for _ in self.per_bin]  # (file, first row, rows, IDs digest)
        self.layouts = {}  # per file, where its scores and atypicality lie in it
        self.checkpoints = None  # every file's must be the first's
        for position, path in enumerate(self.paths):
            found = _read(path, "pieces", "ids_blake2b", "piece_samples", "piece_shards", "checkpoints")
            if self.checkpoints is None:
                self.checkpoints = found["checkpoints"]
            elif found["checkpoints"] != self.checkpoints:
                raise InputError(
                    f"{path}: made with {found['checkpoints']} but {self.paths[0]} with {self.checkpoints}; delete "
                    "the sample's embeddings and scores and run again"
                )
            self.layouts[path] = [_layout(path, key) for key in ("scores", "atypicality")]
            starts = np.cumsum(found["pieces"]) - found["pieces"]
            # a file without pieces holds one shard: that of its place among the files
            samples = found.get("piece_samples", np.array([sample]))
            shards = found.get("piece_shards", np.array([position]))
            for i in np.flatnonzero(samples == sample).tolist():
                if shards[i] >= len(self.pieces):
                    self.shard = int(shards[i])
                    self._disagree(f"is in {path}, but {bins_path} counts {len(self.pieces)} shards", path)
                self.pieces[shards[i]].append((path, int(starts[i]), int(found["pieces"][i]), found["ids_blake2b"][i]))
        self.frames = int(self.per_bin.sum())
        self.shard = -1
        for shard, pieces in enumerate(self.pieces):
            held, counted = sum(n for _, _, n, _ in pieces), int(self.per_bin[shard].sum())
            if not pieces and counted:
                raise InputError(
                    f"{bins_path}: counts {counted} frames of shard {shard}, but no scores file given holds them; "
                    "delete the sample's prepare outputs and run again"
                )
            if held != counted:
                self.shard = shard
                self._disagree(f"holds {held} frames where {bins_path} counts {counted}")

    def read(self, shard: int, frame_ids: list[str], bins: np.ndarray) -> np.ndarray:
        """The scores and atypicality of the next len(frame_ids) frames of `shard` (this shard or a
        later one), which the frames table names `frame_ids` and places in `bins`."""
        while self.shard < shard:
            self._next()
        order = np.argsort(bins, kind="stable")
        in_order = bins[order]
        at = np.empty(len(bins), dtype=np.int64)
        at[order] = self.bin_starts[shard][in_order] + self.seen[in_order]
        at[order] += np.arange(len(bins)) - np.searchsorted(in_order, in_order)  # earlier ones of its bin here
        self.seen += np.bincount(bins, minlength=BINS)
        if (self.seen > self.per_bin[shard]).any():
            self._disagree("holds fewer frames of a bin than the frames table lists")
        self.ids[at] = frame_ids
        return self.scores[at]

    def finish(self) -> None:
        """Check the shard being read and every shard after it (they can only be empty)."""
        while self.shard < len(self.pieces) - 1:
            self._next()
        self._check()

    def _next(self) -> None:
        if self.shard >= 0:
            self._check()
        self.shard += 1
        parts = []
        for path, start, n, _ in self.pieces[self.shard]:
            parts.append(np.column_stack([_rows(path, layout, start, n) for layout in self.layouts[path]]))
        self.scores = np.concatenate(parts) if parts else np.empty((0, 3), dtype=np.float32)
        self.ids = np.full(len(self.scores), None, dtype=object)
        self.seen = np.zeros(BINS, dtype=np.int64)

    def _check(self) -> None:
        served = int(self.seen.sum())
        if served != len(self.scores):
            self._disagree(f"holds {len(self.scores)} frames where the frames table lists {served}")
        first = 0
        for path, _, n, expected in self.pieces[self.shard]:
            digest = IDDigest()
            digest.update([i.encode() for i in self.ids[first : first + n]])
            if digest.hash.hexdigest() != expected:
                self._disagree("was made from other frames than the frames table lists", path)
            first += n

    def _disagree(self, what: str, path: Path | None = None) -> None:
        path = path or next((p for p, *_ in self.pieces[self.shard]), self.paths[0] if self.paths else "")
        raise InputError(
            f"{path}: the scores do not match shard {self.shard} of the frames table (it {what}); delete the "
            "sample's prepare outputs and run again"
        )


def _read(path: Path, *keys: str) -> dict:
    """The arrays `keys` of a scores file, without its others (piece_* only where it pools several
    samples' shards); its checkpoints decoded."""
    try:
        with np.load(path) as data:
            found = {key: data[key] for key in keys if key in data or not key.startswith("piece_")}
            found["checkpoints"] = json.loads(str(found["checkpoints"]))
            return found
    except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise InputError(f"{path}: not a readable scores file ({error}); delete it and run again") from None


def _layout(path: Path, key: str) -> tuple[int, np.dtype, tuple]:
    """Where array `key` of a scores file lies in it (np.savez stores it uncompressed, in C order):
    its data's offset, dtype and shape."""
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(f"{key}.npy")
        with open(path, "rb") as handle:
            handle.seek(info.header_offset)
            name, extra = struct.unpack("<HH", handle.read(30)[26:30])  # the member's local header
            handle.seek(info.header_offset + 30 + name + extra)
            major, _ = np.lib.format.read_magic(handle)
            read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(handle)
            offset = handle.tell()
        if info.compress_type != zipfile.ZIP_STORED or fortran:
            raise ValueError(f"{key} is compressed or in Fortran order")
        return offset, dtype, shape
    except (OSError, KeyError, ValueError, struct.error, zipfile.BadZipFile) as error:
        raise InputError(f"{path}: not a readable scores file ({error}); delete it and run again") from None


def _rows(path: Path, layout: tuple[int, np.dtype, tuple], start: int, n: int) -> np.ndarray:
    """Rows start to start + n of an array of a scores file (_layout), read from the file alone."""
    offset, dtype, shape = layout
    columns = int(np.prod(shape[1:]))
    values = np.fromfile(path, dtype=dtype, count=n * columns, offset=offset + start * columns * dtype.itemsize)
    if values.size != n * columns:
        raise InputError(f"{path}: cut short (rows {start} to {start + n} missing); delete it and run again")
    return values.reshape(n, *shape[1:])


def scored_chunks(
    frames_path: str | Path, sequences_path: str | Path, shards: ShardScores, progress: Progress
) -> Iterator[pd.DataFrame]:
    """prepare's frames table, checked against its sequences table, in blocks of whole chunks' frames
    with their scores (frames-table columns), read from the shards' scores files in turn."""
    listed = ListedFrames(frames_path, sequences_path)
    columns = ["frame_id", "sequence_id", "chunk", "chunk_start", "chunk_end", "frame", "shard", "bin"]

    def blocks() -> Iterator[pd.DataFrame]:
        for block in read_chunks(frames_path, columns, TABLE_ROWS):
            listed.check(block)
            frame_ids, shard_of = block["frame_id"].to_numpy(dtype=object), block["shard"].to_numpy()
            bins = block["bin"].to_numpy(dtype=np.int64)
            scores = np.empty((len(block), 3), dtype=np.float32)
            for shard in np.unique(shard_of).tolist():
                if shard >= len(shards.pieces):
                    _unlike_the_shards(
                        frames_path, f"frames of shard {shard}, but {len(shards.pieces)} shards were scored"
                    )
                if shard < max(shards.shard, 0):
                    _unlike_the_shards(frames_path, f"frames of shard {shard} after those of shard {shards.shard}")
                rows = np.flatnonzero(shard_of == shard)
                scores[rows] = shards.read(shard, frame_ids[rows], bins[rows])
            progress.update(listed.rows)
            table = block.drop(columns="shard")  # the frames table's columns, with the chunk coordinates
            table["score_other"], table["score_virus"], table["atypicality"] = scores.T
            # torch.max picks the first maximum: a tie is 'other', as in VirNucPro (which says 'others').
            table["prediction"] = np.where(scores[:, 1] > scores[:, 0], "virus", "other")
            yield table
        shards.finish()

    yield from whole_groups(blocks(), ["sequence_id", "chunk"])
    listed.finish()


def _unlike_the_shards(frames_path: str | Path, what: str) -> None:
    raise InputError(f"{frames_path}: {what}; delete the sample's prepare outputs and run again")


def chunk_table(frames: pd.DataFrame) -> pd.DataFrame:
    """The chunks table's rows of whole chunks' frames, and each chunk's mean atypicality."""
    grouped = frames.groupby(["sequence_id", "chunk"], sort=False)
    table = grouped.agg(
        chunk_start=("chunk_start", "first"),
        chunk_end=("chunk_end", "first"),
        n_frames=("frame_id", "size"),
        max_score_other=("score_other", "max"),
        max_score_virus=("score_virus", "max"),
        atypicality=("atypicality", "mean"),
    ).reset_index()
    table["is_virus"] = table["max_score_virus"] >= table["max_score_other"]  # VirNucPro's rule
    return table[[*CHUNKS, "atypicality"]]


# Chunk rows of VirNucPro's per-chunk table sorted in memory at a time (virnucpro_tables)
RUN_ROWS = 1 << 20


@contextlib.contextmanager
def virnucpro_tables(paths: tuple[Path, Path]) -> Iterator:
    """Yield a function that writes VirNucPro's prediction_results.txt and
    prediction_results_highestscore.csv as it does, from frames in frames-table order (a chunk's
    frames in one call); in place when the block succeeds. Scores are printed as str() of float32,
    and chunks (the frame ID less its last two characters) sorted by ID, as its pandas groupby does:
    in runs of RUN_ROWS kept in temporary files, then merged, so that memory holds one run."""
    runs, held = [], []
    with atomic_open(paths[0]) as per_frame, tempfile.TemporaryDirectory(dir=paths[1].parent) as runs_dir:
        per_frame.write("Sequence_ID\tPrediction\tscore1\tscore2\n")

        def write(frames: pd.DataFrame) -> None:
            per_frame.write(
                "".join(
                    f"{fid}\t{prediction}\t{other!s}\t{virus!s}\n"  # str(np.float32), as VirNucPro
                    for fid, prediction, other, virus in zip(
                        frames["frame_id"],
                        np.where(frames["prediction"] == "virus", "virus", "others"),  # VirNucPro's word
                        frames["score_other"].to_numpy(np.float32),
                        frames["score_virus"].to_numpy(np.float32),
                    )
                )
            )
            grouped = frames.groupby(frames["frame_id"].str[:-2], sort=False)
            is_virus = grouped["score_virus"].max() >= grouped["score_other"].max()
            held.extend(f"{chunk}\t{value}\n" for chunk, value in is_virus.items())
            if len(held) >= RUN_ROWS:
                runs.append(Path(runs_dir, f"{len(runs)}.tsv"))
                runs[-1].write_text("".join(sorted(held, key=_chunk_id)))
                held.clear()

        yield write
        with contextlib.ExitStack() as opened, atomic_open(paths[1]) as per_chunk:
            merged = [sorted(held, key=_chunk_id)] + [opened.enter_context(open(run)) for run in runs]
            per_chunk.write("Modified_ID\tIs_Virus\n")
            per_chunk.writelines(heapq.merge(*merged, key=_chunk_id))


def _chunk_id(line: str) -> str:
    return line.split("\t", 1)[0]


def write_tables(
    frames_path: str | Path,
    sequences_path: str | Path,
    score_files: list[str],
    bins: str | Path,
    outputs: ScoreFiles,
    progress_seconds: float,
    calibration: Calibration | None = None,
    sample: str = "",
) -> dict:
    """Write `outputs` block by block from prepare's tables and the (pooled) scores files of
    `sample`'s shards, in the plan's order, and its `bins` file; with a `calibration`, the chunks
    table gains each chunk's probability of being viral."""
    shards = ShardScores(score_files, bins, sample)
    # the start-up checks a calibration against a classifier file that is there; one given by URL
    # may be another by the time it scored (fetch_classifier checks it then too)
    scored_by = shards.checkpoints["classifier"]["sha256"] if shards.checkpoints else None
    if calibration and scored_by and (refusal := calibration.refusal(scored_by, None, "models.calibration")):
        raise InputError(refusal)
    progress = Progress(log, "frames", total=shards.frames, interval=progress_seconds)
    with tempfile.TemporaryDirectory(dir=outputs.chunks.parent) as scratch:
        weighed = ChunkWeighing(calibration, Path(scratch, "evidence.f32")) if calibration else None
        # with a calibration the chunks go to a scratch table first: their probabilities need the
        # sample's viral fraction, known once every chunk is scored
        chunks_path = Path(scratch, "chunks.tsv") if weighed else outputs.chunks
        with contextlib.ExitStack() as stack:
            write_frames = stack.enter_context(tsv_writer(outputs.frames, FRAMES))
            write_chunks = stack.enter_context(tsv_writer(chunks_path, CHUNKS))
            virnucpro = stack.enter_context(virnucpro_tables(outputs.virnucpro)) if outputs.virnucpro else None

            def chunk_blocks() -> Iterator[pd.DataFrame]:
                for frames in scored_chunks(frames_path, sequences_path, shards, progress):
                    write_frames(frames)  # a chunk's frames in one block
                    if virnucpro:
                        virnucpro(frames)
                    yield chunk_table(frames)

            for chunks in whole_groups(chunk_blocks(), ["sequence_id"]):  # the weighing counts whole records
                write_chunks(chunks)
                if weighed:
                    weighed.count(chunks)
            log.info(progress.line(shards.frames))
        scoring = {"checkpoints": shards.checkpoints, "frames": shards.frames}
        if weighed:
            scoring |= weighed.write(chunks_path, outputs.chunks)
            log.info(
                "chunks' viral fraction %(viral_fraction_estimate).4f (from the %(source)s)",
                scoring["chunk_composition"],
            )
    write_json(scoring, outputs.scoring)
    log.info("%d frames of %d shards into %s and %s", shards.frames, len(shards.pieces), outputs.frames, outputs.chunks)
    return scoring
