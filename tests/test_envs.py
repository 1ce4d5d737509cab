"""The conda environments (no conda channel is reachable here, so they are checked, not built):
they parse, they list every package the scripts of their rules import, and their pins agree with
requirements.txt, which the README installs."""

import ast
import json
import re
import subprocess
import sys

import yaml
from helpers import ENV, ROOT, write_config, write_inputs

# import name -> distribution name, where they differ
DISTRIBUTIONS = {"esm": "fair-esm", "yaml": "pyyaml", "huggingface_hub": "huggingface-hub"}


def rules_envs_scripts() -> list[tuple[str, str, str]]:
    """(rule, env file, script name) of every rule (checkpoints too) that runs a script."""
    found = []
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        blocks = (b.lstrip() for b in re.split(r"\n(?= *(?:rule|checkpoint) )", smk.read_text()))  # in `if` too
        for block in (b for b in blocks if b.startswith(("rule ", "checkpoint "))):
            rule = block.split()[1].rstrip(":")
            env = re.search(r'conda:\s*"\.\./(envs/[\w.]+)"', block)
            script = re.search(r'script_job\(\s*"(\w+)"', block)
            if script:
                assert env, f"rule {rule} runs a script without a conda: environment"
                found.append((rule, env.group(1), script.group(1)))
    return found


def third_party_imports(path, seen=None) -> set[str]:
    """Top-level third-party modules imported by a file and, transitively, by workflow_lib."""
    seen = set() if seen is None else seen
    if path in seen:
        return set()
    seen.add(path)
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative, inside workflow_lib
                base = path.parent
                for _ in range(node.level - 1):
                    base = base.parent
                target = base.joinpath(*(node.module or "").split("."))
                candidates = [target.with_suffix(".py"), target / "__init__.py"]
                candidates += [target / f"{a.name}.py" for a in node.names]
                for candidate in candidates:
                    if candidate.is_file():
                        modules |= third_party_imports(candidate, seen)
                continue
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top == "workflow_lib":
                target = ROOT.joinpath(*name.split("."))
                for candidate in (target.with_suffix(".py"), target / "__init__.py"):
                    if candidate.is_file():
                        modules |= third_party_imports(candidate, seen)
            elif top not in sys.stdlib_module_names:
                modules.add(top)
    return modules


def pins(lines) -> dict[str, str]:
    return dict(line.split("==") for line in lines if "==" in line and not line.lstrip().startswith("#"))


def test_every_script_rule_has_an_environment_with_its_imports():
    found = rules_envs_scripts()
    assert {rule for rule, _, _ in found} >= {"prepare", "embed", "predict", "train", "check_models"}
    for rule, env, script in found:
        spec = yaml.safe_load((ROOT / env).read_text())
        pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict))
        listed = set(pins(pip))
        needed = {DISTRIBUTIONS.get(m, m) for m in third_party_imports(ROOT / "scripts" / f"{script}.py")}
        assert needed <= listed, f"{env} lacks {sorted(needed - listed)} for rule {rule}"


def test_environment_pins_agree_with_requirements():
    required = pins((ROOT / "requirements.txt").read_text().split())
    for env in sorted((ROOT / "envs").glob("*.yaml")):
        spec = yaml.safe_load(env.read_text())
        assert "python=3.11" in spec["dependencies"]
        pip = next(d["pip"] for d in spec["dependencies"] if isinstance(d, dict))
        for name, version in pins(pip).items():
            assert required.get(name) == version, (
                f"{env.name}: {name}=={version}, requirements.txt has {required.get(name)}"
            )


# Jobs that need no GPU model: many per sample, so they should start fast and not load torch.
TORCH_FREE = ("prepare", "plan", "predict", "call", "summarize", "plot_sample", "overview", "plot_training")
# Run as the rule runs it (as __main__, with its arguments), then list what it imported.
PROBE = (
    "import json, runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "try:\n"
    "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
    "except SystemExit as end:\n"
    "    assert not end.code, end.code\n"
    "print(json.dumps(sorted({'torch', 'h5py', 'esm', 'transformers'} & set(sys.modules))))\n"
)


def imported(script: str, *args: str) -> list[str]:
    """Which of torch, h5py, fair-esm and transformers scripts/`script`.py imports, run with `args`."""
    command = [sys.executable, "-c", PROBE, str(ROOT / "scripts" / f"{script}.py"), *args]
    result = subprocess.run(command, capture_output=True, text=True, env={**ENV, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_jobs_without_models_do_not_import_torch():
    """Each such script's modules, imported in a fresh interpreter as the job would (--help: every
    import at the top): torch (about 1 s and hundreds of MB to import) is not among them, nor h5py."""
    for name in TORCH_FREE:
        assert imported(name, "--help") == [], f"scripts/{name}.py imports torch, h5py or a model library"
    assert {rule for rule, _, _ in rules_envs_scripts()} >= set(TORCH_FREE)


def test_the_tokenize_job_runs_without_torch(demo_models, tmp_path):
    """The tokenize job (one per pooled shard, a CPU job) tokenizes a shard with the DNABERT-S
    tokenizer, writing HDF5, without importing torch, transformers or fair-esm: seconds of start-up
    each. Run whole, as the rule runs it: a model library imported late would be found too."""
    shard, tokens, check = tmp_path / "shard_0.fna", tmp_path / "tokens.h5", tmp_path / "models.json"
    shard.write_text(">r1_0_f1\nACGTACGGTCAATGCA\n>r1_0_f2\nTTGACCAGTAGCATGCAAC\n")
    check.write_text(json.dumps({"dnabert": {"files": {}}}))
    options = {
        "--model": "dnabert",
        "--architecture": "dnabert_s",
        "--checkpoint": str(demo_models["dnabert"]),
        "--cache-dir": str(tmp_path / "cache"),
        "--model-check": str(check),
        "--input": str(shard),
        "--tokens": str(tokens),
    }
    assert imported("tokenize_shard", *[word for pair in options.items() for word in pair]) == ["h5py"]
    assert tokens.is_file()


CONDA_LINE = "software-deployment-method: conda"


def test_conda_is_optional_and_one_line_of_the_slurm_profile_switches_it_on(tmp_path):
    """The catalog file, the README and profiles/slurm say the same: conda is supported, not
    mandatory, and the profile's one commented line turns it on. Uncommented, Snakemake takes it:
    on this machine, without conda, it stops asking for conda (a real dry run)."""
    catalog = yaml.safe_load((ROOT / ".snakemake-workflow-catalog.yml").read_text())
    assert catalog["usage"]["software-stack-deployment"]["conda"] is True
    assert "--sdm" not in str(catalog["usage"].get("mandatory-flags", ""))
    profile = (ROOT / "profiles" / "slurm" / "config.yaml").read_text()
    assert f"\n# {CONDA_LINE}\n" in profile
    assert CONDA_LINE in (ROOT / "README.md").read_text()

    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "config.yaml").write_text(profile.replace(f"# {CONDA_LINE}", CONDA_LINE))
    write_inputs(tmp_path)
    config = write_config(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(config),
            "--profile",
            str(tmp_path / "slurm"),
        ],
        capture_output=True,
        text=True,
        env=ENV,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Error running conda info" in output, output[-2000:]
