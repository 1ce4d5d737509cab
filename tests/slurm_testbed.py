"""The project's SLURM test bed (tests/slurm/up.sh: Debian's slurm-wlm and munge, one node, two
fake GPUs) as a context manager, for the tests and for benchmarks that count submissions, and the
shipped profiles/slurm with its SITE lines filled in for it. Each bed has its own directory and
free ports, and whatever it started is stopped on leaving."""

import contextlib
import os
import socket
import subprocess
from pathlib import Path

from helpers import ENV, alive

SLURM = Path(__file__).resolve().parent / "slurm"
SHIPPED = Path(__file__).resolve().parents[1] / "profiles" / "slurm" / "config.yaml"
# profiles/slurm's SITE lines as a user of the test bed fills them in: no accounting (status
# through squeue), partitions main and gpu; the GPU model and extra flags stay out (fake GPUs)
SITE_LINES = {
    "# slurm-status-command: squeue": "slurm-status-command: squeue",
    "  # slurm_partition: cpu": "  slurm_partition: main",
    "# set-resources:": "set-resources:",
    "#   embed:": "  embed:",
    "#   preflight:": "  preflight:",
    "#     slurm_partition: gpu": "    slurm_partition: gpu",
}
# not in the profile: the plugin's first status check after 1 s, not 40, and the next ones 11, 21, ...
# s later while no job ends (the plugin's back-off): each stage of a test run waits about 12 s, not 20
TEST_OPTIONS = ["--slurm-init-seconds-before-status-checks", "1"]
# the pid files of the daemons up.sh starts (slurmdbd and mariadb with ACCOUNTING=1 only)
PID_FILES = ("munge/munged.pid", "run/slurmctld.pid", "run/slurmd.pid", "run/slurmdbd.pid", "dbrun/mysqld.pid")


def free_ports(n: int) -> list[int]:
    """`n` different ports, free now: bound to port 0 together, then let go for the daemons."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for sock in sockets:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@contextlib.contextmanager
def slurm_cluster(base: Path):
    """A private cluster (up.sh) under `base` on free ports; yields the environment of its clients.
    On leaving, however left (up.sh failing half-way included), down.sh stops every daemon up.sh
    started, and none may be left running."""
    slurmctld, slurmd = free_ports(2)
    env = {**os.environ, "BASE": str(base), "SLURMCTLD_PORT": str(slurmctld), "SLURMD_PORT": str(slurmd)}
    # two embed jobs of two CPUs side by side on any machine, with room beside them for the pooled
    # shard, tokenize and grouped jobs that the scheduler may start at the same time (jobs are
    # bound to no core); memory for what the shipped profile asks (a job is held to what it asks,
    # the machine may have less)
    env["NCPU"], env["MEM_MB"] = "6", "65536"
    try:
        started = subprocess.run(["bash", str(SLURM / "up.sh")], env=env, capture_output=True, text=True)
        assert started.returncode == 0, started.stdout + started.stderr
        # the client commands find the cluster by SLURM_CONF; `srun` in base/bin puts it back
        # where the slurm jobstep plugin removes it
        yield {**ENV, "SLURM_CONF": str(base / "etc" / "slurm.conf"), "PATH": f"{base / 'bin'}:{ENV['PATH']}"}
    finally:
        daemons = {name: int(text) for name in PID_FILES if (text := _read(base / name))}
        stopped = subprocess.run(["bash", str(SLURM / "down.sh")], env=env, capture_output=True, text=True)
        left = {name: pid for name, pid in daemons.items() if alive(pid)}
        assert stopped.returncode == 0 and not left, f"still running: {left}\n{stopped.stdout}{stopped.stderr}"


def shipped_profile(folder: Path) -> Path:
    """profiles/slurm with its SITE lines filled in for the test bed, in `folder`."""
    text = SHIPPED.read_text()
    for line, filled in SITE_LINES.items():
        assert f"\n{line}\n" in text, f"{SHIPPED}: the SITE line '{line}' is gone; update SITE_LINES"
        text = text.replace(f"\n{line}\n", f"\n{filled}\n")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(text)
    return folder


def _read(path: Path) -> str:
    return path.read_text().strip() if path.is_file() else ""
