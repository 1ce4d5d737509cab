"""This workflow's calls against a VirNucPro run's own tables for the same input and classifier.

VirNucPro writes prediction_results.txt (one line per frame: Sequence_ID, Prediction, score1 =
others, score2 = virus) and prediction_results_highestscore.csv (one line per chunk: Modified_ID,
the frame ID less its last two characters, and Is_Virus). The join keys are VirNucPro's own.
"""

import csv
from pathlib import Path

import numpy as np
import pandas as pd

from workflow_lib.cli.errors import InputError

EXAMPLES = 5


def _read(path: Path, columns: list[str]) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(f"{path}: no such file; give the directory that holds VirNucPro's (or this workflow's) tables")
    table = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE)
    if missing := [c for c in columns if c not in table.columns]:
        raise InputError(f"{path}: no column {', '.join(missing)}; is this a VirNucPro table?")
    return table


def compare(ours: str | Path, virnucpro: str | Path) -> dict:
    """Frames and chunks in each run, prediction and chunk-call agreement, score differences."""
    ours, virnucpro = Path(ours), Path(virnucpro)
    frames = _read(ours / "frames.tsv", ["frame_id", "score_other", "score_virus", "prediction"])
    frames["prediction"] = frames["prediction"].replace({"other": "others"})  # VirNucPro's word for it
    theirs = _read(virnucpro / "prediction_results.txt", ["Sequence_ID", "Prediction", "score1", "score2"])
    joined = frames.merge(theirs, left_on="frame_id", right_on="Sequence_ID", how="outer", indicator=True)
    both = joined[joined["_merge"] == "both"]
    differ = both[both["prediction"] != both["Prediction"]]
    score_diff = np.abs(both["score_virus"].astype(float) - both["score2"].astype(float))

    # a chunk is viral where its best virus score reaches its best other score; its frames' IDs less
    # their last two characters are VirNucPro's chunk key
    best = frames[["score_virus", "score_other"]].astype(float).groupby(frames["frame_id"].str[:-2]).max()
    our_chunks = best["score_virus"] >= best["score_other"]
    their_chunks = _read(virnucpro / "prediction_results_highestscore.csv", ["Modified_ID", "Is_Virus"])
    chunks = their_chunks.set_index("Modified_ID")["Is_Virus"].eq("True").rename("theirs").to_frame()
    chunks = chunks.join(our_chunks.rename("ours"), how="outer")
    in_both = chunks.dropna()
    chunk_differ = in_both[in_both["ours"].astype(bool) != in_both["theirs"].astype(bool)]
    return {
        "frames": {
            "ours": len(frames),
            "virnucpro": len(theirs),
            "both": len(both),
            "only_ours": joined.loc[joined["_merge"] == "left_only", "frame_id"].head(EXAMPLES).tolist(),
            "only_virnucpro": joined.loc[joined["_merge"] == "right_only", "Sequence_ID"].head(EXAMPLES).tolist(),
        },
        "predictions": {
            "agree": len(both) - len(differ),
            "differ": len(differ),
            "differ_examples": differ["frame_id"].head(EXAMPLES).tolist(),
        },
        "score_virus_abs_diff": {
            "max": float(score_diff.max()) if len(both) else None,
            "mean": float(score_diff.mean()) if len(both) else None,
        },
        "chunks": {
            "ours": int(chunks["ours"].notna().sum()),
            "virnucpro": int(chunks["theirs"].notna().sum()),
            "agree": len(in_both) - len(chunk_differ),
            "differ": len(chunk_differ),
            "differ_examples": chunk_differ.index[:EXAMPLES].tolist(),
        },
    }
