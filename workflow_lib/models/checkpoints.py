"""Where a checkpoint comes from (a local path, or a name to fetch from fair-esm or Hugging Face),
and loading pickled checkpoints without running code from them."""

import contextlib
import ctypes
import hashlib
import json
import mmap
import re
import struct
import sys
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from workflow_lib.cli.errors import InputError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
MANIFEST = "fetched.json"  # what fetch_models fetched, in models.cache_dir
# The tiny random demo models (workflow_lib/models/demo_models.py), by name: a report flags their results.
DEMO_ESM, DEMO_DNABERT = "esm2_t2_demo", "dnabert_s_demo"
DEMO_FILES = (f"{DEMO_ESM}.pt", DEMO_DNABERT)
# fair-esm's ESM-2 models: layers, embedding size (here, not in esm.py: the Snakefile checks the
# configured model at start-up without importing torch).
ESM2_MODELS = {
    "esm2_t6_8M_UR50D": (6, 320),
    "esm2_t12_35M_UR50D": (12, 480),
    "esm2_t30_150M_UR50D": (30, 640),
    "esm2_t33_650M_UR50D": (33, 1280),
    "esm2_t36_3B_UR50D": (36, 2560),
    "esm2_t48_15B_UR50D": (48, 5120),
}


def check_layer(model: str, checkpoint: str, layer: int | None, layers: int, source: str = "") -> None:
    """The one check of models.<model>.layer: 0 (the embeddings) up to the model's last layer (None)."""
    if layer is not None and not 0 <= layer <= layers:
        raise InputError(
            f"{source + ': ' if source else ''}models.{model}.layer: {layer} is out of range for {checkpoint} "
            f"({layers} layers); set it to {layers} (the last layer, as VirNucPro) or lower"
        )


def is_local(checkpoint: str) -> bool:
    """True for a path on disk: an existing path, a '.pt' file, or anything that is neither a
    bare fair-esm name nor an 'org/name' Hugging Face id ('./org/name' forces a path)."""
    if Path(checkpoint).exists() or checkpoint.endswith(".pt"):
        return True
    return "/" in checkpoint and not _HUB_ID.match(checkpoint)


def is_url(path: str) -> bool:
    return path.startswith(("http://", "https://"))


def classifier_path(classifier: str, cache_dir: str) -> str:
    """The classifier file that jobs read: the path itself, or where fetch_classifier puts a URL's
    download: in a folder of that URL's own, so that a file cached for another URL (one of the same
    name) is never taken for it, by the start-up's checks nor by a job."""
    if not is_url(classifier):
        return classifier
    name = PurePosixPath(urlsplit(classifier).path).name or "classifier.pth"
    return str(Path(cache_dir) / "classifier" / hashlib.sha256(classifier.encode()).hexdigest()[:16] / name)


def not_fetched(key: str, checkpoint: str, cache_dir: str | Path) -> InputError:
    """The error of a job that finds a named model missing from the cache (jobs never download)."""
    return InputError(
        f"{key}: '{checkpoint}' is not in the model cache {cache_dir}; run `snakemake --profile profiles/local "
        "fetch_models` on a machine with internet (then copy cache_dir if needed)"
    )


def load_weights(path: Path, what: str, allowed: list = (), mmap: bool = False):
    """torch.load with weights_only=True: tensors, plain containers and the `allowed` globals only.
    A pickle that would build anything else (and so could run code) is refused with one line."""
    import torch  # not at the top: the Snakefile imports this module, and torch takes seconds to load

    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as error:  # any unpickling failure means: refuse the file
        raise InputError(
            f"{path}: refused to load: not a {what} file, or it holds code that would run on loading "
            f"({_refusal(error)})"
        ) from None


def _refusal(error: Exception) -> str:
    """torch's reason, without its advice to load with weights_only=False (which would run the file's code)."""
    text = str(error).replace("WeightsUnpickler error:", "\n")  # its reason follows, on that line or the next
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return next((line for line in lines if "weights_only" not in line), type(error).__name__)[:200]


@contextlib.contextmanager
def uninitialised():
    """Modules built inside have their parameters allocated, not initialised: no time on random
    values the checkpoint replaces, and memory never written is not held. Not the meta device:
    building fair-esm's ESM-2 there imports torch._dynamo, which takes seconds in every job."""
    from torch.nn import init

    saved = {name: f for name, f in vars(init).items() if name.endswith("_") and not name.startswith("_")}
    for name in saved:
        setattr(init, name, lambda tensor, *args, **kwargs: tensor)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(init, name, function)


def converted(state: dict, convert) -> dict:
    """{name: convert(name, tensor)}, one tensor at a time, the pages of each source tensor handed
    back to the kernel once converted: else a memory-mapped checkpoint's pages stay resident beside
    the converted model until the load ends."""
    out = {}
    for name, tensor in state.items():
        out[name] = convert(name, tensor)
        if tensor.device.type == "cpu" and out[name].data_ptr() != tensor.data_ptr():
            _page_out(tensor.data_ptr(), tensor.nbytes)
    return out


# Linux >= 5.4: reclaim the pages now. Contents are kept (file pages are read again, anonymous ones
# swapped in), so a tensor sharing them (tied weights) still reads right; elsewhere a no-op.
MADV_PAGEOUT = 21


def _page_out(address: int, size: int) -> None:
    start = -(-address // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages only: the edges may hold other tensors
    end = (address + size) // mmap.PAGESIZE * mmap.PAGESIZE
    if sys.platform == "linux" and end > start:  # an older kernel answers EINVAL: nothing is released
        ctypes.CDLL(None).madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_PAGEOUT)


_SAFETENSORS_DTYPES = {"float16": "F16", "bfloat16": "BF16", "float32": "F32"}


def write_safetensors(path: Path, tensors: dict, metadata: dict[str, str]) -> None:
    """`tensors` (on any device) to a safetensors file, one tensor at a time: never a second copy of
    them all on the host, as safetensors' save_file makes of GPU tensors."""
    import torch

    # widest dtypes first, as safetensors' own writer orders them: each tensor stays aligned to its size
    names = sorted(tensors, key=lambda name: (-tensors[name].element_size(), name))
    header, offset = {"__metadata__": metadata}, 0
    for name in names:
        tensor = tensors[name]
        dtype = _SAFETENSORS_DTYPES[str(tensor.dtype).removeprefix("torch.")]
        header[name] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, offset + tensor.nbytes]}
        offset += tensor.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(text)) + text)
        for name in names:
            handle.write(tensors[name].detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().data)
