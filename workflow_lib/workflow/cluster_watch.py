"""What a cluster run tells its console that Snakemake would not: each failed job's one-line
reason (the last line of its log, or for a job SLURM killed for memory, the rule or group and what
to raise), and pending jobs that SLURM will never start (watch_pending cancels them, saying why)."""

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

_FAILED_LOG = re.compile(r"^\s*log: (.+) \(check log file\(s\) for error details\)$", re.M)
# Snakemake's report of a failed job: `Error in rule R:`, or `message: Error in group G` followed by
# its jobs (`rule R:` each) and a timestamp line
_FAILED_JOB = re.compile(r"^\s*(?:Error in rule (?P<rule>\w+):|message: Error in group (?P<group>\w+))$", re.M)
_GROUP_RULE = re.compile(r"^\s+rule (\w+):$", re.M)
_TIMESTAMP = re.compile(r"^\s*\[\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}\]$", re.M)
# SLURM's line in a job's output when it kills a step for memory: jobacct_gather's
# (JobAcctGatherParams=OverMemoryKill) or task/cgroup's (the kernel's OOM killer in its cgroup)
_MEMORY_KILL = re.compile(
    r"StepId=(?P<job>\d+)\.\S+ exceeded memory limit \(\d+ > \d+\), being killed"
    r"|Detected \d+ oom[-_]kill event\S* in StepId=(?P<cgroup_job>\d+)\."
)
_SLURM_MEMORY = re.compile(r"(\d+(?:\.\d+)?)([KMGT])")  # squeue's %m, sacct's ReqMem: 2000M, 16G, 4000Mn
_MB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
_TAIL_BYTES = 65536  # read of each log: in a SLURM log, room for Snakemake's report after SLURM's kill line
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


@dataclass(frozen=True)
class FailedJob:
    """A failed job as Snakemake's log reports it: a rule's or a group's, its rules and its logs."""

    group: str | None
    rules: tuple[str, ...]
    logs: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"group {self.group}" if self.group else f"rule {self.rules[0]}"


def failed_jobs(text: str) -> list[FailedJob]:
    headers = list(_FAILED_JOB.finditer(text))
    jobs = []
    for header, following in zip(headers, headers[1:] + [None]):
        block = text[header.end() : following.start() if following else len(text)]
        logs = tuple(path for match in _FAILED_LOG.finditer(block) for path in match.group(1).split(", "))
        if header["group"]:
            listed = block[: (end.start() if (end := _TIMESTAMP.search(block)) else len(block))]
            jobs.append(FailedJob(header["group"], tuple(dict.fromkeys(_GROUP_RULE.findall(listed))), logs))
        else:
            jobs.append(FailedJob(None, (header["rule"],), logs))
    return jobs


def failed_job_reasons(snakemake_logs: list[str]) -> list[str]:
    """One line for each failed job's log that Snakemake's logs name, once each."""
    text = "".join(Path(path).read_text(errors="replace") for path in snakemake_logs if os.path.isfile(path))
    reasons: dict[str, str] = {}
    for job in failed_jobs(text):
        for path in job.logs:
            if path in reasons or not os.path.isfile(path):
                continue
            tail = _tail(path)
            if slurm_job := slurm_memory_kill(tail):
                reasons[path] = memory_kill_line(job, slurm_job, slurm_memory_mb(slurm_job))
            elif lines := tail.strip().splitlines():
                reasons[path] = f"{path}: {lines[-1].strip()}"
    return list(reasons.values())


def slurm_memory_kill(log_tail: str) -> str | None:
    """The SLURM job that SLURM killed for memory, by its line in the job's SLURM log."""
    killed = _MEMORY_KILL.search(log_tail)
    return (killed["job"] or killed["cgroup_job"]) if killed else None


def memory_kill_line(job: FailedJob, slurm_job: str, mem_mb: int | None) -> str:
    """The line for `job` killed by SLURM for memory; it asked for `mem_mb` (None: unknown)."""
    if not job.group:
        asked = f"; it asked for mem_mb={mem_mb}" if mem_mb else ""
        return (
            f"{job.name} (SLURM job {slurm_job}) was killed for memory by SLURM{asked}: raise its mem_mb "
            f"in the profile (set-resources: {job.rules[0]}: mem_mb: ...) and run again"
        )
    asked = f"; it asked for mem_mb={mem_mb}, what its jobs that run side by side ask together" if mem_mb else ""
    rule, which = (job.rules[0], "") if len(job.rules) == 1 else ("RULE", f", RULE one of {', '.join(job.rules)}")
    return (
        f"{job.name} (SLURM job {slurm_job}, rules {', '.join(job.rules)}) was killed for memory by SLURM{asked}: "
        f"raise its rules' mem_mb in the profile (set-resources: {rule}: mem_mb: ...{which}) and run again"
    )


def slurm_memory_mb(slurm_job: str) -> int | None:
    """The memory in MB that SLURM gave `slurm_job`: squeue's while slurmctld holds the job, else sacct's."""
    for command in (
        ["squeue", "-h", "-t", "all", "-j", slurm_job, "-o", "%m"],
        ["sacct", "-n", "-X", "-j", slurm_job, "-o", "ReqMem"],
    ):
        try:
            found = _SLURM_MEMORY.match(
                subprocess.run(command, capture_output=True, text=True, timeout=60).stdout.strip()
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if found:
            return round(float(found[1]) * _MB_PER_UNIT[found[2]])
    return None


def _tail(path: str) -> str:
    with open(path, "rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - _TAIL_BYTES))
        return handle.read().decode(errors="replace")


def never_runs(squeue: str, workdir: str) -> list[tuple[str, str, str]]:
    """(job id, comment, reason) of `workdir`'s pending jobs that will never start, from squeue's output."""
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


def watch_pending(interval: float, groups: tuple[str, ...] = ()) -> None:
    """Every `interval` seconds, in a daemon thread: this run's pending jobs that will never start are
    cancelled, each with one line on the console."""
    workdir, cancelled = os.path.realpath(os.getcwd()), set()

    def watch() -> None:
        while True:
            time.sleep(interval)
            command = ["squeue", "--me", "-h", "-t", "PENDING", "-o", "%i|%Z|%k|%r"]
            try:
                squeue = subprocess.run(command, capture_output=True, text=True, timeout=60).stdout
            except (OSError, subprocess.SubprocessError):
                continue  # the queue cannot be read now; the next look may
            for job, comment, reason in never_runs(squeue, workdir):
                if job in cancelled:
                    continue
                cancelled.add(job)
                subprocess.run(["scancel", job], capture_output=True)
                print(
                    f"SLURM job {job} ({job_name(comment, groups)}) cannot start: {reason}: {NEVER_RUNS[reason]}; "
                    "cancelled. To run it, lower its rule's resources in the profile (set-resources, set-threads; "
                    "for a group, group-components and resources) or choose another partition (slurm_partition)",
                    file=sys.stderr,
                    flush=True,
                )

    threading.Thread(target=watch, name="pending-watch", daemon=True).start()
