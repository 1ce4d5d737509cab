"""The tables and JSON files the stages write and read: their columns, how a TSV is read and written
(record IDs verbatim), chunked readers for tables too large to hold, and one JSON writer."""

import contextlib
import csv
import functools
import gzip
import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from workflow_lib.cli.errors import InputError
from workflow_lib.io.outputs import atomic_open

# prepare: frames.tsv.gz (chunk coordinates 1-based, inclusive) and sequences.tsv.gz
PREPARED_FRAMES = (
    "frame_id",
    "sequence_id",
    "chunk",
    "chunk_start",
    "chunk_end",
    "frame",
    "protein_length",
    "shard",
    "bin",
)
PREPARED_SEQUENCES = ("sequence_id", "length", "n_chunks", "n_frames", "ambiguous_fraction", "status")
# a paired sample's sequences tables end with its fragments' mates' lengths (`length` is their sum)
MATE_LENGTHS = ("length1", "length2")
# predict: frames.tsv and chunks.tsv; call: sequences.tsv
FRAMES = ("frame_id", "sequence_id", "chunk", "frame", "score_other", "score_virus", "prediction")
# chunk_start and chunk_end last: the contract's columns (docs/design.md) keep their places
CHUNKS = (
    "sequence_id",
    "chunk",
    "n_frames",
    "max_score_other",
    "max_score_virus",
    "is_virus",
    "chunk_start",
    "chunk_end",
)
SEQUENCES = (
    "sequence_id",
    "length",
    "n_chunks",
    "n_chunks_scored",
    "n_viral_chunks",
    "viral_fraction",
    "max_score_virus",
    "mean_score_virus",
    "call",
    "status",
    "n_regions",  # viral regions inside the record (regions.tsv)
    "viral_extent",  # whole (called virus), regions (not called, but holds regions), or none
)
_BOOL_TEXT = np.array(["False", "True"], dtype=object)
# NA in a score column marks a record with no scored chunk; nowhere else is NA a missing value.
_NA = {column: ["NA"] for column in ("viral_fraction", "max_score_virus", "mean_score_virus")}
# QUOTE_NONE and no default NA: record IDs are taken verbatim from headers and may hold quote
# characters or read "NA".
_READ = {
    "sep": "\t",
    "keep_default_na": False,
    "na_values": _NA,
    "dtype": {"frame_id": str, "sequence_id": str},
    "quoting": csv.QUOTE_NONE,
}
CHUNK_ROWS = 1 << 17  # rows a chunked reader holds at a time: tens of MB


def read_table(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A table of this workflow, whole (or only `columns`)."""
    with _whole(path):
        return pd.read_csv(path, usecols=columns, **_READ)


def read_chunks(path: str | Path, columns: list[str] | None = None, rows: int = CHUNK_ROWS) -> Iterator[pd.DataFrame]:
    """A table of this workflow in blocks of `rows` rows: memory bounded whatever its size."""
    with _whole(path), pd.read_csv(path, usecols=columns, chunksize=rows, **_READ) as reader:
        yield from reader


@contextlib.contextmanager
def _whole(path: str | Path):
    """Refuse, in one line, a table cut short: by a crash after its rename, before its data reached
    the disk. Every table ends its last line; a gzip table's end is checked as it is read."""
    redo = "delete it and run the workflow again"  # the job that wrote it then runs again
    if not str(path).endswith(".gz"):
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(size - 1, 0))
            last = handle.read(1)
        if last != b"\n":
            raise InputError(f"{path}: cut short ({'empty' if not size else 'its last line is not whole'}); {redo}")
    try:
        yield
    except (pd.errors.EmptyDataError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise InputError(f"{path}: cut short or damaged ({error}); {redo}") from None


def whole_groups(blocks: Iterable[pd.DataFrame], keys: list[str]) -> Iterator[pd.DataFrame]:
    """The blocks of a table whose rows come grouped by `keys`, cut again so that no group is split
    between two blocks."""
    held = None
    for block in blocks:
        if held is not None:
            block = pd.concat([held, block], ignore_index=True)
        if block.empty:
            continue
        values = block[keys].to_numpy()
        other = np.flatnonzero((values != values[-1]).any(axis=1))
        cut = int(other[-1]) + 1 if other.size else 0
        if cut:
            yield block.iloc[:cut]
        held = block.iloc[cut:]
    if held is not None and not held.empty:
        yield held


@contextlib.contextmanager
def tsv_writer(path: str | Path, columns: Iterable[str]) -> Iterator[Callable[[pd.DataFrame], None]]:
    """Yield a function that appends a block to the table at `path`, written atomically."""
    columns = list(columns)
    with atomic_open(path) as handle:
        handle.write("\t".join(columns) + "\n")

        def write(block: pd.DataFrame) -> None:
            # joined here: pandas' to_csv costs about twice as much, its float_format ten times
            if len(block):
                handle.write("\n".join(map("\t".join, zip(*(cells(block[c]) for c in columns)))) + "\n")

        yield write


def cells(column: pd.Series) -> list[str]:
    """A column's values as the tables write them."""
    if column.dtype.kind == "f":
        return formatted(column.to_numpy(dtype=np.float64, na_value=np.nan))
    if column.dtype == np.bool_:  # not pandas' nullable booleans
        return _BOOL_TEXT[column.to_numpy().view(np.uint8)].tolist()
    # text columns as they are (str() of each costs as much as all the rest of a text column)
    written = column.tolist() if isinstance(column.dtype, pd.StringDtype) else list(map(str, column.tolist()))
    if column.hasnans:
        for i in np.flatnonzero(column.isna().to_numpy()).tolist():
            written[i] = "NA"
    return written


def formatted(values: np.ndarray) -> list[str]:
    """Floats as the tables write them (%.6g), NA for a missing value."""
    return ["NA" if v != v else "%.6g" % v for v in values.tolist()]


def decimal_text(values: np.ndarray, decimals: int, limit: float = 1.0, encoded: bool = False) -> np.ndarray:
    """Values of at least 0 with `decimals` decimals, NA for a missing value: an array of str (of bytes
    if `encoded`), looked up rather than formatted one by one up to `limit`."""
    values = np.asarray(values, dtype=np.float64)
    steps = round(limit * 10**decimals)
    scaled = np.rint(values * 10**decimals)
    texts = _decimal_texts(decimals, steps, encoded)
    written = texts[np.where(np.isnan(values), steps + 1, np.clip(scaled, 0, steps)).astype(np.intp)]
    for i in np.flatnonzero(scaled > steps).tolist():
        written[i] = f"{values[i]:.{decimals}f}".encode() if encoded else f"{values[i]:.{decimals}f}"
    return written


@functools.cache
def _decimal_texts(decimals: int, steps: int, encoded: bool) -> np.ndarray:
    texts = [f"{i / 10**decimals:.{decimals}f}" for i in range(steps + 1)] + ["NA"]
    return np.array([text.encode() for text in texts] if encoded else texts, dtype=object)


def write_tsv(table: pd.DataFrame, path: str | Path) -> None:
    """A whole table at once (see tsv_writer)."""
    with tsv_writer(path, table.columns) as write:
        write(table)


def read_json(path: str | Path):
    return json.loads(Path(path).read_text())


def write_json(value, path: str | Path) -> None:
    """Every JSON output of the workflow: indented, ending in a newline, written atomically."""
    with atomic_open(path) as handle:
        json.dump(value, handle, indent=2)
        handle.write("\n")
