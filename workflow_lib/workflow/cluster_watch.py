"""What a cluster run tells its console that Snakemake would not: each failed job's one-line
reason, and jobs that SLURM will never start.

- A job's error line goes to its log (scripts/run_logged.sh prints it on stderr, which on a
  cluster is the job's SLURM log): after a failed run, failed_job_reasons reads it from each failed
  job's log, as Snakemake's own log names them.
- A job that asks for more than its partition allows (CPUs, memory, GPUs, time) pends for ever
  with a reason such as PartitionConfig, and Snakemake waits without a word: PendingWatch cancels
  it with one line saying why, so that the run fails instead of hanging.
"""

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

_FAILED_LOG = re.compile(r"^\s*log: (.+) \(check log file\(s\) for error details\)$", re.M)
_TAIL_BYTES = 4096
# squeue reasons of a pending job that waiting cannot cure: the request exceeds what the partition,
# the QOS or the association allows, or what its nodes have
NEVER_RUNS = {
    "PartitionConfig": "it asks for more CPUs, memory or GPUs than the partition's nodes or limits allow",
    "PartitionTimeLimit": "its runtime is longer than the partition allows",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "BadConstraints": "no node of the partition has what it asks for",
    "QOSMaxCpuPerJobLimit": "it asks for more CPUs than its QOS allows",
    "QOSMaxMemoryPerJob": "it asks for more memory than its QOS allows",
    "QOSMaxGRESPerJob": "it asks for more GPUs than its QOS allows",
    "QOSMaxWallDurationPerJobLimit": "its runtime is longer than its QOS allows",
    "AssocMaxCpuPerJobLimit": "it asks for more CPUs than its account allows",
    "AssocMaxWallDurationPerJobLimit": "its runtime is longer than its account allows",
}
_FIX = (
    "lower its rule's resources in the profile (set-resources, set-threads; for a group, "
    "group-components and resources) or choose another partition (slurm_partition)"
)


def failed_job_reasons(snakemake_logs: list[str]) -> list[str]:
    """`log: reason` for each failed job's log that Snakemake's logs name, once each: the log's
    last line, the job's one-line error."""
    text = "".join(Path(path).read_text(errors="replace") for path in snakemake_logs if os.path.isfile(path))
    logs = dict.fromkeys(path for match in _FAILED_LOG.finditer(text) for path in match.group(1).split(", "))
    return [f"{path}: {last}" for path in logs if os.path.isfile(path) and (last := _last_line(path))]


def _last_line(path: str) -> str:
    with open(path, "rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - _TAIL_BYTES))
        lines = handle.read().decode(errors="replace").strip().splitlines()
    return lines[-1].strip() if lines else ""


def never_runs(squeue: str, workdir: str) -> list[tuple[str, str, str]]:
    """(job id, Snakemake's job comment, reason) of the pending jobs of `workdir` that will never
    start, from `squeue -h -t PENDING -o %i|%Z|%k|%r` output."""
    found = []
    for line in squeue.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and os.path.realpath(parts[1]) == workdir and parts[3] in NEVER_RUNS:
            found.append((parts[0], parts[2], parts[3]))
    return found


def job_name(comment: str, groups: tuple[str, ...] = ()) -> str:
    """`rule NAME`, or `group NAME` for one of the workflow's job `groups`, from the comment that
    Snakemake's SLURM plugin gives a job: rule_RULE_wildcards_..., or rule_GROUP_RULES for a group."""
    name = comment.removeprefix("rule_").split("_wildcards")[0] or "?"
    group = next((g for g in groups if name.startswith(f"{g}_")), None)
    return f"group {group}" if group else f"rule {name}"


class PendingWatch:
    """Every `interval` seconds, in a daemon thread of the Snakemake process: this run's pending
    jobs that will never start are cancelled (scancel), each with one line on the console."""

    def __init__(self, interval: float, groups: tuple[str, ...] = (), workdir: str | None = None):
        self.interval, self.groups, self.workdir = interval, groups, os.path.realpath(workdir or os.getcwd())
        self.cancelled: set[str] = set()

    def start(self) -> "PendingWatch":
        threading.Thread(target=self._run, name="pending-watch", daemon=True).start()
        return self

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            self.check()

    def check(self) -> list[str]:
        """One look at the queue; the lines printed."""
        command = ["squeue", "--me", "-h", "-t", "PENDING", "-o", "%i|%Z|%k|%r"]
        try:
            squeue = subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return []  # the queue cannot be read now; the next look may
        lines = []
        for job, comment, reason in never_runs(squeue, self.workdir):
            if job in self.cancelled:
                continue
            self.cancelled.add(job)
            subprocess.run(["scancel", job], capture_output=True)
            name = job_name(comment, self.groups)
            lines.append(
                f"SLURM job {job} ({name}) cannot start: {reason}: {NEVER_RUNS[reason]}; cancelled. To run it, {_FIX}"
            )
            print(lines[-1], file=sys.stderr, flush=True)
        return lines
