"""The chunk length a classifier file was made for, from what the file is, never from its name;
without torch, so that the Snakefile checks it at start-up.

- a classifier written by the train target records it inside (read from the torch archive's
  pickle with an unpickler that resolves no class, so nothing in the file runs);
- VirNucPro's published files are known by their git blob ids, as its repository records them
  (SHA-1 over b"blob <size>\\0" and the bytes: `git hash-object` of the file);
- any other file needs it stated: models.classifier_chunk_length.
"""

import hashlib
import io
import os
import pickle
import zipfile
from pathlib import Path

from workflow_lib.cli.errors import InputError

# github.com/Li-Jing-1997/VirNucPro, main: the published classifiers, their git blob ids and chunk lengths
VIRNUCPRO_URL = "https://github.com/Li-Jing-1997/VirNucPro/raw/main/{}_model.pth"
VIRNUCPRO_BLOBS = {
    "a0b5b85e7c1e44f00cde146d091beb82b2c8e855": 300,
    "fc35d5ef9f1f4564eea7036f34f4f8ec6000d33d": 500,
}
FORMAT = "virnucpro-mlp/1"  # of the train target's classifier files (classifier.save)
# The embedding models of a classifier file that records none (VirNucPro's published files, and the
# train target's before it recorded them), in the order of its input: VirNucPro's.
VIRNUCPRO_EMBEDDERS = (("dnabert", None), ("esm", None))


def git_blob_id(path: str | Path) -> str:
    with open(path, "rb") as handle:  # in blocks: start-up may be pointed at a model's gigabytes
        return hashlib.file_digest(handle, lambda: hashlib.sha1(b"blob %d\0" % os.path.getsize(path))).hexdigest()


class _Inert:
    """Whatever the pickle names (tensors, modules): built from nothing, holding nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def __setitem__(self, key, value):
        pass

    def __setstate__(self, state):
        pass


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return _Inert

    def persistent_load(self, pid):
        return None


def recorded_metadata(path: str | Path) -> dict:
    """The metadata that the train target writes into its classifier; {} for any other file."""
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
            data = _MetadataUnpickler(io.BytesIO(archive.read(name))).load() if name else None
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return {}
    return {k: v for k, v in data.items() if isinstance(v, (str, int, float)) or k == "embedders"}


def embedders_refusal(path: str | Path, metadata: dict, given: list[tuple[str, int | None]]) -> str | None:
    """Why the classifier at `path` cannot take the embeddings of the `given` models ((name, width
    or None), in input order); None when it can."""
    recorded = [tuple(e) for e in metadata.get("embedders", VIRNUCPRO_EMBEDDERS)]
    names = [name for name, _ in given]
    if [name for name, _ in recorded] != names:
        return (
            f"{path}: the classifier was trained on the models {', '.join(n for n, _ in recorded)} (in that order) but "
            f"models.embedders lists {', '.join(names)}; list those models, or train a classifier on these"
        )
    for (name, width), (_, trained) in zip(given, recorded):
        if None not in (width, trained) and width != trained:
            return (
                f"{path}: the classifier was trained on {trained} features of {name} but its checkpoint gives "
                f"{width}; configure the checkpoint it was trained on, or train a classifier on this one"
            )
    return None


def made_for(path: str | Path) -> tuple[int | None, str]:
    """(chunk length, how it is known) of a classifier file; (None, "") when the file does not say."""
    recorded = recorded_metadata(path).get("chunk_length")
    if recorded is not None:
        return int(recorded), "recorded in the file by the train target"
    blob = git_blob_id(path)
    if blob in VIRNUCPRO_BLOBS:
        length = VIRNUCPRO_BLOBS[blob]
        return length, f"VirNucPro's published {length}_model.pth (git blob {blob[:12]})"
    return None, ""


def check_chunk_length(path: str | Path, chunk_length: int, stated: int | None, source: str = "config") -> None:
    """Refuse, in one line, a classifier made for other chunks than `chunk_length`, or one that does
    not say unless models.classifier_chunk_length (`stated`) does."""
    length, how = made_for(path)
    if length is None and stated is None:
        raise InputError(
            f"{path}: cannot tell which chunk length this classifier was made for (it is neither written by the "
            "train target nor one of VirNucPro's published files); set models.classifier_chunk_length to it"
        )
    if length is not None and stated is not None and stated != length:
        raise InputError(
            f"{source}: models.classifier_chunk_length is {stated}, but {path} is {how}, made for {length} bp "
            "chunks; remove models.classifier_chunk_length"
        )
    length, how = (length, how) if length is not None else (stated, f"stated in {source}")
    if length != chunk_length:
        advice = VIRNUCPRO_URL.format(chunk_length) if chunk_length in (300, 500) else "a classifier trained for it"
        raise InputError(
            f"{path}: this classifier was made for {length} bp chunks ({how}) but chunk_length is {chunk_length}; "
            f"set chunk_length to {length}, or use a classifier for {chunk_length} bp chunks ({advice})"
        )
