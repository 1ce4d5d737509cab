"""Duplicate record IDs, found in bounded memory: a 64-bit hash per record, sorted bucket by bucket;
only when hashes repeat is the input read again to tell a real duplicate from a collision."""

import contextlib
import tempfile
from array import array
from pathlib import Path

import numpy as np

from workflow_lib.cli.errors import InputError
from workflow_lib.io.reads import SampleReads, read_sample

HELD = 1 << 20  # hashes held in memory (8 MB) before they are spread over the bucket files
BUCKET_BITS = 6  # 64 buckets by the hashes' top bits: 12.5 MB a bucket at 10^8 records
# Repeated hashes looked up in the second pass, at most: enough to name the duplicates (64-bit
# hashes of 10^8 distinct IDs collide about 3e-4 times), few enough for a file of only duplicates.
MAX_REPEATED = 100_000


class IDHashes(contextlib.ExitStack):
    """The hashes of record IDs: held up to HELD, then spread over temporary bucket files in
    `directory`, each sorted on its own at the end. Use as a context manager."""

    def __init__(self, directory: str | Path):
        super().__init__()
        self.directory = directory
        self.held = array("q")
        self.tmp: Path | None = None  # the bucket files' directory, once there are any

    def add(self, ids: list[bytes]) -> None:
        self.held.extend(map(hash, ids))
        if len(self.held) >= HELD:
            self._spill()

    def _spill(self) -> None:
        if self.tmp is None:
            self.tmp = Path(self.enter_context(tempfile.TemporaryDirectory(dir=self.directory, prefix=".id_hashes")))
        values = np.frombuffer(self.held, dtype=np.int64)
        bucket = values.view(np.uint64) >> np.uint64(64 - BUCKET_BITS)
        order = np.argsort(bucket, kind="stable")
        cuts = np.searchsorted(bucket[order], np.arange(1, 1 << BUCKET_BITS))
        for number, part in enumerate(np.split(values[order], cuts)):
            with open(self.tmp / str(number), "ab") as handle:
                part.tofile(handle)
        self.held = array("q")

    def repeated(self) -> set[int]:
        """The hashes seen more than once (MAX_REPEATED of them at most)."""
        if self.tmp is None:
            buckets = [np.frombuffer(self.held, dtype=np.int64).copy()]
        else:
            self._spill()
            buckets = (np.fromfile(path, dtype=np.int64) for path in sorted(self.tmp.iterdir()))
        repeated: set[int] = set()
        for values in buckets:
            values.sort()
            repeated.update(values[1:][values[1:] == values[:-1]][: MAX_REPEATED - len(repeated)].tolist())
        return repeated


def check_unique_ids(reads: SampleReads, repeated: set[int]) -> None:
    """Fail on duplicate record IDs, given the hashes that repeat (IDHashes.repeated)."""
    if not repeated:
        return
    seen: dict[bytes, tuple[str, int]] = {}
    duplicates, gaps = [], set()
    several = len(reads.paths) > 1
    records = (  # each record's ID (a fragment's once), its number in its file, the file
        (record_id, number, path)
        for i, path in enumerate(reads.paths)
        for batch in read_sample(SampleReads((path,), reads.mates[i : i + 1], reads.interleaved))
        for number, record_id in enumerate(batch.ids[:: batch.mates], batch.first)
    )
    for running, (record_id, number, path) in enumerate(records):
        if hash(record_id) in repeated:
            where = f"{number} of {path}" if several else str(number)
            if record_id in seen:
                duplicates.append(f"'{record_id.decode()}' (records {seen[record_id][0]} and {where})")
                gaps.add(running - seen[record_id][1])
            else:
                seen[record_id] = (where, running)
    if duplicates:
        shown = "; ".join(duplicates[:5]) + (f"; and {len(duplicates) - 5} more" if len(duplicates) > 5 else "")
        # Illumina names both mates of a pair alike (the mate is after the space): records of one
        # file that repeat at one fixed distance are R1 and R2 interleaved (1) or R2 appended after
        # R1; a single pair is as likely two contigs named alike
        hint = "give every record a unique ID"
        mates = len(duplicates) > 1 and not (several or reads.paired)
        if gaps == {1} and mates:
            hint = "these look like interleaved mates of paired-end reads: mark the file interleaved true in the sheet"
        elif len(gaps) == 1 and mates:
            hint = (
                "these look like the two mates of paired-end reads one after the other in one file: split it into "
                "mate 1 and mate 2 files, and give them as path and path2 in the samples sheet"
            )
        raise InputError(f"{', '.join(map(str, reads.paths))}: duplicate sequence IDs: {shown}; {hint}")
