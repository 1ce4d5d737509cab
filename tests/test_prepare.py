"""prepare against VirNucPro's own frames (fixtures made by its units.py), quirks included."""

import gzip
import re
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers import DATA, GENOMES, ROOT, read_fasta, read_tsv

from harness.stages import prepare_command, prepare_into, shard_fastas
from workflow_lib.io.seqio import read_records
from workflow_lib.io.sharding import BINS, SKETCH, read_bins, sketches
from workflow_lib.io.tables import read_table
from workflow_lib.prepare.chunking import chunk_bounds
from workflow_lib.prepare.job import short_records_advice

FIXTURES = sorted((DATA / "virnucpro_frames").glob("*.tsv"))


def _input_of(fixture: Path) -> Path:
    name = fixture.name.rsplit(".chunk", 1)[0]
    return DATA / "virnucpro_quirks.fasta" if name == "virnucpro_quirks" else GENOMES / f"{name}.fasta"


def _frames_in_order(outdir: Path) -> list[str]:
    """frame_id, nucleotide, protein per frame, in frames-table order, read back from the shards."""
    sequences = {}
    for fna, faa in zip(shard_fastas(outdir, "fna"), shard_fastas(outdir, "faa"), strict=True):
        for (fid, nucleotide), (fid2, protein) in zip(read_fasta(fna), read_fasta(faa), strict=True):
            assert fid == fid2, "the .fna and .faa of a shard hold the same IDs in the same order"
            assert fid not in sequences, "every frame is in exactly one shard"
            sequences[fid] = (nucleotide, protein)
    rows = read_tsv(outdir / "frames.tsv.gz")
    assert len(sequences) == len(rows), "every frame is in exactly one shard"
    return [f"{r['frame_id']}\t{sequences[r['frame_id']][0]}\t{sequences[r['frame_id']][1]}" for r in rows]


def assert_filled_in_order(outdir: Path, shard_tokens: int, counts: dict) -> list[dict]:
    """prepare's shards in `outdir` were filled in order, up to `shard_tokens` ESM-2 tokens (a frame
    costs its protein plus 2): each shard's frames are one run of the frames table (shard numbers
    never fall along it); no shard but a one-frame shard holds more than `shard_tokens`; each shard
    but the last would have overflowed with the next frame; the shards table and the counts give
    each shard's frames and tokens as its FASTAs hold them. Each shard's FASTA pair holds its frames
    by bin (the CRC-32 of the protein), then in table order, and the bins file counts them per bin.
    Returns the shards table's rows."""
    shards = read_table(outdir / "shards.tsv").to_dict("records")
    bins = read_bins(outdir / "bins.npz")
    sketched = list(sketches(outdir / "bins.npz"))
    assert all(counts.shape == (len(shards), BINS) for counts in bins.values())
    n = len(shards)
    assert n == counts["shards"] >= 1 and [row["shard"] for row in shards] == list(range(n))
    assert [row["tokens"] for row in shards] == counts["shard_tokens"]
    assert sorted(path.name for path in (outdir / "shards").iterdir()) == sorted(
        f"shard_{i}.{suffix}" for i in range(n) for suffix in ("fna", "faa")
    )
    frames = read_tsv(outdir / "frames.tsv.gz")
    shard_of = [int(f["shard"]) for f in frames]
    tokens = [int(f["protein_length"]) + 2 for f in frames]
    assert shard_of == sorted(shard_of), "shard numbers never fall along the frames table"
    assert sum(row["frames"] for row in shards) == len(frames) == counts["frames"]
    start = 0
    for row, fna, faa in zip(shards, shard_fastas(outdir, "fna"), shard_fastas(outdir, "faa"), strict=True):
        stop = start + row["frames"]
        assert row["frames"] > 0 or n == 1, "only a sample without a frame has an empty shard"
        assert shard_of[start:stop] == [row["shard"]] * row["frames"], "a shard's frames are one run of the table"
        by_bin = sorted(frames[start:stop], key=lambda f: int(f["bin"]))  # stable: table order within a bin
        proteins = read_fasta(faa)
        assert [fid for fid, _ in read_fasta(fna)] == [fid for fid, _ in proteins] == [f["frame_id"] for f in by_bin]
        assert [int(f["bin"]) for f in by_bin] == [zlib.crc32(protein.encode()) % BINS for _, protein in proteins]
        assert row["tokens"] == sum(tokens[start:stop]) == sum(len(protein) + 2 for _, protein in proteins)
        assert (
            bins["frames"][row["shard"]].sum() == row["frames"] and bins["tokens"][row["shard"]].sum() == row["tokens"]
        )
        kept: dict[int, dict[int, int]] = {}  # per bin, its proteins' hashes (the CRC's bits above the bin's)
        for _, protein in proteins:
            crc = zlib.crc32(protein.encode())
            hashes = kept.setdefault(crc % BINS, {})
            hashes[crc >> 12] = min(hashes.get(crc >> 12, len(protein) + 2), len(protein) + 2)
        smallest = [[(h + 1) << 30 | tokens for h, tokens in sorted(kept.get(b, {}).items())] for b in range(BINS)]
        assert sketched[row["shard"]].tolist() == [(s + [0] * SKETCH)[:SKETCH] for s in smallest]
        for suffix, path in (("fna", fna), ("faa", faa)):
            assert bins[f"{suffix}_bytes"][row["shard"]].sum() == path.stat().st_size
        assert row["tokens"] <= shard_tokens or row["frames"] == 1, "only a one-frame shard may be larger"
        if stop < len(frames):
            assert row["tokens"] + tokens[stop] > shard_tokens, "a shard is closed only when the next frame overflows"
        start = stop
    return shards


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_frames_equal_virnucpro(fixture, tmp_path):
    chunk_length = int(fixture.name.rsplit(".chunk", 1)[1].split(".")[0])
    counts = prepare_into(_input_of(fixture), tmp_path, 2000, chunk_length=chunk_length)
    expected = fixture.read_text().splitlines()[1:]
    assert _frames_in_order(tmp_path) == expected
    shards = assert_filled_in_order(tmp_path, 2000, counts)
    assert len(shards) > 1 or sum(counts["shard_tokens"]) <= 2000


def test_quirk_fixture_exercises_the_quirks():
    """The hand-made input covers what the bundled genomes do not: N runs and IUPAC codes
    (dropped codons), a short last chunk, records shorter than a chunk, lowercase."""
    rows = [
        line.split("\t")
        for line in (DATA / "virnucpro_frames" / "virnucpro_quirks.chunk500.tsv").read_text().splitlines()[1:]
    ]
    rows300 = [
        line.split("\t")
        for line in (DATA / "virnucpro_frames" / "virnucpro_quirks.chunk300.tsv").read_text().splitlines()[1:]
    ]
    # Dropped codons: a frame whose nucleotide slice holds an ambiguous base.
    assert any(set(n) - set("ACGT") for _, n, _ in rows + rows300)
    # The one-base-longer slice: a frame that does not end at the chunk end has 3*len(protein)+1 bases.
    assert any(len(n) == 3 * len(p) + 1 for _, n, p in rows)
    assert any(fid.startswith("softmasked") for fid, _, _ in rows)


def test_short_last_chunk_quirk():
    """VirNucPro's step list runs out when lower + R mod n >= n: the last chunk then ends past L."""
    record, starts, ends = chunk_bounds(np.array([501, 1000, 1001, 250, 0]), 500)
    assert record.tolist() == [0, 0, 1, 1, 2, 2, 2, 3]
    assert list(zip(starts.tolist(), ends.tolist())) == [
        (0, 500),
        (250, 501),  # 501 bp: the second chunk is 251 bp, not 500
        (0, 500),
        (500, 1000),
        (0, 500),
        (333, 833),
        (666, 1001),
        (0, 250),  # shorter than a chunk: one chunk of its own length; empty: none
    ]


# The "ok" record's 10 frames cost 101 or 102 tokens each, 1,014 in all: 2 a shard at 250 tokens,
# one each when a frame alone overflows, 9 in the first shard of 1,013, all in one of 1,014.
@pytest.mark.parametrize("shard_tokens, n_shards", [(50, 10), (250, 5), (1013, 2), (1014, 1)])
def test_tables(tmp_path, shard_tokens, n_shards):
    fasta = tmp_path / "in.fa"
    fasta.write_text(
        ">empty\n\n>short\nACGTACGTAC\n>ok some description\n"
        + "ATG" * 200
        + "\n>amb\n"
        + "N" * 100
        + "ACGT" * 25
        + "\n"
    )
    counts = prepare_into(
        fasta, tmp_path / "out", shard_tokens, chunk_length=300, min_length=50, max_ambiguous_fraction=0.4
    )
    sequences = read_tsv(tmp_path / "out" / "sequences.tsv.gz")
    assert [(s["sequence_id"], s["status"]) for s in sequences] == [
        ("empty", "empty"),
        ("short", "too_short"),
        ("ok", "ok"),
        ("amb", "too_ambiguous"),
    ]
    assert sequences[3]["ambiguous_fraction"] == "0.5"
    ok = sequences[2]
    assert (ok["length"], ok["n_chunks"]) == ("600", "2")
    frames = read_tsv(tmp_path / "out" / "frames.tsv.gz")
    assert int(ok["n_frames"]) == len(frames) == counts["frames"]
    assert {(f["chunk"], f["chunk_start"], f["chunk_end"]) for f in frames} <= {("1", "1", "300"), ("2", "301", "600")}
    assert all(f["sequence_id"] == "ok" and int(f["protein_length"]) > 0 for f in frames)
    assert len(assert_filled_in_order(tmp_path / "out", shard_tokens, counts)) == counts["shards"] == n_shards
    assert sum(counts["shard_tokens"]) == sum(int(f["protein_length"]) + 2 for f in frames) == 1014


def test_a_sample_without_a_frame_gets_one_empty_shard(tmp_path):
    """Human mtDNA has no stop-free frame at 500 bp: one shard, empty, and a one-row shards table."""
    counts = prepare_into(GENOMES / "human_mtDNA.fasta", tmp_path, 100, chunk_length=500)
    assert (counts["frames"], counts["shards"], counts["shard_tokens"]) == (0, 1, [0])
    assert (tmp_path / "shards.tsv").read_text() == "shard\tframes\ttokens\n0\t0\t0\n"
    assert [path.read_bytes() for path in (*shard_fastas(tmp_path, "fna"), *shard_fastas(tmp_path, "faa"))] == [
        b"",
        b"",
    ]
    assert read_tsv(tmp_path / "frames.tsv.gz") == [] and len(read_tsv(tmp_path / "sequences.tsv.gz")) == 1
    assert_filled_in_order(tmp_path, 100, counts)


def _frames(tmp_path, text: str, **policy) -> dict[str, tuple[str, str]]:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "in.fa").write_text(text)
    out = tmp_path / "out"
    prepare_into(tmp_path / "in.fa", out, **policy)
    ((fna,), (faa,)) = shard_fastas(out, "fna"), shard_fastas(out, "faa")
    return {fid: (nuc, prot) for (fid, nuc), (_, prot) in zip(read_fasta(fna), read_fasta(faa))}


def test_nucleotide_slice_is_one_base_longer(tmp_path):
    """VirNucPro slices seq[f : f + 3*len(protein) + 1]: one base past the last codon."""
    frames = _frames(tmp_path, ">r\nATGAAACCCGGGTT\n")
    assert frames["r_chunk_1F1"] == ("ATGAAACCCGGGT", "MKPG")  # 13 bases for 4 codons
    assert frames["r_chunk_1F3"] == ("GAAACCCGGGTT", "ETRV")  # cut at the chunk end
    # R1 reads the reverse complement AACCCGGGTTTCAT: codons AAC CCG GGT TTC, then 'A' and 'T'.
    assert frames["r_chunk_1R1"] == ("AACCCGGGTTTCA", "NPGF")


def test_drop_policy_drops_ambiguous_codons(tmp_path):
    """VirNucPro looks codons up with a '' default: a codon with N or an IUPAC code vanishes,
    and the nucleotide slice (3 * protein length + 1) then falls short of the frame's span."""
    text = ">r\nATGNNNATGATGRATATG\n"
    drop = _frames(tmp_path / "drop", text)
    x = _frames(tmp_path / "x", text, ambiguous_codons="X")
    assert drop["r_chunk_1F1"] == ("ATGNNNATGATGR", "MMMM")
    assert x["r_chunk_1F1"] == ("ATGNNNATGATGRATATG", "MXMMXM")


def test_compressed_inputs_give_the_same_outputs(tmp_path):
    import bz2
    import lzma

    source = GENOMES / "phiX174.fasta"
    data = source.read_bytes()
    outputs = []
    for name, compress in (
        ("plain.fa", bytes),
        ("x.fa.gz", gzip.compress),
        ("x.fa.bz2", bz2.compress),
        ("x.xz", lzma.compress),
        ("bom.fa", lambda data: b"\xef\xbb\xbf" + data),  # a byte order mark, as some editors write
    ):
        path = tmp_path / name
        path.write_bytes(compress(data))
        out = tmp_path / f"out_{name}"
        assert prepare_into(path, out, 336)["shards"] == 2  # 4 frames of 168 tokens
        shards = [*shard_fastas(out, "fna"), *shard_fastas(out, "faa")]
        outputs.append(
            [(out / f).read_bytes() for f in ("frames.tsv.gz", "shards.tsv")] + [p.read_bytes() for p in shards]
        )
    assert all(o == outputs[0] for o in outputs)


def test_rna_is_read_as_dna(tmp_path):
    """U read as T: an RNA record gives the DNA's frames and counts, not six frames of dropped codons."""
    lines = (GENOMES / "phiX174.fasta").read_text().splitlines(keepends=True)
    (tmp_path / "dna.fa").write_text("".join(lines))
    (tmp_path / "rna.fa").write_text("".join(line if line[0] == ">" else line.replace("T", "U") for line in lines))
    prepared = []
    for name in ("dna", "rna"):
        prepare_into(tmp_path / f"{name}.fa", tmp_path / name, 336)
        files = [
            "frames.tsv.gz",
            "sequences.tsv.gz",
            *(f"shards/{p.name}" for p in (tmp_path / name / "shards").iterdir()),
        ]
        prepared.append({file: (tmp_path / name / file).read_bytes() for file in files})
    assert prepared[0] == prepared[1]


def test_fastq_equals_fasta(tmp_path):
    records = [(f"read{i}", seq) for i, (_, seq) in enumerate(read_fasta_records(GENOMES / "phiX174.fasta", 300))]
    (tmp_path / "r.fa").write_text("".join(f">{i}\n{s}\n" for i, s in records))
    (tmp_path / "r.fq").write_text("".join(f"@{i}\n{s}\n+\n{'I' * len(s)}\n" for i, s in records))
    assert prepare_into(tmp_path / "r.fa", tmp_path / "fa", 500, chunk_length=300)["shards"] > 1
    prepare_into(tmp_path / "r.fq", tmp_path / "fq", 500, chunk_length=300)
    for name in ("frames.tsv.gz", "shards.tsv", *(f"shards/{p.name}" for p in (tmp_path / "fa" / "shards").iterdir())):
        assert (tmp_path / "fa" / name).read_bytes() == (tmp_path / "fq" / name).read_bytes(), name


def read_fasta_records(path: Path, read_length: int):
    seq = "".join(line.strip() for line in path.read_text().splitlines() if not line.startswith(">"))
    return [(i, seq[i : i + read_length]) for i in range(0, len(seq) - read_length, read_length)]


def test_parser_across_block_boundaries(tmp_path, monkeypatch):
    """Records, line breaks (LF or CRLF) and '\\n>' split across read blocks of any size parse the
    same, also when a record spans many blocks (collected without its line breaks)."""
    import random

    from workflow_lib.io import seqio

    rng = random.Random(0)
    for trial in range(60):
        records = [
            (f"r{i}", "".join(rng.choice("ACGTacgtN") for _ in range(rng.randrange(0, 200))))
            for i in range(rng.randrange(1, 12))
        ]
        width, eol = rng.choice([0, 7, 60]), rng.choice(["\n", "\r\n", "\n\n"])
        text = "".join(
            f">{name} some description{eol}"
            + ("".join(seq[j : j + width] + eol for j in range(0, len(seq), width)) if width else seq + eol)
            for name, seq in records
        )
        (tmp_path / "in.fa").write_bytes(text.encode())
        monkeypatch.setattr(seqio, "_BLOCK", rng.choice([1, 2, 3, 5, 64]))
        parsed = [(rid, seq.decode()) for rid, _, seq in seqio.read_records(tmp_path / "in.fa")]
        assert parsed == [(name, seq.upper()) for name, seq in records], trial


def test_fastq_with_trailing_blank_lines(tmp_path):
    from workflow_lib.io.seqio import read_records

    (tmp_path / "r.fq").write_text("@r1\nACGT\n+\nIIII\n@r2\n\n+\n\n" + "\n" * 6)  # r2 is an empty read
    assert [(rid, seq) for rid, _, seq in read_records(tmp_path / "r.fq")] == [("r1", b"ACGT"), ("r2", b"")]


def test_cli_logs_progress_lines(tmp_path):
    """The prepare CLI logs records done, rate and ETA at the interval asked for, then a final line."""
    from harness.stages import write_reads

    write_reads(tmp_path / "reads.fa", 6000, 500, seed=1)  # 3 Mb: three batches of 1 Mb
    command = prepare_command(tmp_path / "reads.fa", tmp_path / "out", "--progress-seconds", "0.000001")
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = re.findall(
        r"INFO ([\d,]+) records, ([\d.,]+)/s, (\d+)% done, ETA ([\d,]+) s, [\d,]+ frames kept", result.stderr
    )
    assert len(lines) >= 2, result.stderr  # one per batch: three batches, the last one has no ETA
    done = [int(d.replace(",", "")) for d, _, _, _ in lines]
    assert done == sorted(done) and done[-1] < 6000 and all(float(rate.replace(",", "")) > 0 for _, rate, _, _ in lines)
    assert re.search(r"INFO 6,000 records, [\d.,]+/s, [\d,]+ chunks, [\d,]+ frames kept\n", result.stderr)
    command[command.index("--progress-seconds") + 1] = "0"
    bad = subprocess.run(command, capture_output=True, text=True)
    assert bad.returncode == 2 and "--progress-seconds: expected a positive number, got 0" in bad.stderr


@pytest.mark.parametrize(
    "lengths, chunk_length, advice",
    [
        ([400] * 9 + [350], 500, "chunk_length 300 with VirNucPro's 300 bp classifier fits them better"),
        # at 300 already, the advice is not 300 again
        (
            [150] * 9 + [100],
            300,
            "no published classifier is made for chunks this short: train one at chunk_length 150",
        ),
    ],
    ids=["longer_than_300", "shorter_than_300"],
)
def test_advice_for_short_records_fits_them(lengths, chunk_length, advice):
    histogram = np.bincount(lengths, minlength=chunk_length)
    text = short_records_advice(histogram, 12)
    assert text.startswith(f"10 of 12 records are shorter than chunk_length {chunk_length} (median {lengths[0]} bp")
    assert advice in text and "chunk_length 300 with" not in text.replace(advice, "")


def test_reads_shorter_than_the_chunk_length_are_warned_about(tmp_path):
    """150 bp reads at chunk_length 500 are scored, but the job warns, and its warning reaches the
    console through the rules' wrapper (scripts/run_logged.sh), as does a failed job's error line."""
    ((_, _, genome),) = read_records(GENOMES / "phiX174.fasta")
    reads = tmp_path / "reads.fa"
    reads.write_bytes(b"".join(b">r%d\n%s\n" % (i, genome[i * 150 : i * 150 + 150]) for i in range(20)))
    command = prepare_command(reads, tmp_path / "out", "--chunk-length", "500")
    logged = ["bash", str(ROOT / "scripts" / "run_logged.sh"), str(tmp_path / "prepare.log")]
    result = subprocess.run(logged + command, capture_output=True, text=True)
    assert result.returncode == 0
    warning = f"{reads}: 20 of 20 records are shorter than chunk_length 500 (median 150 bp, 10th percentile 150 bp)"
    assert warning in (tmp_path / "prepare.log").read_text()
    assert [line for line in result.stderr.splitlines() if "WARNING" in line] == [
        line for line in (tmp_path / "prepare.log").read_text().splitlines() if "WARNING" in line
    ]
    assert warning in result.stderr and "reconciled" not in result.stderr  # warnings only
    failed = subprocess.run(
        logged + prepare_command(tmp_path / "none.fa", tmp_path / "out"), capture_output=True, text=True
    )
    assert failed.returncode == 2 and failed.stderr.startswith("error: ") and len(failed.stderr.splitlines()) == 1
