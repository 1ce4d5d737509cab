"""Training metrics on the demo data: whole chunks held out, both classes in validation, the
metrics, ROC curve and split in metrics.json; seeded runs give the same bytes."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers import ROOT, read_embeddings, read_tsv, write_embeddings

from harness.stages import DEFAULTS, embed_into, embed_settings, prepare_into, shard_fastas, train_settings
from workflow_lib.cli.errors import InputError
from workflow_lib.io.seqio import read_records
from workflow_lib.models.classifier import MLPClassifier
from workflow_lib.training.train import (
    Examples,
    cross_fitted_scores,
    fit,
    load_examples,
    metrics,
    roc_curve,
    sequence_folds,
    split,
    virus_scores,
)

# Each sample's 46 to 75 frames (4,659 to 7,604 tokens) fill 2 to 4 shards of 2,500 tokens.
RECORDS, RECORD_LENGTH, SHARD_TOKENS = 4, 6000, 2500
FRACTION, SEED = 0.2, 42


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_models):
    """The demo's labelled genomes (config/demo_samples.tsv), 4 records of 6 kb cut from each,
    through prepare and embed. Records are named alike in every sample: a chunk is told by its
    sample too."""
    root = tmp_path_factory.mktemp("demo_training")
    shards = []
    for row in read_tsv(ROOT / "config" / "demo_samples.tsv"):
        if not row["label"]:
            continue
        ((_, _, genome),) = read_records(ROOT / row["path"])
        step = len(genome) // RECORDS
        parts = [genome[i * step : i * step + RECORD_LENGTH].decode() for i in range(RECORDS)]
        (root / f"{row['sample']}.fa").write_text("".join(f">part_{i}\n{part}\n" for i, part in enumerate(parts)))
        prepared = root / row["sample"]
        assert prepare_into(root / f"{row['sample']}.fa", prepared, SHARD_TOKENS, chunk_length=300)["shards"] >= 2
        fastas = {"dnabert": shard_fastas(prepared, "fna"), "esm": shard_fastas(prepared, "faa")}
        for shard in range(len(fastas["esm"])):
            paths = []
            for model in ("dnabert", "esm"):
                paths.append(str(prepared / f"{model}_{shard}.h5"))
                settings = embed_settings(model, demo_models[model], layer=2 if model == "esm" else None)
                embed_into(fastas[model][shard], paths[-1], settings)
            rows = len(read_embeddings(paths[0])[0])
            shards.append((row["label"], tuple(paths), str(prepared / "frames.tsv.gz"), 0, rows))
    return root, shards


def train_cli(shards, outdir):
    command = [sys.executable, str(ROOT / "scripts" / "train.py")]
    for label, paths, frames, first, end in shards:
        command += ["--shard", label, frames, str(first), str(end), *paths]
    command += ["--classifier", str(outdir / "classifier.pt"), "--metrics", str(outdir / "metrics.json")]
    command += ["--calibration", str(outdir / "calibration.json")]
    settings = {k: v for k, v in DEFAULTS["train"].items() if k not in ("classifier", "calibration")}  # but these:
    settings |= {"epochs": 40, "validation_fraction": FRACTION, "seed": SEED, "chunk_length": 300}
    settings |= {"progress_seconds": 0.000001, "threads": 1}
    for key, value in settings.items():
        command += [f"--{key.replace('_', '-')}", str(value).lower() if isinstance(value, bool) else str(value)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stderr


@pytest.fixture(scope="module")
def trained(demo):
    """Two training runs through the CLI, with the same seed: (their directories, the first log)."""
    root, shards = demo
    logs = []
    for name in ("first", "second"):
        (root / name).mkdir()
        logs.append(train_cli(shards, root / name))
    return root / "first", root / "second", logs[0]


@pytest.mark.slow
def test_metrics_on_the_demo_data(demo, trained):
    first, _, _ = trained
    result = json.loads((first / "metrics.json").read_text())
    for part in ("train", "validation"):
        assert {"n", "n_virus", "accuracy", "precision", "recall", "f1", "roc_auc"} <= result[part].keys()
        assert all(0 <= result[part][k] <= 1 for k in ("accuracy", "precision", "recall", "f1", "roc_auc"))
    validation, split_ = result["validation"], result["split"]
    assert 0 < validation["n_virus"] < validation["n"], "both classes in validation"
    assert split_["unit"] == "chunk" and split_["seed"] == SEED  # 8 virus records: too few to hold out whole ones
    assert split_["validation_frames"] == validation["n"] and split_["train_frames"] == result["train"]["n"]
    frames = split_["train_frames"] + split_["validation_frames"]
    assert frames == sum(len(read_tsv(f"{tsv}")) for tsv in {s[2] for s in demo[1]})
    assert 0.15 < split_["validation_frames"] / frames < 0.3
    assert 0 < result["epochs_run"] <= 40 and len(result["history"]["validation_loss"]) == result["epochs_run"]
    # 8 virus and 12 other records: the calibration's scores are cross-fitted over 5 folds, every chunk scored
    assert result["calibration_scores"] == "cross-fitted over 5 folds of whole sequences"
    assert result["calibration"]["chunks"] == split_["train_chunks"] + split_["validation_chunks"]


@pytest.mark.slow
def test_roc_curve_is_exact_and_its_area_is_the_auc(trained):
    result = json.loads((trained[0] / "metrics.json").read_text())
    fpr, tpr = (np.array(result["roc_curve"][k]) for k in ("false_positive_rate", "true_positive_rate"))
    threshold = result["roc_curve"]["threshold"]
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1)
    assert (np.diff(fpr) >= 0).all() and (np.diff(tpr) >= 0).all() and len(fpr) > 3
    assert threshold[0] is None and threshold[1:] == sorted(threshold[1:], reverse=True)
    area = float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2))
    assert area == pytest.approx(result["validation"]["roc_auc"], abs=1e-9)


@pytest.mark.slow
def test_the_examples_do_not_depend_on_how_the_shards_were_cut(demo):
    """Each sample's pieces listed in another order, one of them cut in two (as another plan would
    pool them): the same examples in the same order, so the same classifier."""
    _, shards = demo
    label, paths, frames, first, end = shards[0]
    middle = (first + end) // 2
    recut = [*shards[1:][::-1], (label, paths, frames, middle, end), (label, paths, frames, first, middle)]
    samples = list(dict.fromkeys(s[2] for s in shards))
    recut.sort(key=lambda piece: samples.index(piece[2]))  # the samples as first listed, as the plan lists them
    given, other = (load_examples(s, DEFAULTS["progress_seconds"]) for s in (shards, recut))
    for name in ("x", "y", "chunk", "sequence"):
        assert np.array_equal(getattr(given, name), getattr(other, name)), name


@pytest.mark.slow
def test_no_chunk_on_both_sides(demo, trained):
    """The split that training used, checked against (sample, sequence, chunk) read straight from
    the frames tables: the examples are each sample's frames (the embeddings hold each once) in its
    frames table's order, the samples as first listed."""
    _, shards = demo
    keys, embedded = [], []
    for frames_path in dict.fromkeys(shard[2] for shard in shards):
        frames = read_tsv(frames_path)
        keys += [(frames_path, f["sequence_id"], f["chunk"]) for f in frames]
        embedded += [(frames_path, f["frame_id"]) for f in frames]
    pieces = [(s[2], i) for s in shards for i in read_embeddings(s[1][0])[0][s[3] : s[4]]]
    assert sorted(pieces) == sorted(embedded)
    training, validation, unit = split(load_examples(shards, DEFAULTS["progress_seconds"]), FRACTION, SEED)
    train_chunks, validation_chunks = {keys[i] for i in training}, {keys[i] for i in validation}
    assert unit == "chunk" and not train_chunks & validation_chunks
    result = json.loads((trained[0] / "metrics.json").read_text())
    assert (len(train_chunks), len(validation_chunks)) == (
        result["split"]["train_chunks"],
        result["split"]["validation_chunks"],
    )
    assert len(validation_chunks) < len(validation), "some chunks have several frames: a split by frame would leak"


@pytest.mark.slow
def test_training_shards_of_another_width_fail_in_one_line(demo, tmp_path):
    _, shards = demo
    label, (dna_path, esm_path), frames_path, first, end = shards[-1]
    ids, esm, attrs = read_embeddings(esm_path)
    write_embeddings(tmp_path / "wide.h5", ids, np.hstack([esm, esm]), attrs)
    message = (
        r"^\S+ and \S+wide\.h5: 176 features a frame \(dnabert 48 \+ esm 128\) where \S+ and \S+ have 112 "
        r"\(dnabert 48 \+ esm 64\); embed every training"
    )
    with pytest.raises(InputError, match=message):
        load_examples([*shards[:-1], (label, (dna_path, str(tmp_path / "wide.h5")), frames_path, first, end)], 600)


@pytest.mark.slow
def test_seeded_training_gives_the_same_bytes(trained):
    first, second, _ = trained
    assert (first / "metrics.json").read_bytes() == (second / "metrics.json").read_bytes()
    assert (first / "classifier.pt").read_bytes() == (second / "classifier.pt").read_bytes()


@pytest.mark.slow
def test_cli_logs_progress_lines(demo, trained):
    log = trained[2]
    lines = re.findall(r"INFO ([\d.]+) epochs of 40, ([\d.,]+)/s, \d+% done, ETA [\d,]+ s, (.*)\n", log)
    assert len(lines) > 10, log[-3000:]
    done = [float(d) for d, _, _ in lines]
    assert done == sorted(done) and all(float(rate.replace(",", "")) > 0 for _, rate, _ in lines)
    assert lines[0][2] == "epoch 1 running"
    assert any(re.fullmatch(r"validation loss [\d.]+ at epoch \d+, best [\d.]+ at epoch \d+", e) for _, _, e in lines)
    assert re.search(r"INFO \d+ epochs in [\d.]+ s \(.*\); best validation loss [\d.]+ at epoch \d+\n", log)
    n_shards = len(demo[1])  # of the 5 labelled samples, 2 or more each
    assert n_shards >= 10 and re.search(rf"INFO {n_shards} shards read of {n_shards}, ", log)


def test_roc_and_metrics_by_hand():
    """Three virus frames (0.9, 0.8, 0.6) and three others (0.8, 0.4, 0.2): the tie at 0.8 is one
    diagonal step; virus outscores other in 7.5 of 9 pairs."""
    y = np.array([1, 1, 0, 1, 0, 0])
    score = np.array([0.9, 0.8, 0.8, 0.6, 0.4, 0.2], dtype=np.float32)
    curve = roc_curve(y, score)
    third = 1 / 3
    assert curve["false_positive_rate"] == pytest.approx([0, 0, third, third, 1])
    assert curve["true_positive_rate"] == pytest.approx([0, third, 2 * third, 1, 1])  # (2/3, 1) is on a straight run
    assert curve["threshold"] == [None, *np.float32([0.9, 0.8, 0.6, 0.2]).tolist()]
    found = metrics(y, score)
    assert found["roc_auc"] == pytest.approx(7.5 / 9)
    assert found["confusion"] == {"tp": 3, "fp": 1, "tn": 2, "fn": 0}  # called virus above 0.5
    assert (found["accuracy"], found["precision"], found["recall"]) == pytest.approx((5 / 6, 3 / 4, 1))
    assert found["f1"] == pytest.approx(6 / 7)
    assert roc_curve(np.array([1, 1]), np.float32([0.3, 0.7])) is None and metrics(y[:2], score[:2])["roc_auc"] is None


def test_whole_sequences_are_held_out_when_there_are_enough():
    """12 sequences per class of 3 chunks of 2 frames each; with 3 per class, chunks are held out."""
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1], 72)
    sequence, chunk = np.arange(144) // 6, np.arange(144) // 2
    examples = Examples(rng.normal(size=(144, 4)).astype(np.float32), y, chunk, sequence)
    training, validation, unit = split(examples, 0.25, SEED)
    assert unit == "sequence" and not set(sequence[training]) & set(sequence[validation])
    assert set(y[validation]) == {0, 1} and len(validation) == 2 * 18  # 3 of each class's 12 sequences
    again = split(examples, 0.25, SEED)
    assert np.array_equal(training, again[0]) and np.array_equal(validation, again[1])
    assert not np.array_equal(validation, split(examples, 0.25, SEED + 1)[1])
    few = Examples(examples.x[:36], y[:36] * 0 + (np.arange(36) >= 18), chunk[:36], sequence[:36])
    training, validation, unit = split(few, 0.25, SEED)
    assert unit == "chunk" and not set(chunk[training]) & set(chunk[validation]) and set(few.y[validation]) == {0, 1}


def test_folds_deal_whole_sequences_with_both_classes_in_each():
    """7 virus and 4 other sequences: 4 folds at most (the smaller class), each with both classes;
    a class of one sequence, or a single fold asked for, gives none."""
    sizes = [3, 5, 2, 4, 6, 1, 3, 2, 5, 4, 3]
    sequence = np.repeat(np.arange(11), sizes)
    y = (sequence < 7).astype(np.int64)
    examples = Examples(np.zeros((sequence.size, 2), np.float32), y, np.arange(sequence.size), sequence)
    folds = sequence_folds(examples, 5, SEED)
    assert folds.max() == 3 and all(np.unique(folds[sequence == s]).size == 1 for s in range(11))
    assert all({0, 1} <= set(y[folds == fold]) for fold in range(4))
    assert sequence_folds(examples, 2, SEED).max() == 1
    assert sequence_folds(examples, 1, SEED) is None and sequence_folds(examples, 0, SEED) is None
    single = Examples(examples.x, (sequence == 0).astype(np.int64), examples.chunk, sequence)
    assert sequence_folds(single, 5, SEED) is None


def test_cross_fitted_scores_come_from_classifiers_that_never_saw_the_sequence():
    """Labels that nothing shared between sequences predicts: each of 30 sequences a class has its
    own cluster of features, its label drawn at random. A classifier trained on all of them scores
    its own sequences right (it memorises the clusters); each cross-fitted score comes from one
    that never saw the sequence, and they rank the sequences no better than chance."""
    rng = np.random.default_rng(SEED)
    sequences, chunks = 60, 8
    sequence = np.repeat(np.arange(sequences), chunks)
    label = rng.permutation(np.repeat([0, 1], sequences // 2))
    centres = rng.normal(0, 3, (sequences, 16)).astype(np.float32)
    x = centres[sequence] + rng.normal(0, 0.3, (sequence.size, 16)).astype(np.float32)
    examples = Examples(x, label[sequence], np.arange(sequence.size), sequence)
    settings = train_settings(epochs=30, learning_rate=0.01, calibration_folds=5, seed=SEED, progress_seconds=600)
    scores, folds = cross_fitted_scores(examples, settings, epochs=30)
    model = MLPClassifier(16)
    everything = torch.arange(sequence.size)
    fit(model, (torch.from_numpy(x), torch.from_numpy(examples.y), everything), None, settings)
    seen = virus_scores(model, torch.from_numpy(x), np.arange(sequence.size))[0]
    per_sequence = lambda s: np.bincount(sequence, weights=s) / chunks  # noqa: E731
    assert folds == 5 and metrics(label, per_sequence(seen))["roc_auc"] > 0.95
    assert abs(metrics(label, per_sequence(scores))["roc_auc"] - 0.5) < 0.2
