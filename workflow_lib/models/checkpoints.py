"""Where a checkpoint comes from: a local path, or a name to fetch (fair-esm, Hugging Face)."""

import re
from pathlib import Path

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_local(checkpoint: str) -> bool:
    """True for a path on disk: an existing path, a '.pt' file, or anything that is neither a
    bare fair-esm name nor an 'org/name' Hugging Face id ('./org/name' forces a path)."""
    if Path(checkpoint).exists() or checkpoint.endswith(".pt"):
        return True
    return "/" in checkpoint and not _HUB_ID.match(checkpoint)
