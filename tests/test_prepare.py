"""prepare against VirNucPro's own frames (fixtures made by its units.py), quirks included."""

import gzip
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import DATA, GENOMES, ROOT, read_fasta, read_tsv
from stages import prepare_command, prepare_into

from workflow_lib.chunking import chunk_bounds
from workflow_lib.seqio import read_records

FIXTURES = sorted((DATA / "virnucpro_frames").glob("*.tsv"))


def _input_of(fixture: Path) -> Path:
    name = fixture.name.rsplit(".chunk", 1)[0]
    return DATA / "virnucpro_quirks.fasta" if name == "virnucpro_quirks" else GENOMES / f"{name}.fasta"


def _frames_in_order(outdir: Path, shards: int) -> list[str]:
    """frame_id, nucleotide, protein per frame, in frames-table order, read back from the shards."""
    sequences = {}
    for i in range(shards):
        for (fid, nucleotide), (fid2, protein) in zip(
            read_fasta(outdir / f"shard_{i}.fna"), read_fasta(outdir / f"shard_{i}.faa")
        ):
            assert fid == fid2, "the .fna and .faa of a shard hold the same IDs in the same order"
            sequences[fid] = (nucleotide, protein)
    rows = read_tsv(outdir / "frames.tsv.gz")
    assert len(sequences) == len(rows), "every frame is in exactly one shard"
    return [f"{r['frame_id']}\t{sequences[r['frame_id']][0]}\t{sequences[r['frame_id']][1]}" for r in rows]


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_frames_equal_virnucpro(fixture, tmp_path):
    chunk_length = int(fixture.name.rsplit(".chunk", 1)[1].split(".")[0])
    prepare_into(_input_of(fixture), tmp_path, 3, chunk_length=chunk_length)
    expected = fixture.read_text().splitlines()[1:]
    assert _frames_in_order(tmp_path, 3) == expected


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


def test_tables(tmp_path):
    fasta = tmp_path / "in.fa"
    fasta.write_text(
        ">empty\n\n>short\nACGTACGTAC\n>ok some description\n"
        + "ATG" * 200
        + "\n>amb\n"
        + "N" * 100
        + "ACGT" * 25
        + "\n"
    )
    counts = prepare_into(fasta, tmp_path / "out", 2, chunk_length=300, min_length=50, max_ambiguous_fraction=0.4)
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
    # Shards are balanced by ESM-2 tokens: no shard exceeds another by more than one frame.
    assert max(counts["shard_tokens"]) - min(counts["shard_tokens"]) <= 102


def _frames(tmp_path, text: str, **policy) -> dict[str, tuple[str, str]]:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "in.fa").write_text(text)
    out = tmp_path / "out"
    prepare_into(tmp_path / "in.fa", out, 1, **policy)
    return {
        fid: (nuc, prot)
        for (fid, nuc), (_, prot) in zip(read_fasta(out / "shard_0.fna"), read_fasta(out / "shard_0.faa"))
    }


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
    ):
        path = tmp_path / name
        path.write_bytes(compress(data))
        prepare_into(path, tmp_path / f"out_{name}", 2)
        outputs.append(
            [(tmp_path / f"out_{name}" / f).read_bytes() for f in ("frames.tsv.gz", "shard_0.faa", "shard_1.fna")]
        )
    assert all(o == outputs[0] for o in outputs)


def test_fastq_equals_fasta(tmp_path):
    records = [(f"read{i}", seq) for i, (_, seq) in enumerate(read_fasta_records(GENOMES / "phiX174.fasta", 300))]
    (tmp_path / "r.fa").write_text("".join(f">{i}\n{s}\n" for i, s in records))
    (tmp_path / "r.fq").write_text("".join(f"@{i}\n{s}\n+\n{'I' * len(s)}\n" for i, s in records))
    prepare_into(tmp_path / "r.fa", tmp_path / "fa", 2, chunk_length=300)
    prepare_into(tmp_path / "r.fq", tmp_path / "fq", 2, chunk_length=300)
    assert (tmp_path / "fa" / "frames.tsv.gz").read_bytes() == (tmp_path / "fq" / "frames.tsv.gz").read_bytes()


def read_fasta_records(path: Path, read_length: int):
    seq = "".join(line.strip() for line in path.read_text().splitlines() if not line.startswith(">"))
    return [(i, seq[i : i + read_length]) for i in range(0, len(seq) - read_length, read_length)]


def test_parser_across_block_boundaries(tmp_path, monkeypatch):
    """Records, line breaks (LF or CRLF) and '\\n>' split across read blocks of any size parse the
    same, also when a record spans many blocks (collected without its line breaks)."""
    import random

    from workflow_lib import seqio

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
    from workflow_lib.seqio import read_records

    (tmp_path / "r.fq").write_text("@r1\nACGT\n+\nIIII\n@r2\n\n+\n\n" + "\n" * 6)  # r2 is an empty read
    assert [(rid, seq) for rid, _, seq in read_records(tmp_path / "r.fq")] == [("r1", b"ACGT"), ("r2", b"")]


def test_cli_logs_progress_lines(tmp_path):
    """The prepare CLI logs records done, rate and ETA at the interval asked for, then a final line."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from reads import write_reads

    write_reads(tmp_path / "reads.fa", 6000, 500, seed=1)  # 3 Mb: three batches of 1 Mb
    command = prepare_command(tmp_path / "reads.fa", tmp_path / "out", 2, "--progress-seconds", "0.000001")
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    lines = re.findall(
        r"INFO ([\d,]+) records, ([\d.,]+)/s, (\d+)% done, ETA ([\d,]+) s, [\d,]+ frames kept", result.stderr
    )
    assert len(lines) >= 2, result.stderr  # one per batch: three batches, the last one has no ETA
    done = [int(d.replace(",", "")) for d, _, _, _ in lines]
    assert done == sorted(done) and done[-1] < 6000 and all(float(rate.replace(",", "")) > 0 for _, rate, _, _ in lines)
    assert re.search(r"INFO 6,000 records, [\d.,]+/s, [\d,]+ chunks, [\d,]+ frames kept\n", result.stderr)
    bad = subprocess.run(command[:-1] + ["0"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--progress-seconds: expected a positive number of seconds, got 0" in bad.stderr


def test_reads_shorter_than_the_chunk_length_are_warned_about(tmp_path):
    """150 bp reads at chunk_length 500 are scored, but the job warns, and its warning reaches the
    console through the rules' wrapper (scripts/run_logged.sh), as does a failed job's error line."""
    ((_, _, genome),) = read_records(GENOMES / "phiX174.fasta")
    reads = tmp_path / "reads.fa"
    reads.write_bytes(b"".join(b">r%d\n%s\n" % (i, genome[i * 150 : i * 150 + 150]) for i in range(20)))
    command = prepare_command(reads, tmp_path / "out", 1, "--chunk-length", "500")
    logged = ["bash", str(ROOT / "scripts" / "run_logged.sh"), str(tmp_path / "prepare.log")]
    result = subprocess.run(logged + command, capture_output=True, text=True)
    assert result.returncode == 0
    warning = f"{reads}: 20 of 20 records are shorter than chunk_length 500"
    assert warning in (tmp_path / "prepare.log").read_text()
    assert [line for line in result.stderr.splitlines() if "WARNING" in line] == [
        line for line in (tmp_path / "prepare.log").read_text().splitlines() if "WARNING" in line
    ]
    assert warning in result.stderr and "reconciled" not in result.stderr  # warnings only
    failed = subprocess.run(
        logged + prepare_command(tmp_path / "none.fa", tmp_path / "out", 1), capture_output=True, text=True
    )
    assert failed.returncode == 2 and failed.stderr.startswith("error: ") and len(failed.stderr.splitlines()) == 1
