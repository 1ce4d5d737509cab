"""The prediction tables: every input record, every frame, VirNucPro's chunk rule and its two tables."""

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import GENOMES, ROOT, read_embeddings, read_fasta, read_tsv, write_embeddings

from harness.stages import (
    call_into,
    embed_into,
    embed_settings,
    prepare_into,
    score_into,
    shard_fastas,
    write_reads,
)
from workflow_lib.cli.errors import InputError
from workflow_lib.io import h5store
from workflow_lib.io.seqio import read_records
from workflow_lib.models import classifier

SHARD_TOKENS = 336  # the sample's 4 frames (phiX174's) cost 168 tokens each: 2 shards of 2


def scores_files(outdir: Path, n: int) -> list[str]:
    """The scores file of each of `n` shards, as score_into writes them into `outdir`."""
    return [str(outdir / "scores" / f"shard_{shard}.npz") for shard in range(n)]


@pytest.fixture(scope="module")
def sample(tmp_path_factory, demo_models):
    """Real genomes plus records with no stop-free frame, empty and too short, through prepare (2
    shards), embed (each shard by the tiny demo models), score and predict."""
    root = tmp_path_factory.mktemp("sample")
    text = "".join((GENOMES / name).read_text() for name in ("phiX174.fasta", "human_mtDNA.fasta"))
    text += ">empty_record\n\n>tiny_record\nACG\n>all_N unknown bases\n" + "N" * 600 + "\n"
    (root / "in.fa").write_text(text)
    counts = prepare_into(root / "in.fa", root / "prepare", SHARD_TOKENS, chunk_length=500, min_length=10)
    assert (counts["frames"], counts["shards"]) == (4, 2)
    files = {"esm": [], "dnabert": []}
    for model, suffix in (("esm", "faa"), ("dnabert", "fna")):
        for shard, fasta in enumerate(shard_fastas(root / "prepare", suffix)):
            path = root / f"{model}_{shard}.h5"
            embed_into(fasta, path, embed_settings(model, demo_models[model], layer=2 if model == "esm" else None))
            files[model].append(str(path))
    torch.manual_seed(3)
    model = classifier.MLPClassifier(48 + 64)
    with torch.no_grad():
        model.bn1.running_var.fill_(0.01)  # spread the random scores so that both calls occur
    classifier.save(model.eval(), root / "classifier.pt")
    score_into(root / "prepare", list(zip(files["dnabert"], files["esm"])), root / "classifier.pt", root / "out")
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
        assert f["prediction"] == ("virus" if virus > other else "other")  # the words of chunks.tsv and sequences.tsv
    chunks = read_tsv(root / "out" / "chunks.tsv")
    assert sum(int(c["n_frames"]) for c in chunks) == len(frames)
    # each chunk's place in its record, as prepare cut it
    cut = {(f["sequence_id"], f["chunk"]): (f["chunk_start"], f["chunk_end"]) for f in prepared}
    assert [(c["chunk_start"], c["chunk_end"]) for c in chunks] == [cut[c["sequence_id"], c["chunk"]] for c in chunks]
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
    assert first[2] == str(np.float32(first[2])) and first[1] in ("virus", "others")  # VirNucPro's spelling
    spelled = {"virus": "virus", "other": "others"}  # only VirNucPro's own tables say 'others'
    assert [line.split("\t")[1] for line in lines[1:]] == [spelled[f["prediction"]] for f in frames]
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


def rewrite(out: Path, *parts: tuple[str, slice]) -> str:
    """An embeddings file at `out` of the rows `parts` name, each (file, rows), in that order."""
    read = [(read_embeddings(path), rows) for path, rows in parts]
    ids = [i for (file_ids, _, _), rows in read for i in file_ids[rows]]
    embeddings = np.concatenate([file_embeddings[rows] for (_, file_embeddings, _), rows in read])
    write_embeddings(out, ids, embeddings, read[0][0][2])
    return str(out)


MISMATCH = r"scores/shard_{}\.npz: the scores do not match shard {} of the frames table \(it {}\); delete the sample's"


@pytest.mark.parametrize(
    "case, message",
    [
        ("esm_lacks_a_frame", r"dnabert_0\.h5 and \S+esm_0\.h5 hold different frames; delete them and run again"),
        ("shard_lacks_a_frame", MISMATCH.format(0, 0, r"holds \d+ frames where \S+bins\.npz counts \d+")),
        ("shards_swapped", MISMATCH.format(0, 0, "was made from other frames than the frames table lists")),
        ("shard_holds_more_frames", MISMATCH.format(1, 1, r"holds 4 frames where \S+bins\.npz counts 2")),
        ("shard_not_scored", r"bins\.npz: counts \d+ frames of shard 1, but no scores file given holds them; delete"),
    ],
)
def test_embeddings_that_do_not_match_the_frames_fail(sample, tmp_path, case, message):
    """Each shard's scores are checked against its frames in prepare's frames table: their number,
    and their IDs by digest; no table is left behind."""
    root, files = sample
    dnabert, esm = list(files["dnabert"]), list(files["esm"])
    if case == "esm_lacks_a_frame":  # refused by the score stage: its two embeddings disagree
        esm[0] = rewrite(tmp_path / "esm_0.h5", (esm[0], slice(1, None)))
    elif case == "shard_lacks_a_frame":
        dnabert[0] = rewrite(tmp_path / "dnabert_0.h5", (dnabert[0], slice(1, None)))
        esm[0] = rewrite(tmp_path / "esm_0.h5", (esm[0], slice(1, None)))
    elif case == "shards_swapped":  # as many frames as each shard, but the other shard's
        dnabert, esm = dnabert[::-1], esm[::-1]
    elif case == "shard_holds_more_frames":
        dnabert[1] = rewrite(tmp_path / "dnabert_1.h5", (dnabert[1], slice(None)), (dnabert[0], slice(None)))
        esm[1] = rewrite(tmp_path / "esm_1.h5", (esm[1], slice(None)), (esm[0], slice(None)))
    else:
        dnabert, esm = dnabert[:1], esm[:1]
    with pytest.raises(InputError, match=message):
        score_into(root / "prepare", list(zip(dnabert, esm)), root / "classifier.pt", tmp_path / "out")
    assert not any((tmp_path / "out" / name).exists() for name in ("frames.tsv", "chunks.tsv", "scoring.json"))


def test_manifest_names_the_checkpoints_and_counts(sample, demo_models):
    import json

    from workflow_lib.io.checksums import sha256

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
    """A shard left from a run with other model files is not mixed into the tables: its scores
    file names the models it was scored from, and they differ from shard 0's."""
    root, files = sample
    ids, embeddings, attrs = read_embeddings(files["esm"][1])
    write_embeddings(tmp_path / "other.h5", ids, embeddings, {**attrs, "checkpoint_sha256": '{"esm2.pt": "0123"}'})
    with pytest.raises(InputError, match=r"scores/shard_1\.npz: made with .*'0123'.* but \S+scores/shard_0\.npz with"):
        score_into(
            root / "prepare",
            list(zip(files["dnabert"], [files["esm"][0], str(tmp_path / "other.h5")])),
            root / "classifier.pt",
            tmp_path / "out",
        )


def test_a_calibration_for_another_classifier_than_the_scores_is_refused(sample, tmp_path):
    """The start-up and fetch_classifier check a calibration against the classifier file they see;
    predict holds it to the classifier that scored, whatever happened to the file since."""
    from workflow_lib.classify.calibration import Calibration
    from workflow_lib.classify.predict import ScoreFiles, write_tables
    from workflow_lib.io.checksums import sha256

    root, files = sample
    prepared, scores = root / "prepare", scores_files(root / "out", len(files["esm"]))
    outputs = ScoreFiles(*(tmp_path / name for name in ("frames.tsv", "chunks.tsv", "scoring.json")), None)
    other = Calibration("0" * 64, 500, "platt", [-5.0, 5.0], [-4.0, 4.0], 0.3, 0.8, 0.2, 0.1, 0.3, 9.0, {}, {})
    args = (prepared / "frames.tsv.gz", prepared / "sequences.tsv.gz", scores, prepared / "bins.npz", outputs, 30)
    with pytest.raises(InputError) as refused:
        write_tables(*args, other)
    scored_by = sha256(root / "classifier.pt")
    assert str(refused.value) == (
        f"models.calibration: made for another classifier file (SHA-256 000000000000..., the configured one is "
        f"{scored_by[:12]}...); run the calibrate target for it"
    )
    assert not outputs.frames.exists()


@pytest.mark.parametrize("cut", [0, 100], ids=["empty", "truncated"])
def test_a_broken_scores_file_is_refused_in_one_line(sample, tmp_path, cut):
    """A scores file cut short (a full disk, a copy stopped midway) is named, with what to do."""
    from workflow_lib.classify.predict import ShardScores

    root, files = sample
    scores = scores_files(root / "out", len(files["esm"]))
    broken = tmp_path / "shard_1.npz"
    broken.write_bytes(Path(scores[1]).read_bytes()[:cut])
    with pytest.raises(InputError, match=rf"^{re.escape(str(broken))}: not a readable scores file \(.+\); delete it"):
        ShardScores([scores[0], broken], root / "prepare" / "bins.npz")


def test_cli_logs_progress_lines(sample, tmp_path, monkeypatch, caplog):
    """score logs a shard's frames scored, predict the sample's frames tabled, with rate and ETA
    block by block, then a final line; so do their CLIs, whose outputs are those of the stages."""
    import workflow_lib.classify.predict
    import workflow_lib.classify.score
    from workflow_lib.classify.predict import ScoreFiles

    root, files = sample
    prepared = root / "prepare"
    frames, shard_frames = len(read_tsv(prepared / "frames.tsv.gz")), len(read_fasta(shard_fastas(prepared, "faa")[0]))
    scores = scores_files(root / "out", len(files["esm"]))
    monkeypatch.setattr(workflow_lib.classify.score, "SCORE_ROWS", 1)
    monkeypatch.setattr(workflow_lib.classify.predict, "TABLE_ROWS", 1)
    outputs = ScoreFiles(*(tmp_path / name for name in ("frames.tsv", "chunks.tsv", "scoring.json")), None)
    with caplog.at_level("INFO", logger="workflow"):
        args = ((files["dnabert"][0], files["esm"][0]), root / "classifier.pt", tmp_path / "shard_0.npz")
        workflow_lib.classify.score.score_shard(*args, 1e-6)
        workflow_lib.classify.predict.write_tables(
            prepared / "frames.tsv.gz", prepared / "sequences.tsv.gz", scores, prepared / "bins.npz", outputs, 1e-6
        )
    for total in (shard_frames, frames):
        line = rf"1 frames of {total:,}, [\d.,]+/s, \d+% done, ETA [\d,]+ s"
        assert total > 1 and any(re.fullmatch(line, message) for message in caplog.messages), caplog.messages

    score_command = [sys.executable, str(ROOT / "scripts" / "score.py"), "--embeddings", files["dnabert"][0]]
    score_command += [files["esm"][0], "--classifier", str(root / "classifier.pt")]
    score_command += ["--scores", str(tmp_path / "cli_shard_0.npz"), "--progress-seconds", "0.000001", "--threads", "1"]
    result = subprocess.run(score_command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert re.search(rf"INFO {shard_frames:,} frames of {shard_frames:,}, [\d.,]+/s, scored into ", result.stderr)
    with np.load(tmp_path / "cli_shard_0.npz") as cli, np.load(scores[0]) as stage:
        assert cli.files == stage.files == ["scores", "atypicality", "pieces", "ids_blake2b", "checkpoints"]
        assert all(np.array_equal(cli[name], stage[name]) for name in cli.files)

    command = [sys.executable, str(ROOT / "scripts" / "predict.py")]
    command += ["--prepared-frames", str(prepared / "frames.tsv.gz")]
    command += ["--prepared-sequences", str(prepared / "sequences.tsv.gz"), "--scores", *scores]
    command += ["--bins", str(prepared / "bins.npz")]
    command += [f"--{name}={tmp_path / f'cli_{name}.{ext}'}" for name, ext in (("frames", "tsv"), ("chunks", "tsv"))]
    command += ["--scoring", str(tmp_path / "scoring.json"), "--progress-seconds", "0.000001"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert re.search(rf"INFO {frames:,} frames of {frames:,}, [\d.,]+/s\n", result.stderr), result.stderr
    for name in ("frames.tsv", "chunks.tsv"):
        assert (tmp_path / f"cli_{name}").read_bytes() == (root / "out" / name).read_bytes()


def synthetic_embeddings(prepare_dir: Path, outdir: Path) -> dict[str, list[str]]:
    """Each shard's embeddings files, 8 seeded random values a frame and model: a frame's depend on
    its ID and the model alone, not on its shard or its row."""
    files = {"dnabert": [], "esm": []}
    for model, suffix in (("dnabert", "fna"), ("esm", "faa")):
        for shard, fasta in enumerate(shard_fastas(prepare_dir, suffix)):
            ids = [frame_id for frame_id, _ in read_fasta(fasta)]
            seeds = [
                int.from_bytes(hashlib.blake2b(f"{model} {i}".encode(), digest_size=8).digest(), "little") for i in ids
            ]
            embeddings = np.array([np.random.default_rng(seed).standard_normal(8, np.float32) for seed in seeds])
            attrs = {name: "1" for name in h5store.REQUIRED_ATTRS} | {"model": model, "layer": 1}
            write_embeddings(outdir / f"{model}_{shard}.h5", ids, embeddings.reshape(len(ids), 8), attrs)
            files[model].append(str(outdir / f"{model}_{shard}.h5"))
    return files


MANY_SHARD_TOKENS = 15_000  # the sample's 733 frames, 68,707 tokens, fill 5 shards


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """Reads of the bundled genomes, lambda whole and an empty record through prepare (5 shards),
    with seeded random embeddings (of prepare's frame IDs) and classifier: hundreds of frames."""
    root = tmp_path_factory.mktemp("many")
    write_reads(root / "in.fa", 400, 500, seed=0)
    with open(root / "in.fa", "a") as reads:
        reads.write((GENOMES / "lambda_NC_001416.fasta").read_text() + ">empty\n\n")
    counts = prepare_into(root / "in.fa", root / "prepare", MANY_SHARD_TOKENS, chunk_length=300, min_length=10)
    assert (counts["frames"], counts["shards"]) == (733, 5)
    files = synthetic_embeddings(root / "prepare", root)
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(16).eval(), root / "classifier.pt")
    return root, files


def test_tables_do_not_depend_on_the_block_size(many, tmp_path, monkeypatch):
    """Each shard's frames scored 5 at a time, the frames table read 5 rows at a time (blocks that
    span shards), VirNucPro's chunk rows sorted in runs of 3 and merged, records called 4 at a time:
    the same bytes as each table in one block."""
    import workflow_lib.classify.call
    import workflow_lib.classify.predict
    import workflow_lib.classify.score

    root, files = many
    for blocks in ("whole", "small"):
        if blocks == "small":
            monkeypatch.setattr(workflow_lib.classify.score, "SCORE_ROWS", 5)
            monkeypatch.setattr(workflow_lib.classify.predict, "TABLE_ROWS", 5)
            monkeypatch.setattr(workflow_lib.classify.predict, "RUN_ROWS", 3)
            monkeypatch.setattr(workflow_lib.classify.call, "BLOCK_ROWS", 4)
        score_into(
            root / "prepare", list(zip(files["dnabert"], files["esm"])), root / "classifier.pt", tmp_path / blocks
        )
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


def test_tables_do_not_depend_on_the_sharding(many, tmp_path):
    """The same frames prepared into one shard instead of 5, each with the same embeddings, scored
    by the same classifier: the same bytes in every table; only the frames' shard numbers differ."""
    from workflow_lib.io.tables import read_table

    root, several = many
    prepare = tmp_path / "prepare"
    assert prepare_into(root / "in.fa", prepare, chunk_length=300, min_length=10)["shards"] == 1
    one = synthetic_embeddings(prepare, tmp_path)
    frames = [read_table(path / "frames.tsv.gz") for path in (prepare, root / "prepare")]
    assert (frames[0]["shard"].unique().tolist(), frames[1]["shard"].unique().tolist()) == ([0], [0, 1, 2, 3, 4])
    assert frames[0].drop(columns="shard").equals(frames[1].drop(columns="shard"))
    for name, (prepared, files) in {"one": (prepare, one), "several": (root / "prepare", several)}.items():
        score_into(prepared, list(zip(files["dnabert"], files["esm"])), root / "classifier.pt", tmp_path / name)
        call_into(prepared, root / "in.fa", tmp_path / name)
    names = ("frames.tsv", "chunks.tsv", "prediction_results.txt", "prediction_results_highestscore.csv")
    for name in (*names, "scoring.json", "sequences.tsv", "viral.fasta"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "several" / name).read_bytes(), name
    calls = {s["call"] for s in read_tsv(tmp_path / "one" / "sequences.tsv")}
    assert len(read_tsv(tmp_path / "one" / "frames.tsv")) == 733 and {"virus", "other"} <= calls


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
            ids, embeddings, attrs = read_embeddings(path)
            write_embeddings(tmp_path / f"half_{Path(path).name}", ids, embeddings, attrs, "float16")
            half[model].append(str(tmp_path / f"half_{Path(path).name}"))
    score_into(root / "prepare", list(zip(half["dnabert"], half["esm"])), root / "classifier.pt", tmp_path / "half")
    want, got = read_tsv(root / "out" / "frames.tsv"), read_tsv(tmp_path / "half" / "frames.tsv")
    assert [f["frame_id"] for f in got] == [f["frame_id"] for f in want]
    change = max(abs(float(a["score_virus"]) - float(b["score_virus"])) for a, b in zip(got, want))
    assert change < 1e-2


def test_call_refuses_chunks_out_of_order_and_a_changed_input(many, tmp_path):
    root, files = many
    score_into(root / "prepare", list(zip(files["dnabert"], files["esm"])), root / "classifier.pt", tmp_path)
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
    counts = prepare_into(tmp_path / "in.fa", tmp_path / "prepare", 100, chunk_length=500, min_length=10)
    assert (counts["frames"], counts["shards"]) == (0, 1)  # one shard, empty
    files = synthetic_embeddings(tmp_path / "prepare", tmp_path)
    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(16).eval(), tmp_path / "classifier.pt")
    score_into(
        tmp_path / "prepare", list(zip(files["dnabert"], files["esm"])), tmp_path / "classifier.pt", tmp_path / "out"
    )
    call_into(tmp_path / "prepare", tmp_path / "in.fa", tmp_path / "out")
    assert read_tsv(tmp_path / "out" / "frames.tsv") == [] and read_tsv(tmp_path / "out" / "chunks.tsv") == []
    assert [s["call"] for s in read_tsv(tmp_path / "out" / "sequences.tsv")] == ["no_coding_frame"] * 2
    assert (tmp_path / "out" / "viral.fasta").read_text() == ""
