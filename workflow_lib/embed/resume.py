"""Resuming a killed embed job: results are committed in parts beside the output, so that a
rerun embeds only what was not committed, in the same batches, and writes the same file.

Each part holds the rows written to the output since the previous part, as stored, written under a
temporary name and renamed, so a kill leaves only whole parts. Parts belong to one shard and one set
of settings (the fingerprint): a rerun with anything else starts from zero. The unfinished output is
written in the same directory (`scratch`), so a killed job leaves nothing that looks like its output.
"""

import json
import logging
import os
import shutil
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from workflow_lib import __version__
from workflow_lib.cli.settings import EmbedSettings
from workflow_lib.io.outputs import atomic_open
from workflow_lib.io.tables import write_json

log = logging.getLogger("workflow")


class Commits:
    def __init__(self, output_path: str | Path, fingerprint: dict, interval: float):
        output_path = Path(output_path)
        self.dir = output_path.with_name(f".{output_path.name}.parts")
        self.fingerprint, self.interval = fingerprint, interval
        self.last = time.monotonic()
        self.next_part = 0
        self.parts: list[Path] = []

    @property
    def scratch(self) -> Path:
        """Where this job writes its output until it is complete."""
        return self.dir / f"output.tmp{os.getpid()}.h5"

    def open(self) -> None:
        """Keep an earlier run's parts made with this fingerprint, else start from zero."""
        stamp = self.dir / "fingerprint.json"
        if _read_stamp(stamp) == self.fingerprint:
            for old in self.dir.glob("output.tmp*"):
                old.unlink(missing_ok=True)
            self.parts = sorted(self.dir.glob("part_*.npz"))
            self.next_part = len(self.parts)
            return
        if self.dir.exists():
            log.info("%s: left by a run of another shard or other settings, or cut short; starting from zero", self.dir)
            shutil.rmtree(self.dir)
        write_json(self.fingerprint, stamp)
        self.parts = []

    def replay(self, write: Callable[[np.ndarray, np.ndarray], None], row_tokens: np.ndarray) -> np.ndarray:
        """Each kept part's rows and embeddings to `write`, tokens to `row_tokens`; the committed rows' mask."""
        committed = np.zeros(len(row_tokens), dtype=bool)
        for part in self.parts:
            try:
                with np.load(part, allow_pickle=False) as data:
                    rows, embeddings, tokens = data["rows"], data["embeddings"], data["tokens"]
            except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as error:  # cut short, or not ours
                log.warning("%s: unreadable (%s); its frames are embedded again", part, error)
                continue
            write(rows, embeddings)
            row_tokens[rows], committed[rows] = tokens, True
        return committed

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.interval

    def commit(self, rows: np.ndarray, embeddings: np.ndarray, tokens: np.ndarray) -> None:
        """Write `rows` (sorted, as written to the output) as one part."""
        if rows.size:
            with atomic_open(self.dir / f"part_{self.next_part:06d}.npz", "wb") as handle:
                np.savez(handle, rows=rows, embeddings=embeddings, tokens=tokens)
            self.next_part += 1
        self.last = time.monotonic()

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def fingerprint(
    settings: EmbedSettings, shard_sha256: str, block_size: int, digests: dict, precision: str, device: torch.device
) -> dict:
    """What committed results depend on: the shard, the model files and the batches."""
    return {
        "shard_sha256": shard_sha256,
        "block_size": block_size,
        "model": settings.model,
        "checkpoint_sha256": digests,
        "layer": settings.layer,
        "precision": precision,
        "storage": settings.storage,
        "device": device.type,
        # a retry on another GPU model computes other last bits: it must not append to these rows
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "token_budget": settings.token_budget,
        "workflow_version": __version__,
    }


def _read_stamp(path: Path) -> dict | None:
    """The fingerprint a run left, or None: none, or a file cut short by a crash."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
