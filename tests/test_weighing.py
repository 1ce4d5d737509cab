"""Weighing the calls in real workflow runs: the train target's calibration applied (probabilities,
q-values, the sample's viral fraction, FASTA within a q-value, the reliability diagram), the
calibrate target for a given classifier, and calibrations refused at start-up."""

import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import ENV, GENOMES, SNAKEMAKE, read_fasta, read_tsv

from workflow_lib.classify import calibration
from workflow_lib.classify.weighing import OK_LINES, ChunkWeighing, composition_lines
from workflow_lib.io import tables
from workflow_lib.io.checksums import sha256


def run(workdir, config, *targets):
    result = subprocess.run(
        SNAKEMAKE + ["--directory", str(workdir), *targets, "--configfile", str(config)],  # options take several values
        capture_output=True,
        text=True,
        env=ENV,
    )
    return result.returncode, result.stdout + result.stderr


def changed_config(config, path, **changes):
    settings = yaml.safe_load(config.read_text())
    for key, value in changes.items():
        settings[key] = {**settings.get(key, {}), **value} if isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(settings))
    return path


def test_records_are_counted_whole_however_the_chunks_come_in_blocks(tmp_path):
    """predict's chunks come in blocks that may cut a record, and are handed over in blocks of whole
    records: each record is counted once, with all its chunks (its LLR, and its chunks' share of the
    records' composition)."""
    sizes = np.array([3, 1, 7, 2, 5, 1, 4])
    ids = np.repeat([f"r{i}" for i in range(sizes.size)], sizes)
    score = np.random.default_rng(0).random(ids.size)
    chunks = pd.DataFrame({"sequence_id": ids, "max_score_virus": score, "atypicality": np.ones(ids.size)})
    cal = calibration.Calibration(
        "0" * 64, 500, "platt", [-5.0, 5.0], [-4.0, 4.0], 0.3, 0.8, 0.2, 0.1, 0.3, 9.0, fitted_on={}, class_llrs={}
    )
    llr = cal.chunk_llrs(score)
    records = calibration.histogram(cal.record_llrs(sizes, np.add.reduceat(llr, np.r_[0, np.cumsum(sizes)[:-1]])))
    weighted = np.bincount(calibration.bin_of(llr), np.repeat(1 / sizes, sizes), minlength=calibration.N_BINS)
    for block in (1, 2, 3, 5, ids.size):
        weighing = ChunkWeighing(cal, tmp_path / f"evidence_{block}")
        weighing.PENDING = 4  # the groups' histograms are added to along the way too
        blocks = (chunks.iloc[start : start + block] for start in range(0, ids.size, block))
        for whole in tables.whole_groups(blocks, ["sequence_id"]):  # as predict hands them over
            weighing.count(whole)
        weighing.flush()
        assert np.array_equal(weighing.records, records) and np.allclose(weighing.record_chunks.sum(0), weighted), block
        assert weighing.group_records.sum() == sizes.size and weighing.chunks.sum() == ids.size
        assert weighing.typical[:, calibration.atypicality_bin(np.ones(1))[0]].sum() == ids.size
        if block == 1:
            grouped = weighing.chunks.copy(), weighing.typical.copy()
        assert np.array_equal(weighing.chunks, grouped[0]), block  # each record's group whatever the blocks
        assert np.array_equal(weighing.typical, grouped[1]), block
        weighing.evidence.close()


def test_the_end_of_a_run_says_in_one_line_per_sample_what_the_fit_means_for_the_qvalues(tmp_path):
    def manifest(sample, fit, low):
        records = {"viral_fraction_estimate": 0.45, "interval": [low, 0.5], "source": "sample", "counted": 200}
        fitted = {"fit": fit, "statistic": 7.25 if fit == "poor" else 1.5, "limit": 3.5, "most": 0.5}
        fitted["statistics"] = {"scores": fitted["statistic"]}
        path = tmp_path / f"{sample}.json"
        path.write_text(json.dumps({"weighing": {"composition": {"records": records}, "composition_fit": fitted}}))
        return path

    manifests = {"good": manifest("good", "ok", 0.4), "bad": manifest("bad", "poor", 0.0)}
    manifests["unweighed"] = tmp_path / "unweighed.json"
    manifests["unweighed"].write_text(json.dumps({"counts": {}}))
    manifests["missing"] = tmp_path / "missing.json"
    lines = composition_lines(manifests)
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert lines[0].startswith("bad: composition_fit poor (7.2 > 3.5): its sequences score unlike")
    assert "q-values at 0.000" in lines[0]
    assert lines[1].startswith("good: the calibration fits") and "q-values at 0.400" in lines[1]
    unlike = json.loads(manifests["bad"].read_text())
    unlike["weighing"]["composition_fit"]["statistics"] = {"scores": 1.5, "atypicality": 7.25}
    manifests["bad"].write_text(json.dumps(unlike))
    assert "its sequences look to the classifier unlike" in composition_lines(manifests)[0]
    many = {f"s{i}": manifest(f"s{i}", "ok", 0.4) for i in range(OK_LINES + 1)} | {"bad": manifests["bad"]}
    lines = composition_lines(many)
    assert len(lines) == 2 and lines[1].startswith(f"{OK_LINES + 1} samples fit the calibration")


@pytest.fixture(scope="module")
def weighed(workflow_run, tmp_path_factory):
    """The finished test run again, with the train target's calibration and call.max_qvalue."""
    workdir, config = workflow_run
    copy = tmp_path_factory.mktemp("weighed") / "run"
    shutil.copytree(workdir, copy, symlinks=True)
    changed = changed_config(
        config,
        copy / "weighed.yaml",
        models={"calibration": "results/train/calibration.json"},
        call={"max_qvalue": 0.2},
    )
    code, output = run(copy, changed)
    assert code == 0, output[-3000:]
    return copy, changed, output


@pytest.mark.slow
def test_a_qvalue_cutoff_without_a_calibration_is_dropped_at_start_up(weighed, tmp_path):
    """The weighed run again with its calibration turned off and call.max_qvalue left on, and without
    VirNucPro's tables: the start-up says once that the q-value FASTA files are not written, and the
    jobs remove the earlier run's q-value FASTA, VirNucPro tables and calibration figure, which would
    disagree with the new tables."""
    workdir, config, _ = weighed
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy, symlinks=True)
    assert (copy / "results" / "gamma" / "viral_qvalue.fasta").is_file()
    assert (copy / "results" / "gamma" / "prediction_results.txt").is_file()
    changed = changed_config(
        copy / config.name, copy / "cutoff.yaml", models={"calibration": None}, outputs={"virnucpro_tables": False}
    )
    assert (copy / "results" / "report" / "calibration.png").is_file()
    code, output = run(copy, changed)
    assert code == 0, output[-3000:]
    assert not (copy / "results" / "report" / "calibration.png").exists()
    warning = "call.max_qvalue 0.2 needs a calibration and models.calibration is null: no q-values, so "
    assert output.count(warning) == 1, output[-3000:]
    assert output.count("rule call:") == 5  # one per sample: the calibration is gone
    for sample in ("gamma", "reads"):
        results = copy / "results" / sample
        assert (results / "sequences.tsv").is_file()
        assert "qvalue" not in (results / "sequences.tsv").open().readline()
        unwritten = ("viral_qvalue.fasta", "regions_qvalue.fasta", "prediction_results.txt")
        assert not any((results / name).exists() for name in unwritten)


@pytest.mark.slow
def test_virnucpro_tables_turned_off_alone_are_removed(workflow_run, tmp_path):
    """The toggle changes no table of the workflow's own, so it reruns no predict job; the summaries
    it reruns remove the earlier run's VirNucPro tables."""
    workdir, config = workflow_run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy, symlinks=True)
    assert len(list(copy.glob("results/*/prediction_results*"))) == 2 * 5
    code, output = run(copy, changed_config(copy / config.name, copy / "off.yaml", outputs={"virnucpro_tables": False}))
    assert code == 0, output[-3000:]
    assert "rule predict:" not in output and output.count("rule summarize:") == 5
    assert not list(copy.glob("results/*/prediction_results*"))


@pytest.mark.slow
def test_the_train_target_fits_a_calibration_for_its_classifier(workflow_run):
    workdir, _ = workflow_run
    fitted = calibration.Calibration.load(workdir / "results" / "train" / "calibration.json")
    classifier = workdir / "results" / "train" / "classifier.pt"
    assert fitted.refusal(sha256(classifier), 300, "x") is None
    assert fitted.method in ("platt", "isotonic") and fitted.fitted_on["chunks"] > 0
    metrics = json.loads((workdir / "results" / "train" / "metrics.json").read_text())
    assert metrics["calibration"]["method"] == fitted.method
    # two sequences a class: scores cross-fitted over two folds, every training chunk scored
    assert metrics["calibration_scores"] == "cross-fitted over 2 folds of whole sequences"
    assert fitted.fitted_on["chunks"] == metrics["split"]["train_chunks"] + metrics["split"]["validation_chunks"]


@pytest.mark.slow
def test_a_calibrated_run_weighs_every_table(weighed):
    workdir, _, output = weighed
    assert "rule embed" not in output and "rule score" not in output  # weighing needs no embeddings
    sample = workdir / "results" / "gamma"
    chunks = pd.read_csv(sample / "chunks.tsv", sep="\t")
    assert list(chunks.columns)[-2:] == ["probability_virus", "atypicality"]
    assert chunks["probability_virus"].between(0, 1).all() and (chunks["atypicality"] > 0).all()
    sequences = pd.read_csv(sample / "sequences.tsv", sep="\t")
    assert list(sequences.columns)[-4:] == ["probability_virus", "qvalue", "atypicality", "reliable"]
    regions = pd.read_csv(sample / "regions.tsv", sep="\t")
    assert list(regions.columns)[-3:] == ["probability_virus", "qvalue", "in_seq_edge"]
    reads = pd.read_csv(workdir / "results" / "reads" / "sequences.tsv", sep="\t", keep_default_na=False, dtype=str)
    reads["n_chunks_scored"] = reads["n_chunks_scored"].astype(int)
    scored = reads[reads["n_chunks_scored"] > 0]
    assert len(scored) and (scored["qvalue"].astype(float).between(0, 1)).all()
    unscored = reads[reads["n_chunks_scored"] == 0]
    assert (unscored["qvalue"] == "NA").all() and (unscored["reliable"] == "False").all()
    # a record no more probable than another never gets the lower q-value
    ordered = scored.astype({"probability_virus": float, "qvalue": float})
    ordered = ordered.sort_values(["probability_virus", "qvalue"], ascending=[True, False])
    assert ordered["qvalue"].is_monotonic_decreasing
    # probabilities with 4 decimals, atypicality with 3 (docs/outputs.md)
    assert scored["probability_virus"].str.fullmatch(r"[01]\.\d{4}").all()
    assert scored["atypicality"].str.fullmatch(r"\d+\.\d{3}").all()
    passing = {name.split()[0] for name, _ in read_fasta(workdir / "results" / "reads" / "viral_qvalue.fasta")}
    assert passing == set(scored.loc[scored["qvalue"].astype(float) <= 0.2, "sequence_id"])
    # the regions within the q-value: those of regions.fasta, in order, their headers weighed
    every = dict(read_fasta(sample / "regions.fasta"))
    within = read_fasta(sample / "regions_qvalue.fasta")
    wanted = regions[regions["qvalue"] <= 0.2]
    assert len(wanted) and [n.split()[0] for n, _ in within] == [
        f"{r.sequence_id}|region_{r.region}" for r in wanted.itertuples()
    ]
    for (name, bases), region in zip(within, wanted.itertuples()):
        assert name.endswith(f" probability_virus={region.probability_virus:.4f} qvalue={region.qvalue:.4g}")
        assert bases == every[name.split(" probability_virus=")[0]]


def test_probabilities_and_atypicality_are_written_with_fixed_decimals():
    values = np.random.default_rng(0).random(10_000)
    written = tables.decimal_text(values, 4).astype(float)
    assert np.abs(written - values).max() <= 0.5e-4 + 1e-12
    assert tables.decimal_text(np.array([0, 1e-5, 0.99996, 1, np.nan]), 4).tolist() == [
        "0.0000", "0.0000", "1.0000", "1.0000", "NA"
    ]  # fmt: skip
    atypicality = tables.decimal_text(np.array([0.0004, 2.5, 12.3456, np.nan]), 3, limit=10.0, encoded=True)
    assert atypicality.tolist() == [b"0.000", b"2.500", b"12.346", b"NA"]  # beyond the lookup, formatted


@pytest.mark.slow
def test_the_report_gives_each_samples_viral_fraction_and_the_reliability_diagram(weighed):
    workdir, _, _ = weighed
    table = pd.read_csv(workdir / "results" / "report" / "samples.tsv", sep="\t")
    assert table["viral_fraction_estimate"].between(0, 1).all()
    # the genomes are one record each: too few for an estimate of their own
    assert set(table["viral_fraction_from"]) <= {"sample", "calibration"}
    assert table.set_index("sample").loc["phix", "viral_fraction_from"] == "calibration"
    # an interval and a fit where the sample's own fraction is estimated, none where the calibration's stands in
    own = table[table["viral_fraction_from"] == "sample"]
    assert (own["viral_fraction_low"] <= own["viral_fraction_estimate"]).all()
    assert (own["viral_fraction_estimate"] <= own["viral_fraction_high"]).all()
    assert set(own["composition_fit"]) <= {"ok", "poor"} and (own["composition_fit_statistic"] >= 0).all()
    assert table.loc[table["viral_fraction_from"] == "calibration", "composition_fit"].isna().all()
    assert (workdir / "results" / "report" / "calibration.png").stat().st_size > 10_000


@pytest.mark.slow
def test_virnucpro_calls_do_not_change_with_a_calibration(workflow_run, weighed):
    workdir, _ = workflow_run
    for sample in ("gamma", "reads"):
        before, after = (
            read_tsv(d / "results" / sample / "sequences.tsv") for d in (workdir, weighed[0])
        )  # fmt: skip
        assert [r["call"] for r in before] == [r["call"] for r in after]
        for name in ("viral.fasta", "prediction_results.txt", "prediction_results_highestscore.csv"):
            assert (workdir / "results" / sample / name).read_bytes() == (
                weighed[0] / "results" / sample / name
            ).read_bytes()


@pytest.mark.slow
def test_a_calibration_for_another_classifier_is_refused_at_start_up(weighed, tmp_path):
    """The train target's classifier and calibration given as files (nothing trained): they go
    together; the calibration with another classifier file stops the run before any job, in one
    line (another chunk length: tests/test_calibration.py, since the classifier's own check says
    so first)."""
    workdir, config, _ = weighed
    made = tmp_path / "calibration.json"
    shutil.copy(workdir / "results" / "train" / "calibration.json", made)
    given = tmp_path / "given.pt"
    shutil.copy(workdir / "results" / "train" / "classifier.pt", given)
    paired = changed_config(config, tmp_path / "a.yaml", models={"classifier": str(given), "calibration": str(made)})
    code, output = run(workdir, paired, "-n")
    assert code == 0, output[-3000:]
    with open(given, "ab") as handle:
        handle.write(b"\0")  # another file: another SHA-256
    code, output = run(workdir, paired, "-n")
    assert code != 0 and "Traceback" not in output
    assert f"{paired}: models.calibration: {made}: made for another classifier file" in output


@pytest.mark.slow
def test_the_calibrate_target_fits_a_calibration_for_a_given_classifier(weighed, tmp_path):
    """Labelled samples of their own, embedded and scored by the configured classifier; the
    calibration then weighs the run."""
    workdir, config, _ = weighed
    sheet = tmp_path / "calibration.tsv"
    sheet.write_text(
        "sample\tpath\tlabel\n"
        f"cal_phix\t{GENOMES / 'phiX174.fasta'}\tvirus\n"
        f"cal_plasmid\t{GENOMES / 'yersinia_pestis_plasmid_pPCP1_NC_005816.fasta'}\tother\n"
    )
    classifier = tmp_path / "given.pt"
    shutil.copy(workdir / "results" / "train" / "classifier.pt", classifier)
    changed = changed_config(
        config,
        tmp_path / "c.yaml",
        models={"classifier": str(classifier), "calibration": None},
        calibration={"samples": str(sheet)},
    )
    code, output = run(workdir, changed, "calibrate")
    assert code == 0, output[-3000:]
    made = workdir / "results" / "calibration" / "calibration.json"
    fitted = calibration.Calibration.load(made)
    assert fitted.refusal(sha256(classifier), 300, made) is None
    assert not (workdir / "results" / "cal_phix" / "sequences.tsv").exists()  # read from scores, never called
    used = changed_config(changed, tmp_path / "d.yaml", models={"calibration": str(made)})
    code, output = run(workdir, used, "results/gamma/sequences.tsv")
    assert code == 0, output[-3000:]
    assert "probability_virus" in (workdir / "results" / "gamma" / "sequences.tsv").read_text().splitlines()[0]
