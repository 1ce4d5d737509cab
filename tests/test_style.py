"""The workflow lints clean, and the code is formatted (snakefmt for Snakemake files, ruff for Python)."""

import ast
import re
import statistics
import subprocess
import sys

import pytest
from helpers import ROOT

PYTHON_DIRS = ["workflow_lib", "harness", "scripts", "tests", "benchmarks"]


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True)


def test_snakemake_lint_is_clean():
    result = run("snakemake", "--lint")
    assert "Congratulations, your workflow is in a good condition!" in result.stdout + result.stderr, result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ("snakefmt", "--check", "Snakefile", "rules"),
        ("ruff", "check", *PYTHON_DIRS),
        ("ruff", "format", "--check", *PYTHON_DIRS),
    ],
    ids=["snakefmt", "ruff-check", "ruff-format"],
)
def test_formatted(command):
    result = run(*command)
    assert result.returncode == 0, result.stdout + result.stderr


# workflow_lib's packages, lowest floor first: a package imports only those below it
FLOORS = ["cli", "io", "models", "prepare", "embed", "classify", "training", "report", "workflow"]


def library_imports() -> dict[str, set[str]]:
    """Each module of workflow_lib and the library modules it imports (at any depth of its code)."""
    graph = {}
    for path in sorted((ROOT / "workflow_lib").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("workflow_lib"):
                imported |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names if alias.name.startswith("workflow_lib")}
        graph[module] = imported
    return {
        module: {name for name in imported if name in graph and name != module} for module, imported in graph.items()
    }


def test_packages_are_floors_without_circles():
    graph = library_imports()
    packages = {module.split(".")[1] for module in graph if module.count(".") >= 1}
    assert packages == set(FLOORS), packages
    upward = [
        f"{module} imports {name}"
        for module, imported in graph.items()
        for name in imported
        if module.count(".") >= 1
        and name.count(".") >= 1  # the top package holds only the version
        and FLOORS.index(name.split(".")[1]) > FLOORS.index(module.split(".")[1])
    ]
    assert not upward, upward
    # no circle: every module can be ordered after all it imports
    done: set[str] = set()
    while len(done) < len(graph):
        ready = {module for module, imported in graph.items() if module not in done and imported <= done}
        assert ready, f"an import circle among {sorted(set(graph) - done)}"
        done |= ready
    # the tests' and benchmarks' harness stands outside the library: nothing in the library imports it
    harnessed = [
        p.name
        for p in (ROOT / "workflow_lib").rglob("*.py")
        if re.search(r"^\s*(from|import) harness\b", p.read_text(), re.M)
    ]
    assert not harnessed, harnessed


def test_packages_are_small_and_say_what_they_own():
    for package in FLOORS:
        folder = ROOT / "workflow_lib" / package
        modules = [path for path in folder.glob("*.py") if path.name != "__init__.py"]
        assert len(modules) <= 12, f"{package}: {len(modules)} modules"
        assert ast.get_docstring(ast.parse((folder / "__init__.py").read_text())), f"{package} has no docstring"
    top = [path.name for path in (ROOT / "workflow_lib").glob("*.py")]
    assert top == ["__init__.py"], top


# What may stand at the repository's root (tracked): a file left there by a stray command fails here.
ROOT_ENTRIES = {
    ".ci",
    ".gitignore",
    ".snakemake-workflow-catalog.yml",
    "README.md",
    "Snakefile",
    "benchmarks",
    "config",
    "docs",
    "envs",
    "harness",
    "profiles",
    "pyproject.toml",
    "report",
    "requirements.txt",
    "resources",
    "rules",
    "run.sh",
    "scripts",
    "tests",
    "workflow_lib",
}


def test_only_the_expected_entries_stand_at_the_root():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    entries = {line.split("/")[0] for line in tracked.splitlines()}
    assert entries == ROOT_ENTRIES, (
        f"unexpected: {sorted(entries - ROOT_ENTRIES)}; missing: {sorted(ROOT_ENTRIES - entries)}"
    )


def rule_bodies() -> dict[str, int]:
    """Non-blank lines of each rule's and checkpoint's body (those under `if` too), by file:name."""
    bodies = {}
    for path in [ROOT / "Snakefile", *sorted((ROOT / "rules").glob("*.smk"))]:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if not (m := re.match(r"( *)(?:rule|checkpoint) (\w+):", line)):
                continue
            indent, body = len(m.group(1)), 0
            for following in lines[i + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                body += bool(following.strip())
            bodies[f"{path.name}:{m.group(2)}:{i + 1}"] = body
    return bodies


def test_rules_stay_short():
    """A rule says what runs where (its why is a comment above it): at most 20 lines at the median,
    none over 40."""
    bodies = rule_bodies()
    assert len(bodies) >= 17
    assert statistics.median(bodies.values()) <= 20, sorted(bodies.items(), key=lambda kv: kv[1])
    assert max(bodies.values()) <= 40, max(bodies.items(), key=lambda kv: kv[1])
