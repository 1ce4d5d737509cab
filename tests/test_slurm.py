"""The workflow through a real SLURM cluster (tests/slurm/up.sh: Debian's slurm-wlm and munge, one
node of 6 CPUs, two fake GPUs) with the shipped profiles/slurm, its SITE lines filled in: embed
jobs reach SLURM with --gpus=1 and two CPUs, see the GPU it gave them and run side by side, CPU
jobs get none and go grouped as the profile says, and the tables equal a local run; a failing
job's error line, a job killed for memory and a job that can never start reach the console; an
embed job is tried as often as its rule says, one SLURM job and one run of its command a try. Each
test bed has its own directory and free ports, and whatever it started is stopped when the test
ends, passed or failed: test runs side by side do not collide."""

import itertools
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import ENV, ROOT, SNAKEMAKE, seed_demo_models, write_config, write_inputs
from slurm_testbed import SHIPPED, TEST_OPTIONS, shipped_profile, slurm_cluster

from workflow_lib.io.seqio import read_records
from workflow_lib.prepare.plan import read_plans
from workflow_lib.workflow.cluster_watch import job_name

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("apt-get"),
        reason="starts a SLURM cluster: needs root on Debian, as in CI",
    ),
]
TABLES = ("frames.tsv", "chunks.tsv", "sequences.tsv", "viral.fasta")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with slurm_cluster(tmp_path_factory.mktemp("slurm")) as env:
        yield env


def test_two_test_beds_run_side_by_side(cluster, failing_bed):
    """Two clusters at once (the module's two: the workflow's and the failing runs'), each on its
    own ports: `srun` without SLURM_CONF (as in a job step) reaches its own cluster through the shim,
    each cluster records only its own job, and stopping a bed leaves no daemon (slurm_cluster checks
    when the module's tests end)."""
    beds = {"a": cluster, "b": failing_bed}
    ports = []
    for env in beds.values():
        conf = Path(env["SLURM_CONF"]).read_text()
        ports += re.findall(r"^Slurm(?:ctld|d)Port=(\d+)$", conf, re.M)
        state = subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, env=env)
        assert state.stdout.split() == ["idle"] * 3, state.stdout + state.stderr  # partitions main, gpu, short
    assert len(ports) == len(set(ports)) == 4
    for name, env in beds.items():
        step = {key: value for key, value in env.items() if key != "SLURM_CONF"}
        ran = subprocess.run(
            ["srun", "-J", f"bed_{name}", "-n1", "printenv", "SLURM_CONF"], capture_output=True, text=True, env=step
        )
        assert ran.returncode == 0 and ran.stdout.strip() == env["SLURM_CONF"], ran.stdout + ran.stderr
    for name, env in beds.items():  # the module's bed may hold other tests' jobs
        jobs = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%j"], capture_output=True, text=True, env=env)
        assert [job for job in jobs.stdout.split() if job.startswith("bed_")] == [f"bed_{name}"], jobs.stdout


LABELLED = ("phix", "plasmid")  # a virus and another, enough to train on
TINY = ("tiny1", "tiny2")  # two mitochondrial reads each, unlabelled
SAMPLES = LABELLED + TINY
# samples a grouped job of the shipped profile holds (group-components)
GROUPED = dict(g.split("=") for g in yaml.safe_load(SHIPPED.read_text())["group-components"])
GROUPS = ("small_prepare", "small_samples", "sample_report")


def configured(workdir, demo_models):
    """test_workflow's inputs and config, cut to two samples of one shard each, too large to share a
    pooled shard (two pooled shards: embed jobs side by side), and two tiny samples that share the
    second (the test stays short); the demo models built (helpers.seed_demo_models)."""
    write_inputs(workdir)
    seed_demo_models(demo_models["esm"].parent, workdir)
    sheet = workdir / "samples.tsv"
    header, *rows = sheet.read_text().splitlines(keepends=True)
    ((_, _, mito),) = read_records(workdir / "inputs" / "mito.fa")
    for i, name in enumerate(TINY):
        reads = "".join(f">r{j}\n{mito[(2 * i + j) * 400 :][:300].decode()}\n" for j in range(2))
        (workdir / "inputs" / f"{name}.fa").write_text(reads)
    tiny = "".join(f"{name}\t{workdir / 'inputs' / name}.fa\t\n" for name in TINY)
    sheet.write_text(header + "".join(r for r in rows if r.split("\t")[0] in LABELLED) + tiny)
    path = write_config(workdir)
    config = yaml.safe_load(path.read_text())
    config["shard_tokens"] = 2500  # one shard a sample (about 1,600 tokens each), each pooled alone
    config["embedding"] = {"num_workers": 1}  # embed jobs of two CPUs: two side by side on the node
    path.write_text(yaml.safe_dump(config))
    return path


def test_workflow_runs_through_slurm(cluster, failing_started, tmp_path, demo_models):
    # failing_started: the runs that fail on purpose go on meanwhile, on their test bed
    local, slurm = tmp_path / "local", tmp_path / "slurm"
    local.mkdir()
    slurm.mkdir()
    # the local run, to compare with, beside the cluster run: that one mostly waits on SLURM; it
    # makes the compared tables only (not the summaries and figures)
    tables = [f"results/{sample}/{table}" for sample in SAMPLES for table in TABLES]
    local_run = subprocess.Popen(
        [*SNAKEMAKE[:5], *tables, *SNAKEMAKE[5:], "--directory", str(local)]
        + ["--configfile", str(configured(local, demo_models))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    profile = ["--profile", str(shipped_profile(tmp_path / "profile")), "--verbose", *TEST_OPTIONS]
    command = SNAKEMAKE[:5] + ["--directory", str(slurm), "--configfile", str(configured(slurm, demo_models))] + profile
    ran = subprocess.run(command, capture_output=True, text=True, env=cluster, timeout=600)
    local_errors = local_run.communicate(timeout=600)[1]
    assert local_run.returncode == 0, local_errors[-3000:]
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-5000:]

    sbatch = [line for line in output.splitlines() if "sbatch call" in line]
    gpu_jobs = [line for line in sbatch if "rule_embed_" in line]
    cpu_jobs = [line for line in sbatch if "rule_embed_" not in line]
    pools = read_plans(slurm / "results" / "plan")[1]  # one job per pooled shard and model
    assert (
        len(pools) == len(LABELLED)
        and len(gpu_jobs) == 2 * len(pools)
        and all("--gpus=1" in line and "-p gpu" in line for line in gpu_jobs)
    )
    assert all("--cpus-per-task=2" in line for line in gpu_jobs)  # embed jobs of more than one CPU
    assert cpu_jobs and not any("--gpus" in line or "--gres" in line for line in cpu_jobs)
    print("GPU job:", gpu_jobs[0].strip(), "\nCPU job:", cpu_jobs[0].strip())
    # every sample is small: its CPU jobs go GROUPED samples to a submission, none alone
    groups = [re.search(r"--comment rule_(small_prepare|small_samples)_", line) for line in cpu_jobs]
    submitted = [g.group(1) for g in groups if g]
    for group in ("small_prepare", "small_samples"):
        assert submitted.count(group) == -(-len(SAMPLES) // int(GROUPED[group])), sbatch
    per_sample = ("prepare", "predict", "call", "summarize", "plot_sample")
    assert not [line for line in cpu_jobs if re.search(rf"rule_({'|'.join(per_sample)})_wildcards", line)]

    # SLURM's own record: each embed job holds a GPU, the other jobs none
    jobs = subprocess.run(["scontrol", "show", "job", "-o"], capture_output=True, text=True, env=cluster).stdout
    gpus, embed_times = {}, []
    for line in jobs.splitlines():
        if str(slurm) not in line:  # another test's job on the module's cluster
            continue
        rule = job_name(re.search(r"Comment=(\S+)", line).group(1), GROUPS).split()[1]  # or group
        gpus.setdefault(rule, []).append("TresPerJob=gres:gpu:1" in line)
        if rule == "embed":
            embed_times.append(tuple(re.search(rf"{key}=(\S+)", line).group(1) for key in ("StartTime", "EndTime")))
    assert len(gpus["embed"]) == 2 * len(pools) and all(gpus["embed"])
    assert {"small_prepare", "train", "small_samples"} <= gpus.keys()
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


@pytest.fixture(scope="module")
def failing_bed(tmp_path_factory):
    """A test bed of its own for the runs that fail on purpose: they run beside
    test_workflow_runs_through_slurm (all of them mostly wait on SLURM) and hold none of its GPUs."""
    with slurm_cluster(tmp_path_factory.mktemp("slurm_failing")) as env:
        yield env


@pytest.fixture(scope="module")
def failing_started(failing_bed, tmp_path_factory, demo_models):
    """The runs that fail on purpose, started together (they share nothing but their test bed) and
    left running: their work directory and process, by name. Whatever still runs when the module's
    tests end is killed."""
    base = tmp_path_factory.mktemp("failing")
    profile = shipped_profile(base / "profile")
    commands = {}
    # a sample that is no DNA: its prepare job fails with a one-line error
    failing = base / "failing"
    failing.mkdir()
    (failing / "protein.fa").write_text(">p\nMKVLAAGIVGLLLAAQPAMAQWERTYIPSDFGHKLCVNM\n")
    (failing / "samples.tsv").write_text(f"sample\tpath\nbad\t{failing / 'protein.fa'}\n")
    commands["failing"] = sheet_run(failing, profile, demo_models, pending_check_seconds=2)
    # prepare sent to the partition `short`: 1 minute at most, and prepare asks for 10 or more
    commands["pending"] = phix_run(base / "pending", profile, demo_models, pending_check_seconds=2)
    commands["pending"] += ["--set-resources", "prepare:slurm_partition=short"]
    commands["memory"] = phix_run(base / "memory", profile, demo_models) + ["--set-resources", "prepare:mem_mb=100"]
    # ESM-2's embed job asked for by its file; at 250 MB, Snakemake in the batch step (about 140 MB)
    # stays under it, the job's step (Snakemake and the embed job importing torch) goes over it within
    # seconds
    retries = phix_run(base / "retries", profile, demo_models)
    retries[5:5] = ["results/shards/embeddings/esm/shard_0-0.h5"]
    commands["retries"] = retries + ["--set-resources", "embed:mem_mb=250"]
    runs = {}
    try:
        for name, command in commands.items():
            with open(base / f"{name}.out", "w") as out, open(base / f"{name}.err", "w") as err:
                runs[name] = subprocess.Popen(
                    command, stdout=out, stderr=err, text=True, env=failing_bed, start_new_session=True
                )
        yield {name: (base / name, run) for name, run in runs.items()}
    finally:
        for run in runs.values():
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)  # Snakemake, a run that hangs
            run.wait()


@pytest.fixture(scope="module")
def failed_runs(failing_started) -> dict[str, tuple[Path, int, str]]:
    """The runs of failing_started, ended: their work directory, exit status and console output, by name."""
    ended = {}
    for name, (workdir, run) in failing_started.items():
        run.wait(timeout=600)
        output = workdir.with_name(f"{name}.out").read_text() + workdir.with_name(f"{name}.err").read_text()
        ended[name] = (workdir, run.returncode, output)
    return ended


def test_failures_reach_the_console(failing_bed, failed_runs):
    """A failing job's one-line error reaches the console, not only its log; a job that no
    partition can run (runtime beyond the partition's MaxTime) is cancelled with its reason
    instead of pending for ever."""
    failing, returncode, output = failed_runs["failing"]
    reason = (failing / "logs" / "prepare" / "bad.log").read_text().splitlines()[-1]
    assert returncode != 0 and reason.startswith("error: ") and "protein" in reason, output[-3000:]
    assert f"failed: logs/prepare/bad.log: {reason}" in output.splitlines()

    pending, returncode, output = failed_runs["pending"]
    assert returncode != 0, output[-3000:]
    assert re.search(
        # the reason SLURM gives varies: the time limit, or the partition's configuration at large
        r"^SLURM job \d+ \(group small_prepare\) cannot start: (PartitionTimeLimit: its runtime is longer than the "
        r"partition allows|PartitionConfig: it asks for more [^;]+); cancelled\. To run it, lower its rule's resources",
        output,
        re.M,
    ), output[-3000:]
    left = subprocess.run(
        ["squeue", "-h", "-t", "PENDING", "-o", "%Z"], capture_output=True, text=True, env=failing_bed
    )
    assert str(pending) not in left.stdout


def test_a_job_killed_for_memory_is_named_with_its_mem_mb(failing_bed, failed_runs):
    """A job that SLURM kills for memory (the test bed's OverMemoryKill) says nothing of its own:
    the console names the job's group, its rules and the mem_mb SLURM gave it. At 100 MB,
    Snakemake itself in the job (about 140 MB) is over it within seconds of starting."""
    _, returncode, output = failed_runs["memory"]
    killed = re.search(
        r"^failed: group small_prepare \(SLURM job (\d+), rules prepare\) was killed for memory by SLURM; it asked "
        r"for mem_mb=100, what its jobs that run side by side ask together: raise its rules' mem_mb in the profile "
        r"\(set-resources: prepare: mem_mb: \.\.\.\) and run again$",
        output,
        re.M,
    )
    assert returncode != 0 and killed, output[-3000:]
    # SLURM's own record of the job: the group's, 100 MB
    record = ["squeue", "-h", "-t", "all", "-j", killed[1], "-o", "%k %m"]
    assert subprocess.run(record, capture_output=True, text=True, env=failing_bed).stdout.split() == [
        "rule_small_prepare_prepare",
        "100M",
    ]


def test_an_embed_job_is_tried_as_often_as_its_profile_says(failing_bed, failed_runs):
    """An embed job is tried 1 + the profile's retries times, each try one SLURM job that runs the
    job's command once, a memory kill like any other failure: Snakemake's log, SLURM's record and
    the SLURM logs count 3 SLURM jobs and 3 runs of the command for ESM-2's job (DNABERT-S's is
    the same rule). Before, the Snakemake in each SLURM job retried the rule as well (6 runs in 3
    SLURM jobs). The job is asked for by its file, before the plan that names its pooled shard
    exists (its priority once failed the DAG then)."""
    workdir, returncode, output = failed_runs["retries"]
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile["preemptible-rules"] == ["embed"] and "retries:" not in (ROOT / "rules" / "embed.smk").read_text()
    retries = profile["preemptible-retries"]
    submitted = re.findall(
        r"^Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+/rule_embed/(\w+)_[^/]+/\1\.log)\)\.$",
        output,
        re.M,
    )
    assert returncode != 0 and [model for *_, model in submitted] == ["esm"] * (1 + retries), output[-3000:]
    jobs = {job for job, *_ in submitted}
    killed = re.findall(r"^failed: rule embed \(SLURM job (\d+)\) was killed for memory by SLURM", output, re.M)
    assert sorted(killed) == sorted(jobs), output[-3000:]
    # SLURM's record: the run's embed jobs are those Snakemake submitted (none resubmitted by SLURM)
    record = ["squeue", "-h", "-t", "all", "-o", "%i %Z %k"]  # the job, its directory, its name
    listed = subprocess.run(record, capture_output=True, text=True, env=failing_bed).stdout
    ran_here = [line.split() for line in listed.splitlines() if f" {workdir} " in line]
    assert {job for job, _, name in ran_here if name.startswith("rule_embed_")} == jobs, listed
    # each SLURM job ran the command once: one step (J.0, killed), one run announced by Snakemake in it
    for job, log, _ in submitted:
        text = Path(log).read_text()
        assert text.count("localrule embed:") == 1 and set(re.findall(r"StepId=(\d+\.\w+)", text)) == {f"{job}.0"}, text


def phix_run(workdir: Path, profile: Path, demo_models: dict[str, Path], **settings) -> list[str]:
    """sheet_run of one sample, phix (one pooled shard), in `workdir`, made and filled with the inputs."""
    workdir.mkdir()
    write_inputs(workdir)
    (workdir / "samples.tsv").write_text(f"sample\tpath\nphix\t{workdir / 'inputs' / 'phix.fa'}\n")
    return sheet_run(workdir, profile, demo_models, **settings)


def sheet_run(workdir: Path, profile: Path, demo_models: dict[str, Path], **settings) -> list[str]:
    """The command of a run of `workdir`'s samples.tsv with a given classifier, the demo models built
    (helpers.seed_demo_models) and the config's `settings` (helpers.write_config) through the shipped profile
    (filled in, in `profile`)."""
    config = write_config(workdir, classifier="classifier.pt", **settings)
    classifier_file(workdir / "classifier.pt")
    seed_demo_models(demo_models["esm"].parent, workdir)
    options = ["--profile", str(profile), *TEST_OPTIONS]
    return SNAKEMAKE[:5] + ["--directory", str(workdir), "--configfile", str(config)] + options


def classifier_file(path: Path) -> None:
    """A classifier for the test models at chunk_length 300 (helpers.write_config's)."""
    import torch

    from workflow_lib.models import classifier

    torch.manual_seed(0)
    classifier.save(classifier.MLPClassifier(48 + 64), path, chunk_length=300)
