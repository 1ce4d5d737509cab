"""SHA-256 of model files, recorded with every output made from them.

The model check keeps each file's digest in a store beside the models, and it and the embed jobs
reuse a digest while the file is unchanged: the same path, size, mtime, inode and ctime. mtime alone
can be set back (`cp -p`, `rsync -t`), ctime cannot: the kernel sets it on every change, and NFS and
Lustre serve the server's value to every client.
"""

import hashlib
import json
import logging
from pathlib import Path

from workflow_lib.cli.errors import InputError
from workflow_lib.io.locks import exclusive
from workflow_lib.io.outputs import atomic_open

log = logging.getLogger("workflow")


def sha256(path: str | Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def describe(paths: list[Path], known: dict | None = None) -> dict[str, dict]:
    """{path: {"size", "mtime_ns", "ctime_ns", "inode", "sha256"}}, reusing `known`'s still matching digests."""
    described = {}
    for path in paths:
        path = Path(path).absolute()  # not resolved: a Hugging Face snapshot links names to blobs
        stat = path.stat()
        entry = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns, "inode": stat.st_ino}
        earlier = (known or {}).get(str(path), {})
        same = all(earlier.get(k) == v for k, v in entry.items())
        entry["sha256"] = earlier["sha256"] if same and "sha256" in earlier else sha256(path)
        described[str(path)] = entry
    return described


def describe_kept(paths: list[Path], store: Path) -> dict[str, dict]:
    """describe(), reusing and keeping the digests in `store` (JSON). Jobs that share the store take
    turns; a store that cannot be written is only read, one that cannot be read is ignored."""
    try:
        with exclusive(store.with_name(f"{store.name}.lock")):
            kept = _read_store(store)
            described = describe(paths, kept)
            if any(kept.get(path) != entry for path, entry in described.items()):
                # entries of files no longer there go: the store stays one line a model file
                kept = {p: e for p, e in kept.items() if Path(p).exists()} | described
                with atomic_open(store) as handle:
                    json.dump(kept, handle, indent=2)
            return described
    except (OSError, InputError) as error:
        log.info("model file checksums not kept in %s (%s): hashed on every run", store, error)
        return describe(paths, _read_store(store))


def _read_store(store: Path) -> dict:
    try:
        kept = json.loads(store.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log.info("%s: unreadable (%s); hashing the model files again", store, error)
        return {}
    return kept if isinstance(kept, dict) else {}


def digests(described: dict[str, dict]) -> dict[str, str]:
    """{file name: sha256}: what HDF5 attributes and manifests record."""
    return {Path(path).name: entry["sha256"] for path, entry in described.items()}
