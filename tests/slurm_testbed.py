"""The project's SLURM test bed (tests/slurm/up.sh: Debian's slurm-wlm and munge, one node, two
fake GPUs) as a context manager, for the tests and for benchmarks that count submissions. Each bed
has its own directory and free ports, and whatever it started is stopped on leaving."""

import contextlib
import os
import socket
import subprocess
from pathlib import Path

from helpers import ENV, alive

SLURM = Path(__file__).resolve().parent / "slurm"
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
    # shard, tokenize and grouped jobs that the scheduler may start at the same time
    env["NCPU"] = "6"
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


def _read(path: Path) -> str:
    return path.read_text().strip() if path.is_file() else ""
