"""Where a checkpoint comes from (a local path, or a name to fetch from fair-esm or Hugging Face),
and loading pickled checkpoints without running code from them."""

import re
from pathlib import Path

from ..errors import InputError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_local(checkpoint: str) -> bool:
    """True for a path on disk: an existing path, a '.pt' file, or anything that is neither a
    bare fair-esm name nor an 'org/name' Hugging Face id ('./org/name' forces a path)."""
    if Path(checkpoint).exists() or checkpoint.endswith(".pt"):
        return True
    return "/" in checkpoint and not _HUB_ID.match(checkpoint)


def load_weights(path: Path, what: str, allowed: list = (), mmap: bool = False):
    """torch.load with weights_only=True: tensors, plain containers and the `allowed` globals only.
    A pickle that would build anything else (and so could run code) is refused with one line."""
    import torch  # not at the top: the Snakefile imports this module, and torch takes seconds to load

    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as error:  # noqa: BLE001 - any unpickling failure means: refuse the file
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise InputError(
            f"{path}: refused to load: not a {what} file, or it holds code that would run on loading ({reason})"
        ) from None
