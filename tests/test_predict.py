"""The prediction tables: every input record, every frame, VirNucPro's chunk rule and its two tables."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import GENOMES, ROOT, read_tsv
from reads import write_reads
from stages import call_into, embed_into, embed_settings, prepare_into, score_into

from workflow_lib import h5store
from workflow_lib.errors import InputError
from workflow_lib.models import classifier
from workflow_lib.seqio import read_records

SHARDS = 2


@pytest.fixture(scope="module")
def sample(tmp_path_factory, demo_models):
    """Real genomes plus records with no stop-free frame, empty and too short, through prepare and embed."""
    root = tmp_path_factory.mktemp("sample")
    text = "".join((GENOMES / name).read_text() for name in ("phiX174.fasta", "human_mtDNA.fasta"))
    text += ">empty_record\n\n>tiny_record\nACG\n>all_N unknown bases\n" + "N" * 600 + "\n"
    (root / "in.fa").write_text(text)
    prepare_into(root / "in.fa", root / "prepare", SHARDS, chunk_length=500, min_length=10)
    files = {"esm": [], "dnabert": []}
    for model, suffix in (("esm", "faa"), ("dnabert", "fna")):
        for shard in range(SHARDS):
            path = root / f"{model}_{shard}.h5"
            embed_into(
                root / "prepare" / f"shard_{shard}.{suffix}",
                path,
                embed_settings(model, demo_models[model], layer=2 if model == "esm" else None),
            )
            files[model].append(str(path))
    torch.manual_seed(3)
    model = classifier.MLPClassifier(48 + 64)
    with torch.no_grad():
        model.bn1.running_var.fill_(0.01)  # spread the random scores so that both calls occur
    classifier.save(model.eval(), root / "classifier.pt")
    score_into(root / "prepare", files["dnabert"], files["esm"], root / "classifier.pt", root / "out")
    call_into(root / "prepare", root / "in.fa", root / "out")
    return root, files


def test_every_record_in_sequences_table(sample):
    root, _ = sample
    records = [record_id for record_id, _, _ in read_records(root / "in.fa")]
    table = read_tsv(root / "out" / "sequences.tsv")
    assert [r["sequence_id"] for r in table] == records
    by_id = {r["sequence_id"]: r for r in table}
    assert by_id["empty_record"]["call"] == "no_coding_frame" and by_id["empty_record"]["status"] == "empty"
    assert by_id["tiny_record"]["status"] == "too_short"
    assert by_id["all_N"]["call"] == "no_coding_frame" and by_id["all_N"]["n_chunks"] == "2"
    assert by_id["MT_human"]["call"] == "no_coding_frame"  # no stop-free frame at 500 bp (VirNucPro too)
    assert by_id["phiX174"]["call"] in ("virus", "other")
    assert by_id["phiX174"]["n_chunks_scored"] == "4"


def test_every_frame_once_and_chunk_rule(sample):
    root, _ = sample
    prepared = read_tsv(root / "prepare" / "frames.tsv.gz")
    frames = read_tsv(root / "out" / "frames.tsv")
    assert [f["frame_id"] for f in frames] == [f["frame_id"] for f in prepared]
    for f in frames:
        other, virus = float(f["score_other"]), float(f["score_virus"])
        assert other + virus == pytest.approx(1, abs=1e-5)
        assert f["prediction"] == ("virus" if virus > other else "others")
    chunks = read_tsv(root / "out" / "chunks.tsv")
    assert sum(int(c["n_frames"]) for c in chunks) == len(frames)
    for c in chunks:
        assert c["is_virus"] == str(float(c["max_score_virus"]) >= float(c["max_score_other"]))
    sequences = {s["sequence_id"]: s for s in read_tsv(root / "out" / "sequences.tsv")}
    viral = [c for c in chunks if c["sequence_id"] == "phiX174"]
    assert int(sequences["phiX174"]["n_viral_chunks"]) == sum(c["is_virus"] == "True" for c in viral)


def test_virnucpro_tables(sample):
    root, _ = sample
    lines = (root / "out" / "prediction_results.txt").read_text().splitlines()
    assert lines[0] == "Sequence_ID\tPrediction\tscore1\tscore2"
    frames = read_tsv(root / "out" / "frames.tsv")
    assert [line.split("\t")[0] for line in lines[1:]] == [f["frame_id"] for f in frames]
    first = lines[1].split("\t")
    assert first[2] == str(np.float32(first[2])) and first[1] in ("virus", "others")
    highest = (root / "out" / "prediction_results_highestscore.csv").read_text().splitlines()
    assert highest[0] == "Modified_ID\tIs_Virus"
    chunk_ids = sorted({f["frame_id"][:-2] for f in frames})  # VirNucPro's str[:-2], groupby-sorted
    assert [h.split("\t")[0] for h in highest[1:]] == chunk_ids
    assert {h.split("\t")[1] for h in highest[1:]} <= {"True", "False"}


def test_viral_fasta_holds_the_virus_calls(sample):
    root, _ = sample
    calls = {s["sequence_id"]: s for s in read_tsv(root / "out" / "sequences.tsv") if s["call"] == "virus"}
    headers = [line[1:] for line in (root / "out" / "viral.fasta").read_text().splitlines() if line.startswith(">")]
    assert {h.split()[0] for h in headers} == set(calls)
    for header in headers:  # the input's header, then the record's scores
        call = calls[header.split()[0]]
        assert header.endswith(
            f" virus_score={float(call['max_score_virus']):.4g} viral_fraction={float(call['viral_fraction']):.4g}"
        ), header


def test_embeddings_that_do_not_match_the_frames_fail(sample, tmp_path):
    root, files = sample
    ids, embeddings, attrs = h5store.read(files["esm"][0])
    h5store.write(tmp_path / "cut.h5", ids[1:], embeddings[1:], attrs)
    with pytest.raises(InputError, match="hold different frames"):
        score_into(
            root / "prepare",
            files["dnabert"],
            [str(tmp_path / "cut.h5"), files["esm"][1]],
            root / "classifier.pt",
            tmp_path / "out",
        )


def test_manifest_names_the_checkpoints_and_counts(sample, demo_models):
    import json

    from workflow_lib.checksums import sha256

    root, _ = sample
    manifest = json.loads((root / "out" / "manifest.json").read_text())
    esm_file = demo_models["esm"]
    assert manifest["checkpoints"]["esm"]["sha256"][esm_file.name] == sha256(esm_file)
    assert manifest["checkpoints"]["dnabert"]["sha256"]["model.safetensors"] == sha256(
        demo_models["dnabert"] / "model.safetensors"
    )
    assert manifest["checkpoints"]["classifier"]["sha256"] == sha256(root / "classifier.pt")
    table = read_tsv(root / "out" / "sequences.tsv")
    assert manifest["counts"]["records"] == len(table)
    assert manifest["counts"]["frames"] == len(read_tsv(root / "out" / "frames.tsv"))
    assert sum(manifest["counts"]["calls"].values()) == len(table)


def test_embeddings_of_another_checkpoint_fail(sample, tmp_path):
    """A shard left from a run with other model files is not mixed into the tables."""
    root, files = sample
    ids, embeddings, attrs = h5store.read(files["esm"][1])
    h5store.write(tmp_path / "other.h5", ids, embeddings, {**attrs, "checkpoint_sha256": '{"esm2.pt": "0123"}'})
    with pytest.raises(InputError, match=r"other.h5: made with .*'0123'.* but shard 0 with"):
        score_into(
            root / "prepare",
            files["dnabert"],
            [files["esm"][0], str(tmp_path / "other.h5")],
            root / "classifier.pt",
            tmp_path / "out",
        )


def test_cli_logs_progress_lines(sample, tmp_path, monkeypatch, caplog):
    """predict logs frames scored, rate and ETA block by block, then a final line; so does its CLI."""
    import workflow_lib.predict
    from workflow_lib.predict import ScoreFiles

    root, files = sample
    prepared = root / "prepare"
    frames = len(read_tsv(prepared / "frames.tsv.gz"))
    monkeypatch.setattr(workflow_lib.predict, "SCORE_ROWS", 1)
    outputs = ScoreFiles(*(tmp_path / name for name in ("frames.tsv", "chunks.tsv", "scoring.json")), None)
    with caplog.at_level("INFO", logger="workflow"):
        args = (prepared / "frames.tsv.gz", prepared / "sequences.tsv.gz", files["dnabert"], files["esm"])
        workflow_lib.predict.score(*args, root / "classifier.pt", outputs, 1e-6)
    line = rf"1 frames of {frames:,}, [\d.,]+/s, \d+% done, ETA [\d,]+ s"
    assert frames > 1 and any(re.fullmatch(line, message) for message in caplog.messages), caplog.messages
    command = [sys.executable, str(ROOT / "scripts" / "predict.py")]
    command += ["--prepared-frames", str(prepared / "frames.tsv.gz")]
    command += ["--prepared-sequences", str(prepared / "sequences.tsv.gz")]
    command += ["--dnabert", *files["dnabert"], "--esm", *files["esm"], "--classifier", str(root / "classifier.pt")]
    command += [f"--{name}={tmp_path / f'cli_{name}.{ext}'}" for name, ext in (("frames", "tsv"), ("chunks", "tsv"))]
    command += ["--scoring", str(tmp_path / "scoring.json"), "--progress-seconds", "0.000001", "--threads", "1"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert re.search(rf"INFO {frames:,} frames of {frames:,}, [\d.,]+/s\n", result.stderr), result.stderr
    for name in ("frames.tsv", "chunks.tsv"):
        assert (tmp_path / f"cli_{name}").read_bytes() == (root / "out" / name).read_bytes()


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """Reads of the bundled genomes, lambda whole and an empty record through prepare (3 shards),
    with seeded random embeddings (of prepare's frame IDs) and classifier: hundreds of frames."""
    root = tmp_path_factory.mktemp("many")
    write_reads(root / "in.fa", 400, 500, seed=0)
    with open(root / "in.fa", "a") as reads:
        reads.write((GENOMES / "lambda_NC_001416.fasta").read_text() + ">empty\n\n")
    prepare_into(root / "in.fa", root / "prepare", 3, chunk_length=300, min_length=10)
    rng = np.random.default_rng(0)
    files = {"dnabert": [], "esm": []}
    for model, suffix in (("dnabert", "fna"), ("esm", "faa")):
        for shard in range(3):
            ids = [line[1:] for line in (root / "prepare" / f"shard_{shard}.{suffix}").read_text().split("\n")[0:-1:2]]
            attrs = {name: "1" for name in h5store.REQUIRED_ATTRS} | {"model": model, "layer": 1}
            h5store.write(root / f"{model}_{shard}.h5", ids, rng.standard_normal((len(ids), 8), np.float32), attrs)
            files[model].append(str(root / f"{model}_{shard}.h5"))
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(16).eval(), root / "classifier.pt")
    return root, files


def test_tables_do_not_depend_on_the_block_size(many, tmp_path, monkeypatch):
    """Frames scored 5 at a time, VirNucPro's chunk rows sorted in runs of 3 and merged, records
    called 4 at a time: the same bytes as each table in one block."""
    import workflow_lib.call
    import workflow_lib.predict

    root, files = many
    for blocks in ("whole", "small"):
        if blocks == "small":
            monkeypatch.setattr(workflow_lib.predict, "SCORE_ROWS", 5)
            monkeypatch.setattr(workflow_lib.predict.VirNucProTables, "RUN_ROWS", 3)
            monkeypatch.setattr(workflow_lib.call, "BLOCK_ROWS", 4)
        score_into(root / "prepare", files["dnabert"], files["esm"], root / "classifier.pt", tmp_path / blocks)
        call_into(root / "prepare", root / "in.fa", tmp_path / blocks)
    calls = [s["call"] for s in read_tsv(tmp_path / "whole" / "sequences.tsv")]
    assert len(read_tsv(tmp_path / "whole" / "frames.tsv")) > 500 and {"virus", "other", "no_coding_frame"} <= set(
        calls
    )
    assert len(list(read_records(tmp_path / "whole" / "viral.fasta"))) == calls.count("virus")
    names = ("frames.tsv", "chunks.tsv", "prediction_results.txt", "prediction_results_highestscore.csv")
    for name in (*names, "sequences.tsv"):  # the classifier's float rounding varies with its batch's rows
        assert same_fields(tmp_path / "small" / name, tmp_path / "whole" / name), name
    for name in ("scoring.json", "manifest.json"):
        assert (tmp_path / "small" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    viral = [list(read_records(tmp_path / blocks / "viral.fasta")) for blocks in ("small", "whole")]
    assert [r[::2] for r in viral[0]] == [r[::2] for r in viral[1]]  # IDs and sequences


def same_fields(path_a: Path, path_b: Path) -> bool:
    """The same lines of tab-separated fields: numbers within 1e-5, other fields equal."""

    def same(a: str, b: str) -> bool:
        try:
            return a == b or abs(float(a) - float(b)) <= 1e-5 * abs(float(b)) + 1e-7
        except ValueError:
            return False

    lines = [[line.split("\t") for line in path.read_text().splitlines()] for path in (path_a, path_b)]
    shapes = [[len(line) for line in table] for table in lines]
    return shapes[0] == shapes[1] and all(same(a, b) for la, lb in zip(*lines) for a, b in zip(la, lb))


def test_float16_embeddings_score_nearly_the_same(sample, tmp_path):
    """float16 files rounded from the same values give the same frames, scores within 1e-2."""
    root, files = sample
    half = {"esm": [], "dnabert": []}
    for model in half:
        for path in files[model]:
            ids, embeddings, attrs = h5store.read(path)
            h5store.write(tmp_path / f"half_{Path(path).name}", ids, embeddings, attrs, "float16")
            half[model].append(str(tmp_path / f"half_{Path(path).name}"))
    score_into(root / "prepare", half["dnabert"], half["esm"], root / "classifier.pt", tmp_path / "half")
    want, got = read_tsv(root / "out" / "frames.tsv"), read_tsv(tmp_path / "half" / "frames.tsv")
    assert [f["frame_id"] for f in got] == [f["frame_id"] for f in want]
    change = max(abs(float(a["score_virus"]) - float(b["score_virus"])) for a, b in zip(got, want))
    assert change < 1e-2


def test_call_refuses_chunks_out_of_order_and_a_changed_input(many, tmp_path):
    root, files = many
    score_into(root / "prepare", files["dnabert"], files["esm"], root / "classifier.pt", tmp_path)
    call_into(root / "prepare", root / "in.fa", tmp_path)
    first_viral = next(read_records(tmp_path / "viral.fasta"))[0]
    lines = (tmp_path / "chunks.tsv").read_text().splitlines(keepends=True)
    moved = lines[1].split("\t")[0]
    rest = [line for line in lines[1:] if not line.startswith(f"{moved}\t")]
    (tmp_path / "chunks.tsv").write_text(lines[0] + "".join(rest + lines[1 : len(lines) - len(rest)]))
    with pytest.raises(InputError, match=rf"chunks.tsv: scores '{moved}' out of the order of .*sequences.tsv.gz"):
        call_into(root / "prepare", root / "in.fa", tmp_path)
    (tmp_path / "chunks.tsv").write_text("".join(lines))
    records = [r for r in read_records(root / "in.fa") if r[0] != first_viral]
    (tmp_path / "in.fa").write_text("".join(f">{r[0]}\n{r[2].decode()}\n" for r in records))
    with pytest.raises(InputError, match=rf"in.fa: no record '{first_viral}' where prepare found it"):
        call_into(root / "prepare", tmp_path / "in.fa", tmp_path)


def test_a_sample_without_a_frame_is_scored_and_called(tmp_path):
    """Human mtDNA has no stop-free frame at 500 bp: empty frames and chunks tables, every record
    called no_coding_frame."""
    (tmp_path / "in.fa").write_text((GENOMES / "human_mtDNA.fasta").read_text() + ">empty\n\n")
    prepare_into(tmp_path / "in.fa", tmp_path / "prepare", 2, chunk_length=500, min_length=10)
    files = {"dnabert": [], "esm": []}
    for model in files:
        for shard in range(2):
            attrs = {name: "1" for name in h5store.REQUIRED_ATTRS} | {"model": model, "layer": 1}
            h5store.write(tmp_path / f"{model}_{shard}.h5", [], np.zeros((0, 8), np.float32), attrs)
            files[model].append(str(tmp_path / f"{model}_{shard}.h5"))
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(16).eval(), tmp_path / "classifier.pt")
    score_into(tmp_path / "prepare", files["dnabert"], files["esm"], tmp_path / "classifier.pt", tmp_path / "out")
    call_into(tmp_path / "prepare", tmp_path / "in.fa", tmp_path / "out")
    assert read_tsv(tmp_path / "out" / "frames.tsv") == [] and read_tsv(tmp_path / "out" / "chunks.tsv") == []
    assert [s["call"] for s in read_tsv(tmp_path / "out" / "sequences.tsv")] == ["no_coding_frame"] * 2
    assert (tmp_path / "out" / "viral.fasta").read_text() == ""
