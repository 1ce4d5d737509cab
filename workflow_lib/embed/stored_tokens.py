"""A shard's token IDs for a model whose tokens are stored (DNABERT-S), made once by the tokenize job:
the embed job's loader workers read them instead of running the BPE tokenizer, that job's host limit.
HDF5: `ids`, every record's tokens end to end (special tokens included), `offsets` (int64, where
record i starts, then the total), attributes `shard_sha256` and `tokenizer_sha256`: a file made from
another shard or tokenizer is refused.
"""

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np

from workflow_lib.cli.errors import InputError
from workflow_lib.io import checksums
from workflow_lib.io.outputs import atomic_path
from workflow_lib.io.sharding import ShardIndex
from workflow_lib.models import loading_module

log = logging.getLogger("workflow")

IDS_CHUNK = 1 << 20  # tokens per HDF5 chunk of `ids`


def tokenize_shard(
    architecture: str, checkpoint: str, cache_dir: str | None, known: dict, shard_path: str | Path, output: str | Path
) -> int:
    """The tokenize job: the tokenizer of a checkpoint of `architecture` over a shard's sequences,
    block by block into `output`; its token count. `known`: the model check's digests of the
    checkpoint's files."""
    start = time.monotonic()
    tokenizer, encode, vocab_size = loading_module(architecture).stored_tokenizer(checkpoint, cache_dir)
    digest = checksums.digests(checksums.describe([tokenizer], known))[tokenizer.name]
    index = ShardIndex.read(shard_path)
    dtype = np.uint16 if vocab_size <= 1 << 16 else np.int32
    offsets = np.zeros(len(index) + 1, dtype=np.int64)
    with atomic_path(output) as tmp, h5py.File(tmp, "w") as h5:
        ids = h5.create_dataset("ids", shape=(0,), maxshape=(None,), dtype=dtype, chunks=(IDS_CHUNK,))
        for b in range(index.n_blocks):
            encoded = encode(index.read_block(b))
            first = b * index.block_size
            lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
            offsets[first + 1 : first + 1 + len(encoded)] = offsets[first] + np.cumsum(lengths)
            ids.resize((int(offsets[first + len(encoded)]),))
            if encoded:
                ids[int(offsets[first]) :] = np.concatenate(encoded).astype(dtype)
        h5.create_dataset("offsets", data=offsets)
        h5.attrs.update(shard_sha256=index.sha256, tokenizer_sha256=digest)
    n_tokens, seconds = int(offsets[-1]), time.monotonic() - start
    rate = n_tokens / max(seconds, 1e-9)
    log.info(f"{n_tokens} tokens of {shard_path} in {seconds:.1f} s ({rate:.0f} tokens/s) into {output}")
    return n_tokens


def checked(path: str | Path, index: ShardIndex, tokenizer_sha256: str) -> Callable[[int], list[np.ndarray]]:
    """Block b's token arrays from the tokens file of this shard and tokenizer (picklable, for the
    loader workers), or a one-line error."""
    try:
        with h5py.File(path, "r") as h5:
            made = (h5.attrs.get("shard_sha256"), h5.attrs.get("tokenizer_sha256"), len(h5["offsets"]) - 1)
    except (OSError, KeyError) as error:  # HDF5 checks a file's length against its superblock on opening
        raise InputError(f"{path}: not a readable tokens file ({error}); delete it and run again") from None
    if made != (index.sha256, tokenizer_sha256, len(index)):
        raise InputError(f"{path}: tokens of another shard or tokenizer than {index.path}; delete it and run again")
    return functools.partial(read_tokens, Path(path), index.block_size)


def read_tokens(path: Path, block_size: int, b: int) -> list[np.ndarray]:
    """Block b's token arrays (int64)."""
    with h5py.File(path, "r") as h5:
        offsets = h5["offsets"][b * block_size : (b + 1) * block_size + 1]
        ids = h5["ids"][offsets[0] : offsets[-1]].astype(np.int64)
    return np.split(ids, offsets[1:-1] - offsets[0])
