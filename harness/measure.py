"""How the benchmarks measure and report: a child process's wall seconds, CPU seconds and peak
memory; a run of Snakemake's wall seconds, own CPU seconds and jobs; and the figures they print
(JSON on stdout, opened by the same header in every benchmark; a line of JSON on stderr for each
part as it is measured)."""

import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.stages import ROOT

# The command as the only child of a fresh Python, which writes its figures to argv[1]: a child's
# peak resident set (ru_maxrss) starts from the high-water mark of the process it was forked from,
# as exec keeps it (the benchmark's own, gigabytes where it has just built a 3B-shaped checkpoint);
# a fresh Python's is about 10 MB.
CHILD = (
    "import json, pathlib, resource, subprocess, sys, time; start = time.perf_counter(); "
    "status = subprocess.run(sys.argv[2:]).returncode; seconds = time.perf_counter() - start; "
    "usage = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "pathlib.Path(sys.argv[1]).write_text(json.dumps([seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss])); "
    "sys.exit(status)"
)
# Snakemake run in the process that -c starts, so that RUSAGE_SELF is its own CPU and not its jobs';
# it writes those seconds to argv[1] as it exits.
OWN_CPU = (
    "import atexit, pathlib, resource, sys; out = pathlib.Path(sys.argv[1]); "
    "atexit.register(lambda: out.write_text(str(sum(resource.getrusage(resource.RUSAGE_SELF)[:2])))); "
    "from snakemake.cli import main; sys.argv = ['snakemake', *sys.argv[2:]]; main()"
)
JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$", re.M)  # a job in Snakemake's output


def header(benchmark: str) -> dict:
    """The keys that open every benchmark's JSON: its name, the machine (the CPUs this process may
    use, where fewer than the machine's), Python's version and the date."""
    cpus, usable = os.cpu_count(), len(os.sched_getaffinity(0))
    machine = f"{platform.machine()}, {cpus} cpus" + (f", pinned to {usable}" if usable < cpus else "")
    return {
        "benchmark": benchmark,
        "machine": machine,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }


def print_figures(figures: dict, out: Path | None = None) -> None:
    """A benchmark's figures: JSON on stdout, and in `out` where given."""
    text = json.dumps(figures, indent=2)
    if out:
        Path(out).write_text(text + "\n")
    print(text)


def print_progress(figures: dict) -> None:
    """One line of JSON on stderr, as a part of the figures is measured."""
    print(json.dumps(figures), file=sys.stderr, flush=True)


def run_python(code: str, *args, output: Path, env: dict | None = None) -> tuple[int, str]:
    """`python -c code FILE *args`, its output and errors written to `output` as it runs: its exit
    status and what it wrote to FILE (empty if nothing)."""
    with tempfile.TemporaryDirectory() as tmp, open(output, "w") as handle:
        written = Path(tmp) / "figures"
        command = [sys.executable, "-c", code, str(written), *map(str, args)]
        # its own process group: stopped here (a benchmark's deadline, Ctrl-C), it is ended with its jobs
        child = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            status = child.wait()
        except BaseException:
            # SIGTERM to its process group (Snakemake cancels its jobs, an embed job commits), then
            # after at most 10 s SIGKILL to whatever of the group is left
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise
        return status, written.read_text() if written.exists() else ""


def measured(command: list) -> dict:
    """Wall seconds, CPU seconds and peak resident set (MB) of `command`, the only child of a fresh
    process. Exits naming the command and its last output if it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "output"
        status, written = run_python(CHILD, *command, output=output)
        if status:
            raise SystemExit(f"{' '.join(map(str, command[:2]))} failed:\n{output.read_text()[-3000:]}")
    seconds, cpu_seconds, kib = json.loads(written)
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2), "peak_rss_mb": round(kib / 1024)}


def snakemake(
    directory: Path, *options, workflow: Path = ROOT, env: dict | None = None, log: Path | None = None
) -> tuple[dict, str]:
    """Snakemake on `workflow`'s Snakefile in `directory` with `options`, in `env` or else in this
    environment with this Python first on the PATH (the rules call `python`); its output written to
    `log` as it runs, where given. Returns its figures (wall seconds; its own CPU seconds, its
    process's alone, the jobs' left out; the jobs in its output, by rule) and its output. Raises
    RuntimeError if it fails."""
    env = env or {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    options = ("--snakefile", workflow / "Snakefile", "--directory", directory, *options)
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(log or Path(tmp) / "snakemake.log")
        start = time.perf_counter()
        status, own_cpu = run_python(OWN_CPU, *options, output=output, env=env)
        seconds = time.perf_counter() - start
        text = output.read_text()
    if status:
        raise RuntimeError(f"the workflow failed{f' (its output: {log})' if log else ''}:\n{text[-3000:]}")
    jobs = JOB.findall(text)
    figures = {"seconds": round(seconds, 1), "own_cpu_s": round(float(own_cpu), 1), "jobs": len(jobs)}
    return figures | {"jobs_by_rule": {rule: jobs.count(rule) for rule in sorted(set(jobs))}}, text
