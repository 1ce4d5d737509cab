"""SIGTERM to an embed job's whole process group (as SLURM sends it at a time limit or preemption,
loader workers included), again and again at random moments. Each stopped job must end with the
status of a SIGTERM after a final commit that holds every frame it had embedded, and the job run
again must resume from those frames and give embeddings equal to the bit to an uninterrupted run.
Prints JSON.

    python benchmarks/sigterm_stress.py --runs 20
"""

import argparse
import os
import random
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from workflow_lib.harness.measure import header, print_figures, print_progress
from workflow_lib.harness.stages import GENOMES, READS_PER_FRAME, embed_command, prepared_reads
from workflow_lib.models import demo_models

STOPPED = re.compile(r"stopped after ([\d,]+) of [\d,]+ frames; they are committed")


def committed_rows(output: Path) -> int:
    rows = 0
    for part in output.parent.glob(f".{output.name}.parts/part_*.npz"):
        with np.load(part) as data:
            rows += len(data["rows"])
    return rows


def embeddings(output: Path) -> tuple[np.ndarray, dict]:
    with h5py.File(output) as h5:
        return h5["embeddings"][()], dict(h5.attrs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--frames", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0, help="of the moments the signals are sent")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    options = {"num_workers": 2, "threads": 3, "token_budget": 256, "commit_seconds": 0.5, "progress_seconds": 600}
    result = header("sigterm_stress") | {"options": options, "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shard, model = shard_and_model(tmp, args.frames)
        start = time.monotonic()
        subprocess.run(
            embed_command("esm", model, shard, tmp / "reference.h5", **options), check=True, capture_output=True
        )
        duration = time.monotonic() - start
        reference, _ = embeddings(tmp / "reference.h5")
        result["uninterrupted_seconds"] = round(duration, 1)
        for run in range(args.runs):
            command = embed_command("esm", model, shard, tmp / f"run_{run}.h5", **options)
            # from before the model is loaded to about the end
            result["runs"].append(signalled_run(command, tmp / f"run_{run}.h5", rng.uniform(0.2, 1.0) * duration))
            if "resume_error" not in result["runs"][-1]:
                got, _ = embeddings(tmp / f"run_{run}.h5")
                result["runs"][-1]["equal_to_the_bit"] = bool(np.array_equal(got, reference))
            print_progress(result["runs"][-1])
    result["summary"] = summary(result["runs"])
    print_figures(result)


def shard_and_model(tmp: Path, frames: int) -> tuple[Path, Path]:
    """A protein shard of `frames` frames of 500 bp reads, and the demo ESM-2."""
    lines = prepared_reads(tmp, round(frames * READS_PER_FRAME))["faa"].read_bytes().split(b"\n")[: 2 * frames]
    shard = tmp / "shard.faa"
    shard.write_bytes(b"\n".join(lines) + b"\n")
    return shard, demo_models.build_in(tmp / "models", sorted(GENOMES.glob("*.fasta")), seed=0)["esm"]


def signalled_run(command: list[str], output: Path, delay: float) -> dict:
    """The embed job, SIGTERM to its process group after `delay` s, then run again to finish."""
    job = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        job.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGTERM)
    status, log = job.wait(timeout=120), job.stderr.read()
    figures = {"signal_after_s": round(delay, 2), "status": status}
    if status == 0:
        return figures | {"outcome": "finished before the signal"}
    if status == -signal.SIGTERM:  # before the job set its handler, or after it let it go
        finished = output.exists()
        figures["outcome"] = "finished, signalled as it exited" if finished else "stopped while starting"
        figures["rows_committed"] = committed_rows(output)
        if not finished:
            subprocess.run(command, check=True, capture_output=True)
        return figures
    stopped = STOPPED.search(log)
    done = int(stopped[1].replace(",", "")) if stopped else None
    figures |= {"frames_done": done, "rows_committed": committed_rows(output)}
    figures["final_commit_holds_all"] = done is not None and figures["rows_committed"] == done
    resumed = subprocess.run(command, capture_output=True, text=True)
    if resumed.returncode:
        return figures | {"outcome": "stopped, resume failed", "resume_error": resumed.stderr.strip().splitlines()[-1:]}
    _, attrs = embeddings(output)
    return figures | {"resumed_frames": int(attrs["resumed_frames"]), "outcome": "stopped, resumed"}


def summary(runs: list[dict]) -> dict:
    stopped = [r for r in runs if r["status"] == 128 + signal.SIGTERM]
    return {
        "runs": len(runs),
        "stopped_while_starting": sum(r["outcome"] == "stopped while starting" for r in runs),
        "finished_signalled_as_it_exited": sum(r["outcome"].startswith("finished,") for r in runs),
        "stopped_with_the_status_of_sigterm": len(stopped),
        "other_status": sum(r["status"] not in (0, -signal.SIGTERM, 128 + signal.SIGTERM) for r in runs),
        "final_commit_holds_all": sum(bool(r.get("final_commit_holds_all")) for r in stopped),
        "resumed_from_the_commit": sum(r.get("resumed_frames") == r.get("rows_committed") for r in stopped),
        "equal_to_the_bit": sum(bool(r.get("equal_to_the_bit")) for r in runs),
    }


if __name__ == "__main__":
    main()
