"""SHA-256 of model files, recorded with every output made from them.

Hashing a 5.7 GB ESM-2 3B checkpoint takes seconds; the run's model check hashes the local files
once and embed jobs reuse those digests for files whose size and modification time are unchanged.
"""

import hashlib
from pathlib import Path

_BLOCK = 1 << 22


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def describe(paths: list[Path], known: dict | None = None) -> dict[str, dict]:
    """{resolved path: {"size", "mtime_ns", "sha256"}}; digests in `known` (an earlier describe()
    of the same files) are reused when size and modification time still match."""
    described = {}
    for path in paths:
        path = Path(path).absolute()  # not resolved: a Hugging Face snapshot links names to blobs
        stat = path.stat()
        entry = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        earlier = (known or {}).get(str(path), {})
        same = all(earlier.get(k) == v for k, v in entry.items())
        entry["sha256"] = earlier["sha256"] if same and "sha256" in earlier else sha256(path)
        described[str(path)] = entry
    return described


def digests(described: dict[str, dict]) -> dict[str, str]:
    """{file name: sha256}: what HDF5 attributes and manifests record."""
    return {Path(path).name: entry["sha256"] for path, entry in described.items()}
