"""Paired-end samples: mates read in lockstep (two files or one interleaved), lanes one after the
other, a fragment one record from prepare to the call; what does not pair up is refused in one line."""

import argparse
import gzip
import shlex
import shutil
from pathlib import Path

import pytest
from helpers import GENOMES, lane_pairs, lanes, read_fasta, read_tsv
from test_bad_input import dry_run, run_prepare

from harness.simulate import simulate_pairs
from harness.stages import prepare_into
from workflow_lib.cli.errors import InputError
from workflow_lib.io.reads import SampleReads
from workflow_lib.io.tables import read_table
from workflow_lib.report.data import record_word
from workflow_lib.workflow.job_commands import reads_options

PHIX = GENOMES / "phiX174.fasta"


def write_fastq(path: Path, records: list[tuple[bytes, bytes]]) -> None:
    with gzip.open(path, "wb") as out:
        out.write(b"".join(b"@%s\n%s\n+\n%s\n" % (name, seq, b"I" * len(seq)) for name, seq in records))


def test_a_fragment_is_one_record_whose_mates_are_chunked_as_reads_are(tmp_path):
    """prepare on two lanes of mates: a row per fragment (both mates' lengths), and each mate's
    frames those of the mate prepared alone as a single-end read (VirNucPro's chunks and frames),
    numbered along mate 1 then mate 2."""
    (r1, r2, pairs), (r1b, r2b, pairs_b) = lanes(tmp_path, 5)
    prepare_into(SampleReads((r1, r1b), (r2, r2b)), tmp_path / "paired", chunk_length=100)
    sequences = read_table(tmp_path / "paired" / "sequences.tsv.gz")
    fragments = [p[0].decode() for p in pairs + pairs_b]
    assert sequences["sequence_id"].tolist() == fragments
    assert (sequences["length1"] == 150).all() and (sequences["length2"] == 150).all()
    assert (sequences["length"] == 300).all() and (sequences["n_chunks"] == 4).all()  # 2 chunks a mate
    frames = read_table(tmp_path / "paired" / "frames.tsv.gz")
    for mate, path in ((1, r1), (2, r2)):
        prepare_into(path, tmp_path / f"mate{mate}", chunk_length=100)
        alone = read_table(tmp_path / f"mate{mate}" / "frames.tsv.gz")
        mine = frames[
            frames["sequence_id"].str.startswith("phix_L1") | frames["sequence_id"].str.startswith("ecoli_L1")
        ]
        mine = mine[(mine["chunk_start"] > 150) == (mate == 2)]
        assert mine["sequence_id"].tolist() == alone["sequence_id"].tolist()
        assert (mine["chunk"] - 2 * (mate - 1)).tolist() == alone["chunk"].tolist()
        assert (mine["chunk_start"] - 150 * (mate - 1)).tolist() == alone["chunk_start"].tolist()
        assert mine["frame"].tolist() == alone["frame"].tolist()
        assert mine["protein_length"].tolist() == alone["protein_length"].tolist()


def test_an_interleaved_file_is_read_as_pairs(tmp_path):
    pairs = simulate_pairs(PHIX, 6, 0, "frag")
    path = tmp_path / "interleaved.fq.gz"
    write_fastq(path, [r for i, m1, m2 in pairs for r in ((i + b"/1", m1), (i + b"/2", m2))])
    prepare_into(SampleReads((path,), interleaved=True), tmp_path / "out")
    sequences = read_table(tmp_path / "out" / "sequences.tsv.gz")
    assert sequences["sequence_id"].tolist() == [p[0].decode() for p in pairs]
    write_fastq(path, [r for i, m1, m2 in pairs for r in ((i + b"/1", m1), (i + b"/2", m2))][:-1])
    with pytest.raises(InputError) as error:
        prepare_into(SampleReads((path,), interleaved=True), tmp_path / "odd")
    assert str(error.value) == (
        f"{path}: record 11 'frag_5/1' has no mate: the file ends; an interleaved file holds mate 1 and mate 2 "
        "of each fragment one after the other"
    )


def test_mates_that_do_not_pair_up_are_refused_in_one_line(tmp_path):
    """Mates out of order, a mate file cut short or longer: prepare stops in one line naming the file
    and the record, and leaves nothing behind."""
    pairs = simulate_pairs(PHIX, 3000, 0, "frag")  # more than a batch of each file
    r1, r2 = tmp_path / "R1.fq.gz", tmp_path / "R2.fq.gz"
    cases = {
        "swapped": (pairs, pairs[:2000] + [pairs[2001], pairs[2000]] + pairs[2002:]),
        "short": (pairs, pairs[:2500]),
        "long": (pairs[:2500], pairs),
    }
    expected = {
        "swapped": f"{r2}: record 2001 'frag_2001/2' is no mate of record 2001 'frag_2000/1' of {r1} (IDs pair up less "
        "a /1 and /2 suffix); give the mates in the same order",
        "short": f"{r1}: record 2501 'frag_2500/1' has no mate: {r2} ends after record 2500; give the two mates' "
        "files whole, with the same reads in the same order",
        "long": f"{r2}: record 2501 'frag_2500/2' has no mate: {r1} ends after record 2500; give the two mates' "
        "files whole, with the same reads in the same order",
    }
    for case, (first, second) in cases.items():
        write_fastq(r1, [(i + b"/1", m1) for i, m1, _ in first])
        write_fastq(r2, [(i + b"/2", m2) for i, _, m2 in second])
        out = tmp_path / case
        result = run_prepare(r1, out, "--mates", str(r2))
        assert (result.returncode, result.stderr.splitlines()) == (2, [f"error: {expected[case]}"]), case
        assert not out.exists() or not list(out.iterdir())


def test_the_sheet_refuses_unpaired_mates_and_files_listed_twice_before_any_job(tmp_path):
    """At start-up: a mate file listed twice, path2 with interleaved, rows of one sample unlike, and
    first mates that do not pair up; one line each, before any job."""
    (r1, r2, _), (r1b, r2b, _) = lanes(tmp_path, 3)
    r1c, r2c = (shutil.copy(path, tmp_path / f"copy_{path.name}") for path in (r1b, r2b))
    sheet = (
        "sample\tpath\tpath2\tinterleaved\n"
        f"a\t{r1}\t{r2}\t\n"
        f"b\t{r1b}\t{r2}\t\n"  # a's mate file again
        f"c\t{r1b}\t{r2b}\ttrue\n"
        f"d\t{PHIX}\t\t\n"
        f"d\t{r1c}\t{r2c}\t\n"
    )
    assert [line for line in dry_run(tmp_path, sheet) if line.startswith("samples.tsv")] == [
        f"samples.tsv: line 3: sample 'b': {r2} is also listed on line 2; give each file of a sample, and each mate "
        "file, once",
        "samples.tsv: line 4: sample 'c': gives path2 and interleaved true; give an interleaved file in path alone",
        "samples.tsv: line 6: sample 'd': line 5 gives it single-end reads labelled '', this line paired reads "
        "labelled ''; give every row of a sample the same kind and label",
    ]
    sheet = f"sample\tpath\tpath2\na\t{r1}\t{r2b}\n"
    assert [line for line in dry_run(tmp_path, sheet) if "samples.tsv" in line] == [
        f"samples.tsv: sample 'a': {r2b}: record 1 'phix_L2_0' is no mate of record 1 'phix_L1_0' of {r1} (IDs pair "
        "up less a /1 and /2 suffix); give the mates in the same order"
    ]


@pytest.mark.parametrize(
    "reads",
    [
        SampleReads((Path("a b/L1_R1.fq.gz"), Path("L2_R1.fq.gz")), (Path("a b/L1_R2.fq.gz"), Path("L2_R2.fq.gz"))),
        SampleReads((Path("interleaved.fq"),), interleaved=True),
        SampleReads((Path("contigs.fa"),)),
    ],
    ids=["paired", "interleaved", "single"],
)
def test_a_jobs_command_line_gives_the_script_the_samples_reads(reads):
    """The rules' options for a sample's reads (job_commands.reads_options), read back by the scripts."""
    parser = argparse.ArgumentParser()
    SampleReads.add_arguments(parser)
    assert SampleReads.from_arguments(parser.parse_args(shlex.split(reads_options(reads)))) == reads


@pytest.mark.slow
def test_a_paired_two_lane_sample_runs_end_to_end(pooled_run):
    """A sheet a user would paste (two lanes of gzipped mate files; conftest's pooled_run, beside
    single-end samples), run by Snakemake with the trained demo classifier: a row per fragment in
    sequences.tsv, its call VirNucPro's record rule over both mates' chunks (a row per mate's chunk
    in chunks.tsv), and both mates of each viral fragment, in turn, in viral.fasta."""
    results = pooled_run / "results" / "mixed"
    pairs = [p for lane in lane_pairs() for p in lane]
    calls = read_tsv(results / "sequences.tsv")
    assert [c["sequence_id"] for c in calls] == [p[0].decode() for p in pairs]
    assert all((c["length"], c["length1"], c["length2"]) == ("300", "150", "150") for c in calls)
    chunks = read_tsv(results / "chunks.tsv")
    for call in calls:
        own = [c for c in chunks if c["sequence_id"] == call["sequence_id"]]
        assert len(own) == int(call["n_chunks_scored"]) <= 2  # a chunk a mate, where it has a frame
        viral = sum(c["is_virus"] == "True" for c in own)
        assert call["call"] == ("no_coding_frame" if not own else "virus" if viral / len(own) >= 0.5 else "other")
    viral = [p for p, c in zip(pairs, calls) if c["call"] == "virus"]
    assert viral, "the demo classifier calls no fragment viral"
    expected = [
        (f"{i.decode()} {mate}:N:0:1", seq.decode()) for i, *mates in viral for mate, seq in enumerate(mates, 1)
    ]
    assert [(header.split(" virus_score=")[0], seq) for header, seq in read_fasta(results / "viral.fasta")] == expected
    assert record_word(results / "prepare" / "sequences.tsv.gz") == "fragment"  # the report's word
    assert (results / "report" / "input.png").stat().st_size > 0
