"""The workflow through a real SLURM cluster (tests/slurm/up.sh: Debian's slurm-wlm and munge, one
node, two fake GPUs) with tests/slurm/profile, the test variant of profiles/slurm: embed jobs reach
SLURM with --gpus=1, see the GPU it gave them and run side by side, CPU jobs get none, and the
tables equal a local run."""

import itertools
import os
import re
import shutil
import subprocess

import pytest
import yaml
from conftest import ENV, ROOT, SNAKEMAKE, write_config, write_inputs

SLURM = ROOT / "tests" / "slurm"
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("apt-get"),
    reason="starts a SLURM cluster: needs root on Debian, as in CI",
)
TABLES = ("frames.tsv", "chunks.tsv", "sequences.tsv", "viral.fasta")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "BASE": str(base)}
    started = subprocess.run(["bash", str(SLURM / "up.sh")], env=env, capture_output=True, text=True)
    assert started.returncode == 0, started.stdout + started.stderr
    yield {**ENV, "SLURM_CONF": str(base / "etc" / "slurm.conf")}
    subprocess.run(["bash", str(SLURM / "down.sh"), "clean"], env=env, capture_output=True)


SAMPLES = ("phix", "plasmid")  # a virus and another, enough to train on


def configured(workdir):
    """test_workflow's inputs and config, cut to two samples of one shard (the test stays short)."""
    write_inputs(workdir)
    sheet = workdir / "samples.tsv"
    header, *rows = sheet.read_text().splitlines(keepends=True)
    sheet.write_text(header + "".join(r for r in rows if r.split("\t")[0] in SAMPLES))
    path = write_config(workdir)
    config = yaml.safe_load(path.read_text())
    config["shards"] = 1
    path.write_text(yaml.safe_dump(config))
    return path


def test_workflow_runs_through_slurm(cluster, tmp_path):
    local, slurm = tmp_path / "local", tmp_path / "slurm"
    local.mkdir()
    slurm.mkdir()
    # the embed jobs' threads as under the SLURM profile: BLAS splits sums by thread count, and
    # embeddings made with other counts can differ in their last bit
    ran = subprocess.run(
        SNAKEMAKE + ["--directory", str(local), "--configfile", str(configured(local)), "--set-threads", "embed=1"],
        capture_output=True,
        text=True,
        env=ENV,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]

    profile = ["--profile", str(SLURM / "profile"), "--verbose"]
    command = SNAKEMAKE[:5] + ["--directory", str(slurm), "--configfile", str(configured(slurm))] + profile
    ran = subprocess.run(command, capture_output=True, text=True, env=cluster, timeout=600)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-5000:]

    sbatch = [line for line in output.splitlines() if "sbatch call" in line]
    gpu_jobs = [line for line in sbatch if "rule_embed_" in line]
    cpu_jobs = [line for line in sbatch if "rule_embed_" not in line]
    assert len(gpu_jobs) == 2 * len(SAMPLES) and all("--gpus=1" in line and "-p gpu" in line for line in gpu_jobs)
    assert cpu_jobs and not any("--gpus" in line or "--gres" in line for line in cpu_jobs)
    print("GPU job:", gpu_jobs[0].strip(), "\nCPU job:", cpu_jobs[0].strip())

    # SLURM's own record: each embed job holds a GPU, the other jobs none
    jobs = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, env=cluster).stdout
    gpus, embed_times = {}, []
    for line in jobs.splitlines():
        rule = re.search(r"Comment=rule_(\S+)", line).group(1).split("_wildcards")[0]
        gpus.setdefault(rule, []).append("TresPerJob=gres:gpu:1" in line)
        if rule == "embed":
            embed_times.append(tuple(re.search(rf"{key}=(\S+)", line).group(1) for key in ("StartTime", "EndTime")))
    assert len(gpus["embed"]) == 2 * len(SAMPLES) and all(gpus["embed"])
    assert {"prepare", "train", "predict"} <= gpus.keys()
    assert not any(any(held) for rule, held in gpus.items() if rule != "embed")
    # the profile stands alone (no workflow profile with a global GPU cap): embed jobs ran side by
    # side on the two GPUs, by SLURM's own start and end times (ISO times sort as text)
    assert "workflow specific profile" not in output
    assert any(s2 < e1 and s1 < e2 for (s1, e1), (s2, e2) in itertools.combinations(embed_times, 2)), embed_times

    for log in (slurm / "logs" / "embed").rglob("*.log"):  # the GPU SLURM gave each job
        assert re.search(r"CUDA_VISIBLE_DEVICES=[01]\b", log.read_text()), log
    for sample in SAMPLES:
        for table in TABLES:
            assert (slurm / "results" / sample / table).read_bytes() == (
                local / "results" / sample / table
            ).read_bytes()
