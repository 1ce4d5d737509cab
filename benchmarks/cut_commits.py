"""Embed jobs killed with SIGKILL (as a lost node leaves them) after a random number of commits,
then their commits and unfinished output cut at random byte offsets (some to zero bytes: a name
that survived without its data), then run again. Every resumed job must finish, name each cut
commit, keep exactly the rows of the commits that read back whole (none of a cut one), and end
with embeddings equal to an uninterrupted run's within the suite's determinism bound. ESM-2 and
DNABERT-S in turn, on the demo models. Prints JSON.

    python benchmarks/cut_commits.py --jobs 200
"""

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from helpers import EMBEDDING_TOLERANCE  # noqa: E402

from workflow_lib.embed.loader import ShardIndex  # noqa: E402
from workflow_lib.harness.measure import header, print_figures, print_progress  # noqa: E402
from workflow_lib.harness.stages import GENOMES, READS_PER_FRAME, embed_command, prepared_reads  # noqa: E402
from workflow_lib.models import demo_models  # noqa: E402

UNREADABLE = re.compile(r"(part_\d+\.npz): unreadable \(.*\); its frames are embedded again")
OPTIONS = {"num_workers": 0, "token_budget": 512, "commit_seconds": 0, "progress_seconds": 600}  # a commit a batch


def rows(part: Path) -> int:
    with np.load(part) as data:
        return len(data["rows"])


def cut(files: list[Path], rng: np.random.Generator) -> list[Path]:
    """Each file with probability one half cut at a random offset, a quarter of those to zero bytes."""
    chosen = [path for path in files if rng.random() < 0.5]
    for path in chosen:
        data = path.read_bytes()
        path.write_bytes(b"" if rng.random() < 0.25 else data[: int(rng.integers(0, len(data)))])
    return chosen


def killed_and_cut(command: list[str], output: Path, commits: int, rng: np.random.Generator) -> dict:
    """The job killed after `commits` commits, its files cut, then run again to the end."""
    parts = output.parent / f".{output.name}.parts"
    job = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    while job.poll() is None and len(list(parts.glob("part_*.npz"))) < commits:
        time.sleep(0.01)
    job.kill()
    if job.wait() != -signal.SIGKILL or output.exists():
        return {"outcome": "finished before the kill"}
    intact = sorted(parts.glob("part_*.npz"))
    damaged = cut(intact, rng) + cut(sorted(parts.glob("output.tmp*.h5")), rng)
    kept = sum(rows(part) for part in intact if part not in damaged)
    resumed = subprocess.run(command, capture_output=True, text=True)
    figures = {"commits": len(intact), "cut": len(damaged), "rows_kept": kept, "status": resumed.returncode}
    if resumed.returncode:
        return figures | {"outcome": "crashed", "error": resumed.stderr.strip().splitlines()[-1:]}
    said = re.search(r"resuming: ([\d,]+) of", resumed.stderr)
    figures["rows_resumed"] = int(said[1].replace(",", "")) if said else 0
    named = sorted(UNREADABLE.findall(resumed.stderr))
    figures["cut_commits_named"] = named == sorted(p.name for p in damaged if p.suffix == ".npz")
    return figures | {"outcome": "resumed"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=200, help="killed and cut jobs, half of each model")
    parser.add_argument("--frames", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    result = header("cut_commits") | {"options": OPTIONS, "jobs": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shards, models = inputs(tmp, args.frames)
        references = {}
        for model, shard in shards.items():
            command = embed_command(model, models[model], shard, tmp / f"{model}_reference.h5", **OPTIONS)
            subprocess.run(command, check=True, capture_output=True)
            references[model] = embeddings(tmp / f"{model}_reference.h5")
            result[f"{model}_frames"] = len(ShardIndex.read(shard))
        for i in range(args.jobs):
            model = ("esm", "dnabert")[i % 2]
            output = tmp / f"{model}_{i}.h5"
            command = embed_command(model, models[model], shards[model], output, **OPTIONS)
            figures = {"model": model} | killed_and_cut(command, output, int(rng.integers(2, 30)), rng)
            if figures["outcome"] == "resumed":
                got, want = embeddings(output), references[model]
                figures["ids_equal"] = got[0] == want[0]
                figures["max_abs_difference"] = float(np.abs(got[1] - want[1]).max(initial=0))
                output.unlink()
            result["jobs"].append(figures)
            print_progress(figures)
    result["summary"] = summary(result["jobs"])
    print_figures(result)


def inputs(tmp: Path, frames: int) -> tuple[dict[str, Path], dict[str, Path]]:
    """A protein and a nucleotide shard of about `frames` frames of 500 bp reads, and the demo models."""
    shards = prepared_reads(tmp, round(frames * READS_PER_FRAME))
    models = demo_models.build_in(tmp / "models", sorted(GENOMES.glob("*.fasta")), seed=0)
    return {"esm": shards["faa"], "dnabert": shards["fna"]}, models


def embeddings(output: Path) -> tuple[list, np.ndarray]:
    with h5py.File(output) as h5:
        return h5["ids"][()].tolist(), h5["embeddings"][()]


def summary(jobs: list[dict]) -> dict:
    resumed = [j for j in jobs if j["outcome"] == "resumed"]
    return {
        "jobs": len(jobs),
        "by_model": {m: sum(j["model"] == m for j in jobs) for m in ("esm", "dnabert")},
        "killed_and_cut": len(resumed) + sum(j["outcome"] == "crashed" for j in jobs),
        "finished_before_the_kill": sum(j["outcome"] == "finished before the kill" for j in jobs),
        "crashed": sum(j["outcome"] == "crashed" for j in jobs),
        "commits_cut": sum(j.get("cut", 0) for j in jobs),
        "kept_exactly_the_whole_commits": sum(j["rows_resumed"] == j["rows_kept"] for j in resumed),
        "named_every_cut_commit": sum(j["cut_commits_named"] for j in resumed),
        "equal_within_the_bound": sum(
            j["ids_equal"] and j["max_abs_difference"] <= EMBEDDING_TOLERANCE for j in resumed
        ),
        "determinism_bound": EMBEDDING_TOLERANCE,
        "max_abs_difference": max((j["max_abs_difference"] for j in resumed), default=None),
    }


if __name__ == "__main__":
    main()
