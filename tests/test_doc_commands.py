"""Every `snakemake` command the README, docs/*.md and config/README.md give works as written: each
runs through bash from the root of a copy of the workflow whose config/config.yaml is the demo's,
on a trimmed demo samples sheet. A command for a cluster (`--profile profiles/slurm`) runs as a dry
run, before anything is made, so that it shows the jobs still to run; every other one for real, in
a user's order: the models fetched, a classifier trained, the run, its report, then the commands
that read a run (a job's command printed, the lint)."""

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from helpers import ENV, ROOT
from snakemake.utils import update_config

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "config" / "README.md"]
# Fewer found means the reading broke, not that the docs lost their commands.
MIN_COMMANDS = 12
# What the workflow needs to run and to be linted; the rest of the checkout (tests, benchmarks) not.
COPIED = ("Snakefile", "config", "envs", "profiles", "report", "resources", "rules", "scripts", "workflow_lib")
# A trimmed demo: a labelled virus and a labelled other for the train target, one sample without a label.
SAMPLES = (
    "sample\tpath\tlabel\n"
    "phiX174\tresources/genomes/phiX174.fasta\tvirus\n"
    "pPCP1_plasmid\tresources/genomes/yersinia_pestis_plasmid_pPCP1_NC_005816.fasta\tother\n"
    "mtDNA\tresources/genomes/human_mtDNA.fasta\t\n"
)
# Snakemake's lines for a command that stops before it runs anything (some exit 0).
STOPS = ("cores have to be specified", "no profile.yaml (or config.yaml) found")


@dataclass
class Command:
    line: str
    places: list[str]

    @property
    def words(self) -> list[str]:
        return shlex.split(self.line, comments=True)

    @property
    def cluster(self) -> bool:
        words = self.words
        profiles = [given for option, given in zip(words, words[1:]) if option == "--profile"]
        return any("slurm" in profile for profile in profiles) or "--executor" in words

    @property
    def given_dry(self) -> bool:
        """Whether the docs give it as a dry run (-n, -np, --dry-run)."""
        return any(re.fullmatch(r"-[a-zA-Z]*n[a-zA-Z]*|--dry-?run", word) for word in self.words)

    @property
    def dry(self) -> bool:
        return self.cluster or self.given_dry

    @property
    def run_as(self) -> str:
        """The line as it runs: a cluster's command as a dry run (-n after `snakemake`)."""
        if self.cluster and not self.given_dry:
            return "snakemake -n" + self.line.removeprefix("snakemake")
        return self.line

    @property
    def stage(self) -> int:
        """Where a user runs it: cluster dry runs first (they show every job still to run), then the
        models fetched, a classifier trained, the run and its changes, the report, then the commands
        that read a finished run (a dry run of one job, the lint)."""
        if self.cluster:
            return 0
        if "fetch_models" in self.words:
            return 1
        if "train" in self.words:
            return 2
        if self.dry or "--lint" in self.words:
            return 5
        if "--report" in self.words:
            return 4
        return 3

    def __str__(self) -> str:
        how = "dry run" if self.dry else "real"
        return f"{self.run_as}    [{how}; {', '.join(self.places)}]"


def code_lines(page: Path) -> list[tuple[int, str]]:
    """(line number, text) of each line of the page's code blocks: indented by four spaces or more
    (also inside a list item), or between ``` fences."""
    found, fenced = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.strip().startswith("```"):
            fenced = not fenced
        elif found and found[-1][1].endswith("\\"):  # a command continued on this line
            found[-1] = (found[-1][0], found[-1][1].removesuffix("\\") + line.strip())
        elif line.strip() and (fenced or re.match(r" {4,}\S", line)):
            found.append((number, line.strip()))
    return found


def doc_commands() -> tuple[list[Command], list[Command]]:
    """The docs' snakemake commands (each line once, with every place that gives it, in the docs'
    order) and the shell lines that write a file they name (`printf ... > more.yaml`)."""
    commands: dict[str, Command] = {}
    writes: dict[str, Command] = {}
    for page in PAGES:
        for number, line in code_lines(page):
            place = f"{page.relative_to(ROOT)}:{number}"
            if line.split()[0] == "snakemake":  # each once, however commented and where -n is added
                command = Command(line, [])
                commands.setdefault(" ".join(shlex.split(command.run_as, comments=True)), command).places.append(place)
            elif re.search(r" > \S+$", line):
                writes.setdefault(line, Command(line, [])).places.append(place)
    named = {word for command in commands.values() for word in command.words}
    return list(commands.values()), [w for w in writes.values() if w.line.split()[-1] in named]


def demo_checkout(directory: Path) -> Path:
    """A copy of the workflow whose config/config.yaml is the demo's (config.yaml with demo.yaml
    over it) and whose demo samples sheet is trimmed to SAMPLES."""
    ignored = shutil.ignore_patterns("__pycache__", "demo_models", ".snakemake", "results", "logs")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, directory / name, ignore=ignored)
        else:
            shutil.copy(source, directory / name)
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    update_config(config, yaml.safe_load((ROOT / "config" / "demo.yaml").read_text()))
    (directory / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (directory / config["samples"]).write_text(SAMPLES)
    return directory


def config_files(command: Command) -> list[str]:
    """The YAML files a command gives after --configfile."""
    files, words = [], command.words
    for i, word in enumerate(words):
        if word in ("--configfile", "--configfiles"):
            for given in words[i + 1 :]:
                if given.startswith("-"):
                    break
                files.append(given)
    return [f for f in files if f.endswith((".yaml", ".yml"))]


def test_the_docs_give_their_commands():
    commands, writes = doc_commands()
    found = "\n".join(map(str, writes + commands))
    assert len(commands) >= MIN_COMMANDS, f"only {len(commands)} snakemake commands found in the docs:\n{found}"
    assert any(c.cluster for c in commands) and any(not c.dry for c in commands), found
    assert {"profiles/slurm", "fetch_models", "train", "--report", "--lint"} <= {w for c in commands for w in c.words}


@pytest.mark.slow
def test_every_command_in_the_docs_runs_as_written(tmp_path):
    commands, writes = doc_commands()
    checkout = demo_checkout(tmp_path)
    env = {k: v for k, v in ENV.items() if not k.startswith("SNAKEMAKE")} | {"PYTHONPATH": str(checkout)}
    ordered = writes + sorted(commands, key=lambda c: c.stage)  # sorted is stable: the docs' order in a stage
    failures = []
    for command in ordered:
        for name in config_files(command):
            if not (checkout / name).exists():  # a config of the user's (my_config.yaml): the demo's
                shutil.copy(checkout / "config" / "config.yaml", checkout / name)
        result = subprocess.run(
            ["bash", "-c", command.run_as], cwd=checkout, env=env, capture_output=True, text=True, timeout=1200
        )
        output = result.stdout + result.stderr
        stopped = [line for line in output.splitlines() if any(s in line for s in STOPS)]
        if result.returncode or stopped:
            failures.append(f"{command}\n  exit {result.returncode}: {(stopped or output.splitlines()[-5:])}")
        elif command.dry and "Job stats:" not in output:
            failures.append(f"{command}\n  the dry run shows no job: {output.splitlines()[-3:]}")
        elif (report := dict(zip(command.words, command.words[1:])).get("--report")) and not (
            checkout / report
        ).exists():
            failures.append(f"{command}\n  wrote no report {report}")
    found = "\n".join(f"  {c}" for c in ordered)
    assert not failures, "\n".join(failures) + f"\n\nthe commands found, in the order run:\n{found}"
