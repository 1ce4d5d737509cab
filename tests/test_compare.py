"""Comparing a sample's results with VirNucPro's own tables (scripts/compare_virnucpro.py)."""

import json
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT


def compare(ours, virnucpro) -> subprocess.CompletedProcess:
    command = [sys.executable, str(ROOT / "scripts" / "compare_virnucpro.py"), "--ours", str(ours)]
    return subprocess.run([*command, "--virnucpro", str(virnucpro)], capture_output=True, text=True)


@pytest.mark.slow
def test_agreement_and_each_kind_of_difference(workflow_run, tmp_path):
    results = workflow_run[0] / "results" / "gamma"
    same = json.loads(compare(results, results).stdout)
    n = same["frames"]["ours"]
    assert same["frames"] == {"ours": n, "virnucpro": n, "both": n, "only_ours": [], "only_virnucpro": []}
    assert same["predictions"]["differ"] == 0 and same["chunks"]["differ"] == 0
    assert same["score_virus_abs_diff"]["max"] < 1e-6  # VirNucPro prints str(float32), frames.tsv 6 digits

    # A VirNucPro run that lost a frame and called another frame and its chunk the other way.
    header, first, second, *rest = (results / "prediction_results.txt").read_text().splitlines()
    fid, prediction, other, virus = first.split("\t")
    flipped = "others" if prediction == "virus" else "virus"
    (tmp_path / "prediction_results.txt").write_text("\n".join([header, f"{fid}\t{flipped}\t{virus}\t{other}", *rest]))
    chunks = (results / "prediction_results_highestscore.csv").read_text().splitlines()
    chunk, call = next(line.split("\t") for line in chunks[1:] if line.startswith(fid[:-2] + "\t"))
    shutil.copy(results / "prediction_results_highestscore.csv", tmp_path)
    text = (tmp_path / "prediction_results_highestscore.csv").read_text()
    (tmp_path / "prediction_results_highestscore.csv").write_text(
        text.replace(f"\n{chunk}\t{call}\n", f"\n{chunk}\t{call == 'False'}\n")
    )
    found = json.loads(compare(results, tmp_path).stdout)
    assert found["frames"]["both"] == n - 1 and found["frames"]["only_ours"] == [second.split("\t")[0]]
    assert found["predictions"] == {"agree": n - 2, "differ": 1, "differ_examples": [fid]}
    assert found["score_virus_abs_diff"]["max"] == pytest.approx(abs(float(virus) - float(other)), abs=1e-6)
    assert found["chunks"]["differ"] == 1 and found["chunks"]["differ_examples"] == [chunk]


def test_missing_table_is_one_line(tmp_path):
    result = compare(tmp_path, tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr == (
        f"error: {tmp_path / 'frames.tsv'}: no such file; give the directory that holds VirNucPro's "
        "(or this workflow's) tables\n"
    )


def test_a_sample_without_frames_compares_as_empty(tmp_path):
    """A sample whose records have no coding frame: both runs' tables hold their headers only."""
    (tmp_path / "frames.tsv").write_text("frame_id\tsequence_id\tchunk\tframe\tscore_other\tscore_virus\tprediction\n")
    (tmp_path / "prediction_results.txt").write_text("Sequence_ID\tPrediction\tscore1\tscore2\n")
    (tmp_path / "prediction_results_highestscore.csv").write_text("Modified_ID\tIs_Virus\n")
    result = compare(tmp_path, tmp_path)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["frames"] == {"ours": 0, "virnucpro": 0, "both": 0, "only_ours": [], "only_virnucpro": []}
    assert found["chunks"] == {"ours": 0, "virnucpro": 0, "agree": 0, "differ": 0, "differ_examples": []}
