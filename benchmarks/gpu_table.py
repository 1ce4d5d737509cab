"""docs/gpu-check.md's table of GPU figures, printed as markdown from the GPU check's JSONs in a
folder and its subfolders, one a session (tests/test_gpu_check.py checks that the doc holds what
this prints).

    python benchmarks/gpu_table.py docs/gpu-check
"""

import argparse
import json
from pathlib import Path

# The JSONs of the first two GPU sessions (2026-11-26) hold no commit: the commit that recorded
# them, and their settings that differ from today's defaults.
LEGACY = {
    "equivalence.json": "ac4ce3b: eager, no levers, DNABERT-S in flex",
    "model.json": "ac4ce3b: eager, no levers",
    "speed.json": "ac4ce3b: budgets 65,536, eager, no levers, DNABERT-S in flex",
    "oom.json": "ac4ce3b: 650M shape, budget 65,536",
    "workflow.json": "ac4ce3b: budgets 65,536, eager, whole GPU a job",
    "workflow60k.json": "ac4ce3b: budgets 65,536, eager, whole GPU a job",
    "model_compiled.json": "ac1f48e: no levers",
    "workflow100k.json": "ac1f48e: budgets 65,536, eager, whole GPU a job",
    "qkv_lever.json": "2026-11-26 H200 ac1f48e: a one-off script, no levers",  # its JSON holds neither
}


def number(value) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def agreement(run: dict) -> str:
    return f"cosine min {run['min_cosine']}, mean {run['mean_cosine']}; max diff {run['max_abs_diff']:.2g}"


def equivalence(figures: dict):
    for shape, measured in figures["esm"].items():
        for name, run in measured["runs"].items():
            if name.endswith("rotary in float32"):  # decided: rotary in the model's dtype
                continue
            precision = name.split(",")[0].upper()
            yield f"ESM-2 {shape} {precision} against fair-esm FP32", agreement(run)
    for precision, run in figures["dnabert"]["runs"].items():
        yield f"DNABERT-S {precision.upper()} against FP32", agreement(run)
    fixture = figures["dnabert_fixture"]
    for precision, run in fixture.get("runs", fixture).items():
        yield f"DNABERT-S fixture {precision.upper()} against the public code", agreement(run)


def model(figures: dict):
    for key, names in (("esm", "ESM-2 3B"), ("esm_compiled", "ESM-2 3B"), ("dnabert", "DNABERT-S")):
        if key not in figures:
            continue
        compiled = figures[key].get("compiled", key == "esm_compiled")
        way = "" if key == "dnabert" else (", compiled" if compiled else ", eager")
        for budget, run in figures[key]["budgets"].items():
            value = f"{number(run['tokens_per_s'])} tokens/s, MFU {run['mfu']}, {run['peak_memory_gib']} GiB"
            yield f"{names} alone{way}, budget {number(int(budget))}", value
    levers = figures.get("levers", {})
    for name, run in levers.get("runs", {}).items():
        if "tokens_per_s" not in run:
            continue
        changed = max(shape["calls_changed"] for shape in run.values() if isinstance(shape, dict))
        value = f"{number(run['tokens_per_s'])} tokens/s ({run.get('over_none')} of none), "
        value += f"cosine min {run['min_cosine']}, calls changed {changed}"
        yield f"ESM-2 3B levers `{name}`, budget {number(levers['budget'])}", value


def speed(figures: dict):
    job = figures["embed_job"]
    value = f"{number(job['tokens_per_s'])} tokens/s steady, MFU {job['mfu']}; "
    value += f"{number(job['whole_job_tokens_per_s'])} whole ({job['startup_s']:.1f} s start-up)"
    yield "ESM-2 3B embed job", value
    for key, what in (("fair_esm_fp16", "fair-esm FP16"), ("virnucpro_fp32", "VirNucPro's FP32 settings")):
        base = figures[key]
        yield f"the embed job over {what}", f"{base['embed_job_over_it']}x ({number(base['tokens_per_s'])} tokens/s)"
    yield "DNABERT-S embed job", f"{number(figures['dnabert_job']['tokens_per_s'])} tokens/s"


def oom(figures: dict):
    capped = figures["capped"]
    value = f"{capped['oom_splits']} batches split, all frames {capped['all_frames']}, "
    value += f"max diff {figures['capped_against_uncapped']['max_abs_diff']}"
    yield f"embed job capped at {capped['cap_gib']} GiB", value


def workflow(figures: dict):
    if "runs" not in figures:  # the first sessions' part: one run
        esm = [job for job in figures["embedding_shards"] if job["model"] == "esm"]
        rates = " and ".join(number(job["tokens_per_s"]) for job in esm)
        starts = " and ".join(f"{job['startup_s']:.1f}" for job in esm)
        value = f"{number(figures['reads_per_hour'])} reads/h; ESM-2 jobs {rates} tokens/s, start-up {starts} s"
        yield f"workflow, {number(figures['reads'])} reads, shards: {figures['shards']}", value
        return
    for name, run in figures["runs"].items():
        starts = max(job["startup_s"] or 0 for job in run["embed_job"].values())
        esm = " and ".join(number(j["tokens_per_s"]) for n, j in run["embed_job"].items() if n.startswith("esm"))
        value = f"{number(run['reads_per_hour'])} reads/h, SMs busy {run['gpu_sm_busy_share']}; "
        value += f"ESM-2 jobs {esm} tokens/s; start-up at most {starts:.1f} s"
        yield f"workflow `{name}`, {number(run['reads'])} reads", value
    if "shared_over_whole" in figures:
        yield "workflow, GPU shared over whole, seconds", str(figures["shared_over_whole"]["seconds"])


PARTS = {"equivalence": equivalence, "model": model, "speed": speed, "oom": oom, "workflow": workflow}


def rows(path: Path):
    figures = json.loads(path.read_text())
    if path.name == "qkv_lever.json":
        for name, rates in figures["tokens_per_s"].items():
            yield f"ESM-2 3B alone, q/k/v {name}", " / ".join(map(number, rates)) + " tokens/s"
        return
    if figures.get("part") in PARTS:  # not all.json: each part's own JSON beside it holds the same figures
        yield from PARTS[figures["part"]](figures[figures["part"]])


def table(directory: Path) -> str:
    lines = ["| figure | value | measured |", "|---|---|---|"]
    for path in sorted(directory.rglob("*.json")):
        figures, name = json.loads(path.read_text()), path.relative_to(directory).as_posix()
        if "benchmark" in figures:  # the header of benchmarks/gpu_check.py's JSONs
            measured = " ".join(filter(None, (figures["date"], figures.get("gpu"), figures.get("commit"))))
        else:
            measured = " ".join(filter(None, (figures.get("date"), figures.get("gpu"), LEGACY[name])))
        source = f"{measured.replace('NVIDIA ', '')}, [{name}](gpu-check/{name})"
        for what, value in rows(path):
            lines.append(f"| {what} | {value} | {source} |")
            source = "〃"  # the file's first row names it
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="the GPU check's JSONs (docs/gpu-check)")
    print(table(parser.parse_args().directory), end="")


if __name__ == "__main__":
    main()
