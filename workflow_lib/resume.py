"""Resuming a killed embed job: results are committed in parts beside the output, so that a
rerun embeds only what was not committed, in the same batches, and writes the same file.

Each part is written under a temporary name and renamed, so a kill (SIGKILL, a lost node) leaves
only whole parts. Parts belong to one shard and one set of settings (the fingerprint): a rerun
with anything else starts from zero.
"""

import json
import logging
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np

from .outputs import atomic_open
from .tables import write_json

log = logging.getLogger("workflow")


class Commits:
    def __init__(self, output_path: str | Path, fingerprint: dict, interval: float):
        output_path = Path(output_path)
        self.dir = output_path.with_name(f".{output_path.name}.parts")
        self.fingerprint, self.interval = fingerprint, interval
        self.last = time.monotonic()
        self.uncommitted: list[np.ndarray] = []
        self.next_part = 0

    def restore(self, out: np.ndarray, row_tokens: np.ndarray) -> np.ndarray:
        """Fill `out` and `row_tokens` from an earlier run's parts; return the committed rows' mask."""
        committed = np.zeros(len(out), dtype=bool)
        stamp = self.dir / "fingerprint.json"
        if stamp.is_file() and json.loads(stamp.read_text()) == self.fingerprint:
            parts = sorted(self.dir.glob("part_*.npz"))
            for part in parts:
                try:
                    with np.load(part, allow_pickle=False) as data:
                        rows, embeddings, tokens = data["rows"], data["embeddings"], data["tokens"]
                except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
                    log.warning("%s: unreadable (%s); its frames are embedded again", part, error)
                    continue
                out[rows], row_tokens[rows], committed[rows] = embeddings, tokens, True
            self.next_part = len(parts)
            return committed
        if self.dir.exists():
            log.info("%s: left by a run of another shard or other settings; starting from zero", self.dir)
            shutil.rmtree(self.dir)
        write_json(self.fingerprint, stamp)
        return committed

    def add(self, rows: np.ndarray) -> None:
        self.uncommitted.append(rows)

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.interval

    def commit(self, out: np.ndarray, row_tokens: np.ndarray) -> None:
        """Write the rows stored since the last commit as one part."""
        if self.uncommitted:
            rows = np.concatenate(self.uncommitted)
            with atomic_open(self.dir / f"part_{self.next_part:06d}.npz", "wb") as handle:
                np.savez(handle, rows=rows, embeddings=out[rows], tokens=row_tokens[rows])
            self.next_part += 1
            self.uncommitted = []
        self.last = time.monotonic()

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
