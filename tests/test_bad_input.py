"""Bad input, bad samples sheets and configs, full or unwritable disks: one line that names the
file, the record or key and what to do, exit status 2 (Snakemake: non-zero), no traceback, and
no output left behind. Odd but valid input (headers, line endings, case, N, empty records) works."""

import bz2
import gzip
import lzma
import os
import random
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import GENOMES, ROOT, job_counts, read_fasta, read_tsv, tmpfs, write_embeddings

from harness.stages import prepare_command, prepare_into, shard_fastas
from workflow_lib.cli.errors import InputError, full_disk, full_disk_here
from workflow_lib.io.seqio import read_records
from workflow_lib.io.tables import read_table

LAMBDA = GENOMES / "lambda_NC_001416.fasta"


def run_prepare(path: Path, outdir: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(prepare_command(path, outdir, *flags), capture_output=True, text=True)


def assert_refused(path: Path, outdir: Path, message: str, *flags: str) -> None:
    """The prepare CLI prints exactly `error: {message}`, exits 2 and leaves no file behind."""
    result = run_prepare(path, outdir, *flags)
    assert (result.returncode, result.stderr.splitlines()) == (2, [f"error: {message}"])
    assert not outdir.exists() or not list(outdir.iterdir())


def lambda_reads(n: int, length: int = 500) -> bytes:
    ((_, _, genome),) = read_records(LAMBDA)
    return b"".join(b">read_%d\n%s\n" % (i, genome[i * 100 : i * 100 + length]) for i in range(n))


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "no sequences: the file is empty or holds only blank lines"),
        (b"\n \n\t\r\n", "no sequences: the file is empty or holds only blank lines"),
        (b">a\n>b some words\n", "no sequences: every record (2 in all) is empty"),
        (b">a\n\n\n>b\n  \n", "no sequences: every record (2 in all) is empty"),
        (b"@r1\n\n+\n\n", "no sequences: every record (1 in all) is empty"),
    ],
    ids=["empty", "blank_lines", "headers_only", "headers_and_blank_lines", "empty_fastq_read"],
)
def test_no_sequences(tmp_path, content, message):
    (tmp_path / "in.fa").write_bytes(content)
    assert_refused(
        tmp_path / "in.fa",
        tmp_path / "out",
        f"{tmp_path / 'in.fa'}: {message}; give a FASTA or FASTQ file with nucleotide sequences",
    )


CUT = "Compressed file ended before the end-of-stream marker was reached"


@pytest.mark.parametrize(
    "name, damage, reason",
    [
        ("cut.fa.gz", lambda data: gzip.compress(data)[:-2000], CUT),
        (
            "garbage.fa.gz",
            lambda data: gzip.compress(data)[:10] + bytes(range(256)) * 4,
            "Error -1 Invalid deflate block found",  # ISA-L's words (xopen)
        ),
        ("cut.fa.bz2", lambda data: bz2.compress(data)[:-2000], CUT),
        ("cut.fa.xz", lambda data: lzma.compress(data)[:-2000], CUT),
    ],
    ids=["truncated_gzip", "corrupt_gzip", "truncated_bz2", "truncated_xz"],
)
def test_damaged_compressed_file(tmp_path, name, damage, reason):
    path = tmp_path / name
    path.write_bytes(damage(lambda_reads(400)))
    assert_refused(
        path, tmp_path / "out", f"{path}: the file is truncated or corrupt ({reason}); re-download or re-compress it"
    )


def test_truncation_names_the_last_record_read(tmp_path, monkeypatch):
    """Past the first read block, the message says how far the file could be read."""
    from workflow_lib.io import seqio

    monkeypatch.setattr(seqio, "_BLOCK", 4096)
    path = tmp_path / "cut.fa.gz"
    data = gzip.compress(lambda_reads(400))
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as caught:
        prepare_into(path, tmp_path / "out", 2000)
    message = str(caught.value)
    number = int(message.split(" after record ")[1].split()[0])
    assert 100 < number < 400
    assert message == (
        f"{path}: the file is truncated or corrupt after record {number} 'read_{number - 1}' ({CUT}); "
        "re-download or re-compress it"
    )
    assert not list((tmp_path / "out").iterdir())


@pytest.mark.parametrize(
    "content, message",
    [
        (
            bytes(random.Random(0).randrange(256) for _ in range(2000)).replace(b">", b"").replace(b"@", b""),
            "starts with binary data, not a FASTA ('>') or FASTQ ('@') record; give a nucleotide FASTA or FASTQ file",
        ),
        (
            b">a\nACGT\n>b\nAC\x00\x01\xffGT\n",
            "record 2 'b' contains characters that are no IUPAC nucleotide "
            "code (byte 0x00, byte 0x01, byte 0xff); fix or remove the record",
        ),
        (
            b"hello world\n",
            "starts with text, not a FASTA ('>') or FASTQ ('@') record; give a nucleotide FASTA or FASTQ file",
        ),
        (b">a\nACGT\n>\xff\xfe\nACGT\n", "record 2 has a header that is not UTF-8 text; fix its encoding"),
        (b">a\nACGT\n>\nACGT\n", "record 2 has an empty header; give every record an ID"),
        (
            b">a\rACGT\r>b\rACGTAC\r",
            "record 1 has a carriage return inside its header: the file has old Mac "
            "(CR-only) line endings; convert them, e.g. with tr '\\r' '\\n'",
        ),
        (
            b"\x28\xb5\x2f\xfd" + bytes(100),
            "zstd-compressed, which this workflow cannot read; decompress it or use gzip",
        ),
    ],
    ids=["binary_garbage", "binary_in_a_record", "not_fasta", "header_not_utf8", "empty_header", "cr_only", "zstd"],
)
def test_unreadable_content(tmp_path, content, message):
    (tmp_path / "in.fa").write_bytes(content)
    assert_refused(tmp_path / "in.fa", tmp_path / "out", f"{tmp_path / 'in.fa'}: {message}")


def test_protein_fasta_given_as_dna(tmp_path):
    path = tmp_path / "protein.fa"
    path.write_text(">p1\nACGT\n>p2 a protein\nMKVLEEFPQ\n")
    assert_refused(
        path,
        tmp_path / "out",
        f"{path}: record 2 'p2' looks like a protein sequence (contains 'E', 'F', 'L', 'P', 'Q'); "
        "give nucleotide sequences",
    )


def test_duplicate_ids(tmp_path):
    path = tmp_path / "in.fa"
    path.write_text(">a\nACGT\n>b\nAC\n>a other words\nGG\n>c\nA\n>b\nA\n")
    assert_refused(
        path,
        tmp_path / "out",
        f"{path}: duplicate sequence IDs: 'a' (records 1 and 3); 'b' (records 2 and 5); give every record a unique ID",
    )


def test_one_pair_of_duplicate_ids_is_not_taken_for_mates(tmp_path):
    """Two contigs named alike, in one file or at the end of one file and the start of the next, are
    no paired-end reads: the advice is to name them apart (marked interleaved, they were joined)."""
    from workflow_lib.io.reads import SampleReads

    (tmp_path / "one.fa").write_text(">phiX\nACGTACGT\n>phiX\nGGCCGGCC\n")
    assert_refused(
        tmp_path / "one.fa",
        tmp_path / "out",
        f"{tmp_path / 'one.fa'}: duplicate sequence IDs: 'phiX' (records 1 and 2); give every record a unique ID",
    )
    (tmp_path / "two.fa").write_text(">lam\nACGTACGT\n>phiX\nGGCCGGCC\n")
    (tmp_path / "three.fa").write_text(">phiX\nACGTACGT\n>gamma\nGGCCGGCC\n")
    files = (tmp_path / "two.fa", tmp_path / "three.fa")
    with pytest.raises(InputError) as caught:
        prepare_into(SampleReads(files, (), False), tmp_path / "out2", 1000)
    assert str(caught.value) == (
        f"{files[0]}, {files[1]}: duplicate sequence IDs: 'phiX' (records 2 of {files[0]} and 1 of {files[1]}); give "
        "every record a unique ID"
    )


@pytest.mark.parametrize("appended", [False, True], ids=["interleaved", "R2 after R1"])
def test_paired_end_mates_in_one_file_are_named_as_such(tmp_path, appended):
    """Illumina names both mates alike (the mate number follows the space): the error says what
    the file most likely is and what to do."""
    names = [f"M01:7:FC:1:1101:{1000 + i}:2000" for i in range(3)]
    order = [(n, m) for m in (1, 2) for n in names] if appended else [(n, m) for n in names for m in (1, 2)]
    path = tmp_path / "pairs.fq"
    path.write_text("".join(f"@{n} {m}:N:0:1\nACGTACGTAC\n+\nIIIIIIIIII\n" for n, m in order))
    first = [order.index((n, 1)) + 1 for n in names]
    shown = "; ".join(f"'{n}' (records {i} and {i + (3 if appended else 1)})" for n, i in zip(names, first))
    hint = (
        "these look like the two mates of paired-end reads one after the other in one file: split it into mate 1 "
        "and mate 2 files, and give them as path and path2 in the samples sheet"
        if appended
        else "these look like interleaved mates of paired-end reads: mark the file interleaved true in the sheet"
    )
    assert_refused(path, tmp_path / "out", f"{path}: duplicate sequence IDs: {shown}; {hint}")


@pytest.mark.parametrize(
    "content, message",
    [
        (
            b"@r1\nACGT\n+\nIIII\n@r2 desc\nACGTA\n+\nIII\n",
            "record 2 'r2' has 5 bases but 3 quality values; the file is truncated or corrupt: re-download it",
        ),
        (
            b"@r1\nACGT\n+\nIIII\n@r2\nACGTA\n",
            "record 2 is incomplete (2 of 4 lines); the file is truncated: re-download it",
        ),
        (
            b"@r1\nACGT\nIIII\n@r2\nACGT\n+\nIIII\n",
            "record 1 is not a 4-line FASTQ record ('@' header, sequence, "
            "'+', qualities); multi-line FASTQ is not supported: reformat the file",
        ),
        (
            b"@r1\nACGT\n+\nIIII\n@r2\nACGT\n+\nII\nII\n@r3\nACGT\n+\nIIII\n",
            "record 2 is not a 4-line FASTQ record ('@' header, sequence, "
            "'+', qualities); multi-line FASTQ is not supported: reformat the file",
        ),
        (
            b"@r1\nACGT\n+\nIIII\n\n@r2\nACGT\n+\nIIII\n@r3\nACGT\n+\nIIII\n",
            "record 2 follows a blank line; FASTQ has no blank lines between records: remove it",
        ),
    ],
    ids=["quality_length", "truncated", "not_four_lines", "wrapped_qualities", "blank_line_between"],
)
def test_bad_fastq(tmp_path, content, message):
    (tmp_path / "in.fq").write_bytes(content)
    assert_refused(tmp_path / "in.fq", tmp_path / "out", f"{tmp_path / 'in.fq'}: {message}")


def test_header_words_are_split_as_biopython(tmp_path):
    """Spaces, tabs, '|' and non-ASCII are no error: the ID is the header's first word, as
    Biopython (and so VirNucPro) splits it, in every output."""
    from Bio import SeqIO

    headers = [
        "gi|9626243|ref|NC_001416.1| Enterobacteria phage lambda",
        "tab\tseparated\twords",
        "virus_α_β description",
        "  leading blanks",
        "a\u00a0unicode space",
        "b\x0bvertical tab",
        '"quoted id',
    ]
    body = (GENOMES / "phiX174.fasta").read_text().split("\n", 1)[1]
    path = tmp_path / "in.fa"
    path.write_text("".join(f">{header}\n{body}" for header in headers), encoding="utf-8")
    ids = [record.id for record in SeqIO.parse(path, "fasta")]
    assert ids == ["gi|9626243|ref|NC_001416.1|", "tab", "virus_α_β", "leading", "a", "b", '"quoted']
    result = run_prepare(path, tmp_path / "out", "--shard-tokens", "1008")
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    assert [row["sequence_id"] for row in read_tsv(out / "sequences.tsv.gz")] == ids
    frames = read_tsv(out / "frames.tsv.gz")
    assert list(dict.fromkeys(row["sequence_id"] for row in frames)) == ids
    assert all(row["frame_id"].startswith(f"{row['sequence_id']}_chunk_") for row in frames)
    assert len(shard_fastas(out, "faa")) == 5  # 28 frames of 168 tokens, 6 a shard
    for suffix in ("fna", "faa"):
        shard_ids = [fid for path in shard_fastas(out, suffix) for fid, _ in read_fasta(path)]
        by_bin = sorted(frames, key=lambda row: (int(row["shard"]), int(row["bin"])))  # stable: table order
        assert shard_ids == [row["frame_id"] for row in by_bin]


def test_quoted_ids_survive_the_tables(tmp_path):
    """A header starting with a quote is read back verbatim by the table reader the merge uses."""
    (tmp_path / "in.fa").write_text('>"weird\n' + "ATG" * 200 + "\n>ok\n" + "ATG" * 200 + "\n")
    prepare_into(tmp_path / "in.fa", tmp_path / "out", chunk_length=500)
    frames = read_table(tmp_path / "out" / "frames.tsv.gz")
    assert frames["sequence_id"].tolist()[:1] == ['"weird'] and frames["shard"].tolist()[0] == 0
    assert read_table(tmp_path / "out" / "sequences.tsv.gz")["sequence_id"].tolist() == ['"weird', "ok"]


def test_windows_line_endings_lowercase_and_soft_masking(tmp_path):
    """CRLF, lower case and soft-masked (partly lower-case) input give the uppercase frames."""
    seq = next(read_records(GENOMES / "human_chr17_part_softmasked.fasta"))[2].decode()
    raw = "".join(line.strip() for line in (GENOMES / "human_chr17_part_softmasked.fasta").read_text().splitlines()[1:])
    assert raw != raw.upper() and raw.upper() == seq  # the genome is soft-masked
    inputs = {
        "upper.fa": f">x\n{seq}\n",
        "softmasked_crlf.fa": ">x desc\r\n" + "".join(f"{raw[i : i + 60]}\r\n" for i in range(0, len(raw), 60)),
        "lower.fa": f">x\n{seq.lower()}\n",
    }
    outputs = []
    for name, text in inputs.items():
        (tmp_path / name).write_bytes(text.encode())
        out = tmp_path / name.replace(".fa", "")
        assert prepare_into(tmp_path / name, out, 2520)["shards"] == 2  # 29 frames of 168 tokens, 15 a shard
        tables = [(out / f).read_bytes() for f in ("frames.tsv.gz", "sequences.tsv.gz", "shards.tsv")]
        outputs.append(tables + [path.read_bytes() for s in ("fna", "faa") for path in shard_fastas(out, s)])
    assert read_tsv(tmp_path / "upper" / "frames.tsv.gz") and all(o == outputs[0] for o in outputs)


def test_n_runs_and_iupac_codes_follow_the_policy(tmp_path):
    """ambiguous_fraction counts every non-ACGT base exactly; above input.max_ambiguous_fraction a
    record is too_ambiguous and not chunked; codons with N or IUPAC codes are dropped or X."""
    ((_, _, genome),) = read_records(LAMBDA)
    genome = genome.decode()
    records = {
        "clean": genome[:600],
        "n_run": genome[:250] + "N" * 100 + genome[350:600],
        "iupac": genome[:300] + "RYKMSWBDHVN" + genome[311:600],  # U is read as T
        "mostly_n": "N" * 400 + genome[:200],
    }
    path = tmp_path / "in.fa"
    path.write_text("".join(f">{name}\n{seq}\n" for name, seq in records.items()))
    proteins = {}
    for policy in ("drop", "X"):
        out = tmp_path / policy
        flags = ("--chunk-length", "300", "--ambiguous-codons", policy, "--max-ambiguous-fraction", "0.5")
        result = run_prepare(path, out, *flags)
        assert result.returncode == 0, result.stderr
        rows = {row["sequence_id"]: row for row in read_tsv(out / "sequences.tsv.gz")}
        assert {name: (row["ambiguous_fraction"], row["status"], row["n_chunks"]) for name, row in rows.items()} == {
            "clean": ("0", "ok", "2"),
            "n_run": ("0.166667", "ok", "2"),  # 100 of 600
            "iupac": ("0.0183333", "ok", "2"),  # 11 of 600
            "mostly_n": ("0.666667", "too_ambiguous", "0"),  # 400 of 600 > 0.5
        }
        proteins[policy] = {fid: p for path in shard_fastas(out, "faa") for fid, p in read_fasta(path)}
    assert not any("X" in p for p in proteins["drop"].values())
    assert any("X" in p for fid, p in proteins["X"].items() if fid.startswith(("n_run_chunk_1", "iupac_chunk_")))
    assert not any(fid.startswith("mostly_n") for fid in proteins["X"])


def test_empty_and_short_records_are_reported(tmp_path):
    """Empty records and records under input.min_length stay in sequences.tsv.gz with 0 chunks."""
    path = tmp_path / "in.fa"
    ((_, _, genome),) = read_records(LAMBDA)
    path.write_text(f">empty\n>short one\nACGTACGTAC\n>ok\n{genome[:600].decode()}\n>empty2\n\n>short2\nACG\n")
    result = run_prepare(path, tmp_path / "out", "--min-length", "100")
    assert result.returncode == 0, result.stderr
    rows = read_tsv(tmp_path / "out" / "sequences.tsv.gz")
    assert [(r["sequence_id"], r["length"], r["n_chunks"], r["n_frames"], r["status"]) for r in rows[:2]] == [
        ("empty", "0", "0", "0", "empty"),
        ("short", "10", "0", "0", "too_short"),
    ]
    assert [(r["sequence_id"], r["status"], r["n_chunks"]) for r in rows[2:]] == [
        ("ok", "ok", "2"),
        ("empty2", "empty", "0"),
        ("short2", "too_short", "0"),
    ]
    frames = read_tsv(tmp_path / "out" / "frames.tsv.gz")
    assert {row["sequence_id"] for row in frames} == {"ok"} and len(frames) == int(rows[2]["n_frames"]) > 0


# About twice prepare's peak for this contig: a reader that held a record as Python objects per
# line or base, or a per-base running sum of non-ACGT bases, would need far more.
PEAK_RSS_BOUND_MB = 250


def test_10_mb_contig_in_bounded_memory(tmp_path):
    genome = b"".join(seq for f in sorted(GENOMES.glob("*.fasta")) for _, _, seq in read_records(f))
    rng = random.Random(1)
    starts = [rng.randrange(len(genome) - 100_000) for _ in range(100)]
    contig = b"".join(genome[start : start + 100_000] for start in starts)
    contig = contig[:1000] + b"N" * 1000 + contig[2000:5_000_000].lower() + contig[5_000_000:]  # gap, soft-masking
    path = tmp_path / "contig.fa"
    path.write_bytes(b">contig assembled\n" + b"".join(contig[i : i + 60] + b"\n" for i in range(0, len(contig), 60)))
    # A fresh process whose only child is prepare: its RUSAGE_CHILDREN peak is that of prepare.
    measure = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    result = subprocess.run(
        [sys.executable, "-c", measure, *prepare_command(path, tmp_path / "out", "--shard-tokens", "200000")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    peak_mb = int(result.stdout) / 1024  # ru_maxrss is in KiB on Linux
    (row,) = read_tsv(tmp_path / "out" / "sequences.tsv.gz")
    assert (row["sequence_id"], row["length"], row["n_chunks"], row["ambiguous_fraction"], row["status"]) == (
        "contig",
        "10000000",
        "20000",
        "0.0001",
        "ok",
    )
    frames = read_tsv(tmp_path / "out" / "frames.tsv.gz")
    assert len(frames) == int(row["n_frames"]) > 5_000
    shards = read_tsv(tmp_path / "out" / "shards.tsv")  # shards of at most 200,000 tokens, filled in turn
    assert len(shards) > 3 and sum(int(shard["frames"]) for shard in shards) == len(frames)
    assert all(int(shard["tokens"]) <= 200_000 for shard in shards)
    assert peak_mb < PEAK_RSS_BOUND_MB, f"prepare peaked at {peak_mb:.0f} MB on a 10 Mb contig"


# Samples sheets and configs: Snakemake's dry run refuses them at parse time, before any job.


def dry_run(workdir: Path, sheet: str | None, config: str = "", *args: str) -> list[str]:
    """`snakemake -n` on the workflow with this samples sheet and config; its output lines."""
    if sheet is not None:
        (workdir / "samples.tsv").write_text(sheet)
    (workdir / "config.yaml").write_text("samples: samples.tsv\n" + config)
    command = [sys.executable, "-m", "snakemake", "-n", "-s", str(ROOT / "Snakefile"), "-d", str(workdir)]
    result = subprocess.run(
        [*command, "--configfile", str(workdir / "config.yaml"), *args], capture_output=True, text=True
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert not any(crash in output for crash in ("Traceback", "WorkflowError", 'File "'))  # the lines alone
    return output.splitlines()


PHIX, LAMBDA_PATH = GENOMES / "phiX174.fasta", GENOMES / "lambda_NC_001416.fasta"


def test_bad_samples_sheet(tmp_path):
    """A missing file, a file listed twice in a sample, names with '/' or '..': each is one line, all
    at once (a sample's second line is its second file)."""
    sheet = f"sample\tpath\nphix\t{PHIX}\nlambda\tinputs/lambda.fa\n\nphix\t{PHIX}\nphix/a\t{PHIX}\n..\t{LAMBDA_PATH}\n"
    rule = SAMPLE_NAME_RULE
    assert [line for line in dry_run(tmp_path, sheet) if line.startswith("samples.tsv")] == [
        f"samples.tsv: line 6: sample: 'phix/a' is not allowed {rule}; fix the samples sheet",
        f"samples.tsv: line 7: sample: '..' is not allowed {rule}; fix the samples sheet",
        f"samples.tsv: line 3: sample 'lambda': inputs/lambda.fa: no such file; fix the path (a relative path "
        f"starts in {tmp_path})",
        f"samples.tsv: line 5: sample 'phix': {PHIX} is also listed on line 2; give each file of a sample, and each "
        "mate file, once",
    ]


SAMPLE_NAME_RULE = (
    "(Sample name, which names its results directory: at most 200 of letters, digits, '.', '_' and '-', not first "
    "'-' (it would read as an option), and not '.' or '..')"
)


@pytest.mark.parametrize(
    "sheet, expected",
    [
        (
            "# from the core\nsample\tpath\nphix\t{PHIX}\tvirus\n",  # a label without its column
            "samples.tsv: line 3 has more fields than line 2 names columns; name every column there, or remove the "
            "extra fields",
        ),
        (
            "sample\tpath\tpath_2\nphix\t{PHIX}\t{LAMBDA}\n",  # mate 2 would go unread
            "samples.tsv: unknown column 'path_2' (a sheet's columns: sample, path, path2, interleaved, label); "
            "rename or remove it",
        ),
        (
            "sample\tpath\tpath\nphix\t{PHIX}\t{LAMBDA}\n",
            "samples.tsv: line 1 names the column 'path' twice; give each column once",
        ),
        (
            "sample\tpath\n-h\t{PHIX}\n",
            f"samples.tsv: line 2: sample: '-h' is not allowed {SAMPLE_NAME_RULE}; fix the samples sheet",
        ),
    ],
    ids=["extra-field", "unknown-column", "column-twice", "name-as-option"],
)
def test_samples_sheet_columns_are_named_once_and_known(tmp_path, sheet, expected):
    """Refused at start-up in one line: before, an extra field in a first row made a traceback, an
    unknown column was left unread and a sample named like an option failed its plan job."""
    assert expected in dry_run(tmp_path, sheet.format(PHIX=PHIX, LAMBDA=LAMBDA_PATH))


def test_samples_sheet_with_comments_before_its_header_and_trailing_tabs(tmp_path):
    from workflow_lib.workflow.config_check import read_samples

    sheet = tmp_path / "samples.tsv"
    sheet.write_text(f"# from the core\n\nsample\tpath\t\nphix\t{PHIX}\t\nlambda\t{LAMBDA_PATH}\n")
    samples = read_samples(str(sheet), ROOT / "config" / "samples.schema.yaml", "config.yaml")
    assert list(samples.index) == ["phix", "lambda"] and list(samples["path"]) == [str(PHIX), str(LAMBDA_PATH)]


def test_samples_sheet_without_its_columns(tmp_path):
    assert (
        "samples.tsv: no column path or sample; its first line must name the tab-separated columns sample and "
        "path (and optionally label)"
    ) in dry_run(tmp_path, f"sample,path\nphix,{PHIX}\n")


def test_missing_samples_sheet(tmp_path):
    assert (
        f"{tmp_path / 'config.yaml'}: samples: samples.tsv: no such file; "
        "give the path of the samples sheet (a TSV with columns sample and path)"
    ) in dry_run(tmp_path, None)


def test_samples_sheet_lines_that_cannot_be_samples(tmp_path):
    """A comment line is skipped (its number still counts); a directory as a sample's path is named."""
    (tmp_path / "reads").mkdir()
    sheet = f"sample\tpath\n# from the sequencing core\nphix\t{PHIX}\n  # a note\nreads\treads\n"
    assert [line for line in dry_run(tmp_path, sheet) if line.startswith("samples.tsv")] == [
        "samples.tsv: line 5: sample 'reads': reads: a directory; give the sample's FASTA or FASTQ file (gzipped "
        "or not), one sample per line"
    ]


@pytest.mark.parametrize("sheet", ["sample\tpath\n", "sample\tpath\n# nothing yet\n\n", ""])
def test_empty_samples_sheet(tmp_path, sheet):
    assert "samples.tsv: no samples; add a line per sample: its name, a tab, the path of its FASTA or FASTQ" in (
        dry_run(tmp_path, sheet)
    )


def test_labelled_samples_are_told_how_to_train(tmp_path):
    """docs/models.md: label samples, set models.classifier to the train target's classifier and run
    the train target. Labelled samples with VirNucPro's classifier (the default) not downloaded are
    refused, with that advice."""
    mito = GENOMES / "human_mtDNA.fasta"
    sheet = f"sample\tpath\tlabel\nphix\t{PHIX}\tvirus\nmito\t{mito}\tother\n"
    assert (
        f"{ROOT / 'config' / 'config.yaml'}: models.classifier: models/500_model.pth: no such file; download "
        "VirNucPro's https://github.com/Li-Jing-1997/VirNucPro/raw/main/500_model.pth there or set "
        "models.classifier to that URL, point models.classifier at a classifier written by the train target, or "
        "set it to results/train/classifier.pt to classify with the classifier the labelled samples train"
    ) in dry_run(tmp_path, sheet)
    (tmp_path / "config.yaml").write_text("samples: samples.tsv\nmodels:\n  classifier: results/train/classifier.pt\n")
    command = [sys.executable, "-m", "snakemake", "-n", "-s", str(ROOT / "Snakefile"), "-d", str(tmp_path), "train"]
    result = subprocess.run([*command, "--configfile", str(tmp_path / "config.yaml")], capture_output=True, text=True)
    assert result.returncode == 0 and "prepare" in job_counts(result.stdout), result.stdout + result.stderr


def test_training_sheet_of_one_class(tmp_path):
    """Caught at start-up, not after every labelled sample is embedded."""
    sheet = f"sample\tpath\tlabel\nphix\t{PHIX}\tvirus\nlambda\t{LAMBDA_PATH}\tvirus\n"
    assert (
        "samples.tsv: every labelled sample is 'virus'; the train target needs samples of both classes: label at "
        "least one sample 'other', or remove the labels"
    ) in dry_run(tmp_path, sheet)


def test_missing_classifier_says_what_to_do(tmp_path):
    """The default config on a fresh checkout: one line, before any job, not a MissingInputException."""
    lines = dry_run(tmp_path, f"sample\tpath\nphix\t{PHIX}\n")
    assert (
        f"{ROOT / 'config' / 'config.yaml'}: models.classifier: models/500_model.pth: no such file; download "
        "VirNucPro's https://github.com/Li-Jing-1997/VirNucPro/raw/main/500_model.pth there or set "
        "models.classifier to that URL"
    ) in "\n".join(lines)
    assert not any("MissingInput" in line for line in lines)


@pytest.mark.parametrize("made_for", ["train", "stated"])
def test_classifier_for_other_chunks_is_refused_whatever_its_name(tmp_path, made_for):
    """A classifier made for 300 bp chunks, renamed 500_model.pth, with chunk_length 500: refused
    at start-up, before any job; so is one whose config statement says 300."""
    from workflow_lib.models import classifier

    (tmp_path / "models").mkdir()
    metadata = {"chunk_length": 300} if made_for == "train" else {}
    classifier.save(classifier.MLPClassifier(768 + 2560), tmp_path / "models" / "500_model.pth", **metadata)
    config = "chunk_length: 500\n" + ("" if made_for == "train" else "models:\n  classifier_chunk_length: 300\n")
    lines = dry_run(tmp_path, f"sample\tpath\nphix\t{PHIX}\n", config)
    how = "recorded in the file by the train target" if made_for == "train" else f"stated in {tmp_path}/config.yaml"
    assert (
        f"models/500_model.pth: this classifier was made for 300 bp chunks ({how}) but chunk_length is 500; set "
        "chunk_length to 300, or use a classifier for 500 bp chunks "
        "(https://github.com/Li-Jing-1997/VirNucPro/raw/main/500_model.pth)"
    ) in lines
    assert not any(line.startswith(("rule ", "localrule ", "checkpoint ")) for line in lines)  # no job planned


def test_config_yaml_syntax_error_names_file_and_line(tmp_path, capsys):
    from workflow_lib.workflow.config_check import readable_yaml

    (tmp_path / "c.yaml").write_text("chunk_length: 500\nmodels:\n\tcache_dir: x\n")
    with pytest.raises(SystemExit):
        readable_yaml(tmp_path / "c.yaml")
    assert capsys.readouterr().err == (
        f"{tmp_path / 'c.yaml'}: line 3, column 1: not valid YAML: found character '\\t' that cannot start any "
        "token (indent with spaces: YAML allows no tabs); fix it\n"
    )


FIX = "; fix it (config/schema.yaml describes every key)"
TEXT = ": Snakemake passes the values inside a --config dict as text; give it in a config file (--configfile)"


@pytest.mark.parametrize(
    "config, args, expected",
    [
        (
            "shard_tokens: four\nshard: 2\ntranslation:\n  ambiguous_codons: N\n",
            (),
            [
                "{config}: shard: unknown key" + FIX,
                "{config}: shard_tokens: 'four' is not of type 'integer'" + FIX,
                "{config}: translation.ambiguous_codons: 'N' is not one of ['drop', 'X']" + FIX,
            ],
        ),
        ("", ("--config", "shard_tokens=0"), ["--config: shard_tokens: 0 is less than the minimum of 1" + FIX]),
        # a removed key (each setting has one spelling: the model's token budget is models.<name>.token_budget)
        ("embedding:\n  esm_token_budget: 4096\n", (), ["{config}: embedding.esm_token_budget: unknown key" + FIX]),
        ("", ("--config", "shards=4"), ["--config: shards: unknown key" + FIX]),
        # Snakemake passes the values inside a --config dict as text: null would be read as a file name
        (
            "",
            ("--config", 'call={"max_qvalue": 0.05}', 'models={"calibration": null}'),
            [
                f"--config: {key}: {value!r} is text" + TEXT
                for key, value in [("call.max_qvalue", "0.05"), ("models.calibration", "null")]
            ],
        ),
    ],
    ids=["config_file", "command_line", "removed_key", "removed_key_on_the_command_line", "text_in_a_config_dict"],
)
def test_config_that_fails_the_schema(tmp_path, config, args, expected):
    lines = dry_run(tmp_path, f"sample\tpath\nphix\t{PHIX}\n", config, *args)
    sources = (f"{tmp_path / 'config.yaml'}: ", "--config: ")
    assert [line for line in lines if line.startswith(sources)] == [
        line.format(config=tmp_path / "config.yaml") for line in expected
    ]


# Resources: a full disk, a read-only file system, an output directory that cannot be made.


@pytest.mark.parametrize("name", ["chunks.tsv", "frames.tsv.gz"])
def test_a_table_cut_short_is_refused_by_name(tmp_path, name):
    """A table that a crash left cut short after its rename (its data never reached the disk) is
    refused with its name and what to do, whichever reader meets it: never a short last row read
    as data, never a traceback from pandas or gzip."""
    from workflow_lib.io.tables import read_chunks, read_table, write_tsv

    path = tmp_path / name
    write_tsv(pd.DataFrame({"sequence_id": [f"r{i}" for i in range(5000)], "chunk": range(5000)}), path)
    whole = path.read_bytes()
    assert len(read_table(path)) == 5000
    for size in (0, len(whole) // 2, len(whole) - 1):
        path.write_bytes(whole[:size])
        for read in (read_table, lambda p: list(read_chunks(p, rows=100))):
            with pytest.raises(InputError, match=f"^{path}: cut short.*; delete it and run the workflow again$"):
                read(path)


def test_outputs_reach_the_disk_before_their_rename(tmp_path, monkeypatch):
    """A finished output's data is flushed (fsync) under its temporary name, and the directory after
    the rename: a crash then leaves the old state or the whole new file, never its name alone."""
    from workflow_lib.io import outputs

    flushed, fsync = [], os.fsync

    def recorded(fd):
        flushed.append((os.readlink(f"/proc/self/fd/{fd}"), (tmp_path / "out" / "t.tsv").exists()))
        fsync(fd)

    monkeypatch.setattr(outputs.os, "fsync", recorded)
    with outputs.atomic_open(tmp_path / "out" / "t.tsv") as handle:
        handle.write("a\n")
    name, renamed = flushed[0]
    assert Path(name).parent == tmp_path / "out" and Path(name).name.startswith(".t.tsv.tmp") and not renamed
    assert flushed[1:] == [(str(tmp_path / "out"), True)]


@pytest.mark.slow
def test_full_disk(tmp_path):
    (tmp_path / "reads.fa").write_bytes(lambda_reads(400))
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        out = disk / "out"
        message = (
            f"{out}: cannot write the outputs: no space left on device (the file system mounted at {disk} is full); "
            "free space there or write the outputs elsewhere, then run the same command again"
        )
        assert_refused(tmp_path / "reads.fa", out, message)
        assert os.listdir(disk) == ["out"]


@pytest.mark.slow
def test_full_disk_hdf5(tmp_path):
    import numpy as np

    from workflow_lib.io import h5store

    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        attrs = dict.fromkeys(h5store.REQUIRED_ATTRS, "x")
        with pytest.raises(InputError) as caught:
            # random values: embeddings are stored compressed, and ones would fit in the 64 kB
            embeddings = np.random.default_rng(0).standard_normal((100, 512), dtype=np.float32)
            write_embeddings(disk / "shard_0.h5", ["a"] * 100, embeddings, attrs)
        assert str(caught.value) == full_disk(disk)
        assert f"(the file system mounted at {disk} is full)" in str(caught.value)
        assert os.listdir(disk) == []


FAILING_JOB = """
from workflow_lib.cli.errors import InputError, run_cli
def main():
    raise InputError("reads.fa: record 'r1' is empty; remove it")
run_cli(main)
"""


def test_ctrl_c_is_one_line():
    """A job stopped by Ctrl-C (SIGINT: KeyboardInterrupt) ends with one line, not a traceback."""
    job = "from workflow_lib.cli.errors import run_cli\ndef main():\n    raise KeyboardInterrupt\nrun_cli(main)\n"
    result = subprocess.run([sys.executable, "-c", job], capture_output=True, text=True)
    assert (result.returncode, result.stderr) == (130, "error: interrupted (Ctrl-C)\n")


def test_a_job_error_reaches_the_console_when_its_log_is_on_a_full_disk(tmp_path):
    """scripts/run_logged.sh shows a failed job's one line on the console from the job itself,
    not from its log, which a full disk may have left empty."""
    with tmpfs(tmp_path / "disk", "size=16k") as disk:
        (disk / "ballast").write_bytes(b"x" * 16384)  # writes stop short of 16 kB: the disk is full
        result = subprocess.run(
            ["bash", str(ROOT / "scripts" / "run_logged.sh"), str(disk / "job.log"), sys.executable, "-c", FAILING_JOB],
            capture_output=True, text=True,
        )  # fmt: skip
        assert (disk / "job.log").read_text() == ""  # the log could not take the line
        assert full_disk_here(disk) == full_disk(disk)  # what onerror prints when Snakemake's own log met it
    assert full_disk_here(tmp_path) is None
    assert (result.returncode, result.stderr) == (2, "error: reads.fa: record 'r1' is empty; remove it\n")


@pytest.mark.slow
def test_read_only_output_directory(tmp_path):
    (tmp_path / "reads.fa").write_bytes(lambda_reads(10))
    with tmpfs(tmp_path / "disk", "size=1m") as disk:
        (disk / "out").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        message = (
            f"{disk / 'out'}: cannot write the outputs: read-only file system; make it writable or write them elsewhere"
        )
        assert_refused(tmp_path / "reads.fa", disk / "out", message)


def test_output_directory_under_a_file(tmp_path):
    (tmp_path / "reads.fa").write_bytes(lambda_reads(10))
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "out"
    assert_refused(
        tmp_path / "reads.fa",
        out,
        f"{out}: cannot create the output directory (not a directory); write the outputs elsewhere",
    )


def test_a_long_samples_sheet_is_checked_in_one_pass_in_line_order(tmp_path):
    """One validator for all rows: every problem still names its line, in line order (line 12
    after line 3, not before it as text would sort)."""
    from workflow_lib.workflow.config_check import read_samples

    reads = tmp_path / "reads.fa"
    reads.write_text(">r\nACGT\n")
    rows = [f"s{i}\t{reads}\t" for i in range(12)]
    rows[1] = f"bad/name\t{reads}\t"
    rows[10] = f"s10\t{reads}\tviral"
    (tmp_path / "samples.tsv").write_text("sample\tpath\tlabel\n" + "\n".join(rows) + "\n")
    with pytest.raises(InputError) as error:
        read_samples(str(tmp_path / "samples.tsv"), ROOT / "config" / "samples.schema.yaml", "config.yaml")
    lines = str(error.value).splitlines()
    assert [line.split(": ")[1:3] for line in lines] == [["line 3", "sample"], ["line 12", "label"]], lines
    assert lines[1].endswith("'viral' is not one of ['virus', 'other', '']; fix the samples sheet")
