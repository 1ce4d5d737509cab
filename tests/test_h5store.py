"""The embeddings HDF5 contract on disk: chunked, compressed, float32 or float16, old files
readable, and readers that hold one block of rows at a time."""

import h5py
import numpy as np
import pytest
from helpers import read_embeddings, write_embeddings

from workflow_lib.cli.errors import InputError
from workflow_lib.io import h5store

ATTRS = dict.fromkeys(h5store.REQUIRED_ATTRS, "x")


def embeddings(n, dim, seed):
    return np.random.default_rng(seed).normal(0, 1, (n, dim)).astype(np.float32)


@pytest.mark.parametrize("storage", ["float32", "float16"])
def test_chunked_compressed_file_round_trips(tmp_path, storage):
    ids, values = [f"f{i}" for i in range(2500)], embeddings(2500, 40, 0)
    write_embeddings(tmp_path / "e.h5", ids, values, ATTRS, storage)
    with h5py.File(tmp_path / "e.h5") as handle:
        data = handle["embeddings"]
        assert data.dtype == np.dtype(storage) and data.chunks == (h5store.CHUNK_ROWS, 40)
        assert data.compression == "lzf" and data.shuffle and handle.attrs["storage"] == storage
    got_ids, got, attrs = read_embeddings(tmp_path / "e.h5")
    assert got_ids == ids and got.dtype == np.float32
    assert np.array_equal(got, values.astype(storage).astype(np.float32)) and attrs["storage"] == storage


def test_writer_takes_rows_in_any_order(tmp_path, monkeypatch):
    """Rows put out of order, flushed in small pieces (partial chunks read back and rewritten),
    give what one whole write gives."""
    monkeypatch.setattr(h5store, "CHUNK_ROWS", 64)
    ids, values = [f"f{i}" for i in range(1000)], embeddings(1000, 8, 1)
    order = np.random.default_rng(2).permutation(1000)
    with h5store.create(tmp_path / "e.h5", ids, 8, "float32") as writer:
        for piece in np.array_split(order, 37):
            writer.put(piece, values[piece])
            if piece[0] % 3 == 0:
                writer.flush()
        assert not (tmp_path / "e.h5").exists()  # nothing looks finished before the end
        writer.attrs = ATTRS
    assert np.array_equal(read_embeddings(tmp_path / "e.h5")[1], values)


def test_block_reader_reads_one_block_at_a_time(tmp_path, monkeypatch):
    ids = [f"f{i}" for i in range(1000)]
    dna, esm = embeddings(1000, 12, 3), embeddings(1000, 20, 4)
    write_embeddings(tmp_path / "dna.h5", ids, dna, ATTRS, "float16")
    # a file written before `storage`: contiguous float32, no storage attribute
    with h5py.File(tmp_path / "esm.h5", "w") as handle:
        handle.create_dataset("ids", data=np.array(ids, dtype=object), dtype=h5py.string_dtype("utf-8"))
        handle.create_dataset("embeddings", data=esm)
        handle.attrs.update(ATTRS)
    reads = []
    original_read, original_get = h5py.Dataset.read_direct, h5py.Dataset.__getitem__

    def read_direct(self, dest, source_sel=None, dest_sel=None):
        reads.append(source_sel[0].stop - source_sel[0].start)
        return original_read(self, dest, source_sel, dest_sel)

    def getitem(self, key, *args):
        assert isinstance(key, slice) and key.stop - key.start <= 128, key  # never a whole dataset
        return original_get(self, key, *args)

    monkeypatch.setattr(h5py.Dataset, "read_direct", read_direct)
    monkeypatch.setattr(h5py.Dataset, "__getitem__", getitem)
    got_ids, blocks = [], []
    with h5store.FeatureBlocks(tmp_path / "dna.h5", tmp_path / "esm.h5", rows=128) as reader:
        assert reader.block is None and (reader.n, reader.dims) == (1000, (12, 20))
        for rows, block_ids, block in reader:
            assert block.base is reader.block and block.shape == (rows.stop - rows.start, 32)
            got_ids += block_ids
            blocks.append(block.copy())
        assert reader.block.shape == (128, 32)
    monkeypatch.undo()
    assert max(reads) == 128 and sum(reads) == 2000
    assert got_ids == ids
    assert np.array_equal(np.concatenate(blocks), np.hstack([dna.astype(np.float16).astype(np.float32), esm]))
    whole = np.full((1002, 32), np.nan, dtype=np.float32)  # read into rows of a larger array, scattered
    scattered = np.random.default_rng(0).permutation(np.arange(1, 1001))
    with h5store.FeatureBlocks(tmp_path / "dna.h5", tmp_path / "esm.h5", rows=128) as reader:
        assert reader.read_into(whole, scattered) == ids and reader.block is None  # not the iterator's block
    assert np.array_equal(whole[scattered], np.concatenate(blocks)) and np.isnan(whole[[0, 1001]]).all()


def test_block_reader_checks_ids_per_block(tmp_path):
    ids = [f"f{i}" for i in range(300)]
    write_embeddings(tmp_path / "dna.h5", ids, embeddings(300, 4, 5), ATTRS)
    write_embeddings(tmp_path / "esm.h5", ids[:200] + ["other"] + ids[201:], embeddings(300, 4, 6), ATTRS)
    with h5store.FeatureBlocks(tmp_path / "dna.h5", tmp_path / "esm.h5", rows=100) as reader:
        blocks = iter(reader)
        next(blocks), next(blocks)
        with pytest.raises(InputError, match="hold different frames"):
            next(blocks)
    write_embeddings(tmp_path / "short.h5", ids[:5], embeddings(5, 4, 7), ATTRS)
    with pytest.raises(InputError, match="hold different frames"):
        h5store.FeatureBlocks(tmp_path / "dna.h5", tmp_path / "short.h5")


def test_empty_shard(tmp_path):
    write_embeddings(tmp_path / "a.h5", [], np.zeros((0, 4), np.float32), ATTRS, "float16")
    write_embeddings(tmp_path / "b.h5", [], np.zeros((0, 6), np.float32), ATTRS)
    with h5store.FeatureBlocks(tmp_path / "a.h5", tmp_path / "b.h5") as reader:
        assert reader.n == 0 and reader.dim == 10 and list(reader) == []
