"""Interrupted and repeated runs of the whole workflow: an embed job killed mid-shard is retried
by the profile and resumes from its last commit; a run on a disk that fills up says so and, given
room, finishes as if nothing had happened; the same inputs and config give the same results."""

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from helpers import (
    ENV,
    GENOMES,
    ROOT,
    SNAKEMAKE,
    assert_same_results,
    run_results,
    seed_demo_models,
    tmpfs,
    write_config,
)

from harness.stages import write_reads

KILLED = "results/shards/embeddings/esm/shard_0-0.h5"  # the embed job that the fault hits (every sample pooled)


def setup(workdir: Path) -> Path:
    """A virus and 400 sampled reads to train on (labelled virus and other): a shard of ~170
    frames, committed after every batch, so that a kill lands mid-shard. Paths are relative to the
    working directory, so that two runs can be compared file for file."""
    workdir.mkdir()
    shutil.copy(GENOMES / "phiX174.fasta", workdir / "phix.fa")
    write_reads(workdir / "reads.fa", 400, 500, seed=5)
    (workdir / "samples.tsv").write_text("sample\tpath\tlabel\nphix\tphix.fa\tvirus\nreads\treads.fa\tother\n")
    config = write_config(
        workdir,
        samples="samples.tsv",
        chunk_length=500,
        shard_tokens=10**9,  # one shard a sample
        embedding={"commit_seconds": 0},
    )
    settings = yaml.safe_load(config.read_text())
    settings["models"]["esm"]["token_budget"], settings["models"]["dnabert"]["token_budget"] = 1024, 2048
    config.write_text(yaml.safe_dump(settings))
    return workdir


def snakemake(workdir: Path) -> subprocess.CompletedProcess:
    """The workflow with its local profile (the embed rule retries a failed job)."""
    command = SNAKEMAKE + ["--directory", str(workdir), "--configfile", str(workdir / "config.yaml")]
    command += ["--profile", str(ROOT / "profiles" / "local")]
    return subprocess.run(command, capture_output=True, text=True, env=ENV)


def kill_embed_job_once(workdir: Path, after_parts: int, killed: list) -> threading.Thread:
    """SIGKILL the embed job writing KILLED in `workdir` once it has committed `after_parts` batches
    (only that run's: another run's job, a test beside this one, works in another directory)."""
    parts = workdir / Path(KILLED).with_name(f".{Path(KILLED).name}.parts")

    def watch():
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(list(parts.glob("part_*.npz"))) < after_parts:
            time.sleep(0.01)
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = (proc / "cmdline").read_bytes().decode().split("\0")
                if Path(os.readlink(proc / "cwd")) != workdir.resolve():
                    continue
            except OSError:
                continue
            if len(argv) > 1 and argv[1].endswith("scripts/embed.py") and KILLED in argv:
                os.kill(int(proc.name), signal.SIGKILL)
                killed.append(int(proc.name))

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def runs(tmp_path_factory, demo_models):
    """Two runs of the same inputs and config. The first, building the demo models (one more stage
    that may meet the full disk), on a disk that fills up: a tmpfs with 1 MB of room past its
    inputs, then 2, 4, 8 ... as a user frees space, until the same command finishes; where no tmpfs
    can be mounted, on the roomy disk (test_a_full_disk_at_any_stage_says_so_and_loses_nothing is
    skipped). The second, on the roomy disk with the demo models seeded, has its ESM-2 embed job
    killed once mid-shard. Yields the first's work directory, the console output of each of its
    runs that met the full disk, why there was no tmpfs (None where there was), the second's work directory, its
    result and the killed job's PIDs; the tmpfs stays mounted until the module's tests end."""
    base = tmp_path_factory.mktemp("reliability")
    with contextlib.ExitStack() as mounted:
        try:
            disk = mounted.enter_context(tmpfs(base / "disk", "size=64m"))
        except pytest.skip.Exception as reason:
            first, failures, no_tmpfs = setup(base / "first"), [], str(reason)
            result = snakemake(first)
        else:
            first, failures, no_tmpfs = setup(disk / "run"), [], None
            used = shutil.disk_usage(disk).used
            for room in (1 << 20) * 2 ** np.arange(12):
                subprocess.run(["mount", "-o", f"remount,size={used + room}", str(disk)], check=True)
                result = snakemake(first)
                if result.returncode == 0:
                    break
                failures.append(result.stdout + result.stderr)
        assert result.returncode == 0, result.stderr[-3000:]
        killed_run = setup(base / "killed")
        seed_demo_models(demo_models["esm"].parent, killed_run)
        killed: list[int] = []
        watcher = kill_embed_job_once(killed_run, 10, killed)
        result = snakemake(killed_run)
        watcher.join(timeout=5)
        yield first, failures, no_tmpfs, killed_run, result, killed


@pytest.mark.slow
def test_same_inputs_and_config_give_the_same_results(runs):
    """The second run wrote the results of the first (its one killed job resumed: every other job
    ran as in the first; test_killed_embed_job_is_retried_and_resumes_mid_shard checks the kill;
    the first met a full disk, given room it finished: test_a_full_disk_at_any_stage_says_so_and_loses_nothing)."""
    first, _, _, killed_run, result, _ = runs
    assert result.returncode == 0, result.stderr[-3000:]
    assert_same_results(first, killed_run)
    expected = {"reads/sequences.tsv", "reads/frames.tsv", "train/classifier.pt", "reads/manifest.json"}
    expected |= {"reads/report/scores.png", "train/roc.png", "shards/embeddings/esm/shard_0-0.h5"}
    assert expected <= run_results(first).keys()


@pytest.mark.slow
def test_killed_embed_job_is_retried_and_resumes_mid_shard(runs):
    """The killed job is retried by the profile and resumes from its last commit, to the results of
    the first run, which no kill met (test_same_inputs_and_config_give_the_same_results compares
    them), leaving no parts behind."""
    _, _, _, killed_run, result, killed = runs
    assert killed, "the watcher found no embed job to kill"
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Error in rule embed" in result.stderr and "Trying to restart job" in result.stderr
    log = (killed_run / "logs" / "embed" / "esm_0-0.log").read_text()
    committed, total = (int(n) for n in log.split("resuming: ")[1].split(" frames")[0].split(" of "))
    assert 10 <= committed < total
    assert not list(killed_run.rglob(".*.parts"))


def test_prepare_outputs_are_reconciled_with_what_was_written(tmp_path):
    """A shard that lost a frame, or a sequences table short of a record, fails with the IDs."""
    from harness.stages import prepare_into, prepared_files, shard_fastas
    from workflow_lib.cli.errors import InputError
    from workflow_lib.io.tables import read_chunks
    from workflow_lib.prepare.reconcile import IDDigest, check_prepared

    counts = prepare_into(GENOMES / "phiX174.fasta", tmp_path, 900, chunk_length=300)
    assert counts["shards"] == 2  # 16 frames of 101 or 102 tokens, 8 a shard
    files = prepared_files(tmp_path)
    written = [(IDDigest(), IDDigest()) for _ in range(2)]  # in the table's order and the FASTAs' (by bin)
    for chunk in read_chunks(files.frames, ["frame_id", "shard", "bin"]):
        for shard, rows in chunk.groupby("shard"):
            written[shard][0].update([i.encode() for i in rows["frame_id"]])
            written[shard][1].update([i.encode() for i in rows.sort_values("bin", kind="stable")["frame_id"]])
    check_prepared(files, written, counts["records"])
    with pytest.raises(InputError, match=r"sequences.tsv.gz: 1 rows for 2 input records"):
        check_prepared(files, written, 2)

    faa = shard_fastas(tmp_path, "faa")[1]
    lines = faa.read_text().splitlines(keepends=True)
    lost = lines[2][1:].strip()
    faa.write_text("".join(lines[:2] + lines[4:]))
    with pytest.raises(InputError, match=rf"shard_1.faa: holds {len(lines) // 2 - 1} frames .*\(missing \['{lost}'\]"):
        check_prepared(files, written, counts["records"])


@pytest.mark.parametrize(
    "frames, message",
    [
        ("a1F1 a1R2 b1F1", None),
        ("a1F1 a1R2", r"'b' has 1 frames listed, none in the frames table"),
        ("a1F1 b1F1", r"'a' has 2 frames listed, 1 in the frames table"),
        ("a1F1 a1R2 b1F1 c1F1", r"the frames of 'c' are not listed"),
        ("b1F1 a1F1 a1R2", r"the frames of 'b' come where those of 'a' are listed"),
        ("a1F1 b1F1 a1R2", r"'a' has 2 frames listed, 1 in the frames table"),
        ("a1R2 a1F1 b1F1", r"frames.tsv: row 3 repeats a frame of 'a' or lists it out of chunk and frame order"),
        ("a1F1 a1F1 b1F1", r"frames.tsv: row 3 repeats a frame of 'a'"),
    ],
)
def test_predict_refuses_tables_that_disagree(tmp_path, frames, message):
    """prepare's frames table is checked against its sequences table as predict reads it, a row at a time."""
    from workflow_lib.classify.predict import ListedFrames
    from workflow_lib.cli.errors import InputError
    from workflow_lib.io.tables import read_chunks

    (tmp_path / "sequences.tsv").write_text("sequence_id\tn_frames\na\t2\nb\t1\nempty\t0\n")
    rows = [(f"{f[0]}_chunk_{f[1]}{f[2:]}", f[0], f[1], f[2:]) for f in frames.split()]
    (tmp_path / "frames.tsv").write_text(
        "frame_id\tsequence_id\tchunk\tframe\n" + "".join("\t".join(row) + "\n" for row in rows)
    )
    listed = ListedFrames(tmp_path / "frames.tsv", tmp_path / "sequences.tsv")

    def check():
        for block in read_chunks(tmp_path / "frames.tsv", rows=1):
            listed.check(block)
        listed.finish()

    if message is None:
        check()
        assert listed.rows == len(rows)
    else:
        with pytest.raises(InputError, match=message):
            check()


def test_model_file_checksums_are_reused_only_for_unchanged_files(tmp_path):
    """Embed jobs reuse the model check's SHA-256 of a multi-GB checkpoint unless the file changed."""
    import hashlib
    import os

    from workflow_lib.io.checksums import describe, digests

    path = tmp_path / "model.pt"
    path.write_bytes(b"weights")
    known = describe([path])
    assert digests(known) == {"model.pt": hashlib.sha256(b"weights").hexdigest()}
    recorded = {str(path.absolute()): {**known[str(path.absolute())], "sha256": "from the model check"}}
    assert digests(describe([path], recorded)) == {"model.pt": "from the model check"}
    path.write_bytes(b"other weights")
    os.utime(path, ns=(1, 1))
    assert digests(describe([path], recorded)) == {"model.pt": hashlib.sha256(b"other weights").hexdigest()}


def test_the_model_check_keeps_checksums_for_the_next_run_and_catches_a_changed_file(tmp_path):
    """A second run's model check reads a checkpoint's SHA-256 from the store instead of hashing the
    file again; a file rewritten with its size and modification time kept (cp -p, rsync -t) is
    hashed again, and a store that cannot be written never fails the check."""
    import hashlib
    import json
    import os

    from workflow_lib.io.checksums import describe_kept, digests

    path, store = tmp_path / "model.pt", tmp_path / "cache" / "checksums.json"
    path.write_bytes(b"weights")
    assert digests(describe_kept([path], store)) == {"model.pt": hashlib.sha256(b"weights").hexdigest()}
    kept = json.loads(store.read_text())
    kept[str(path)]["sha256"] = "kept by the last run"  # what the next run finds, if it reads the store
    store.write_text(json.dumps(kept))
    assert digests(describe_kept([path], store)) == {"model.pt": "kept by the last run"}
    before = path.stat()
    path.write_bytes(b"WEIGHTS")  # the same size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    while path.stat().st_ctime_ns == before.st_ctime_ns:  # a coarse clock: set it again until ctime moves
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert digests(describe_kept([path], store)) == {"model.pt": hashlib.sha256(b"WEIGHTS").hexdigest()}
    assert json.loads(store.read_text())[str(path)]["sha256"] == hashlib.sha256(b"WEIGHTS").hexdigest()
    (tmp_path / "not a directory").write_text("")
    unwritable = tmp_path / "not a directory" / "checksums.json"
    assert digests(describe_kept([path], unwritable)) == {"model.pt": hashlib.sha256(b"WEIGHTS").hexdigest()}


@pytest.mark.parametrize("held", [2, 1000], ids=["spread over bucket files", "in memory"])
def test_repeated_ids_are_found_in_bounded_memory(tmp_path, monkeypatch, held):
    """prepare keeps at most HELD ID hashes in memory; repeats across spills to the buckets are found."""
    import workflow_lib.prepare.unique_ids
    from workflow_lib.prepare.unique_ids import IDHashes

    monkeypatch.setattr(workflow_lib.prepare.unique_ids, "HELD", held)
    ids = [f"read_{i}".encode() for i in range(50)]
    with IDHashes(tmp_path) as hashes:
        for batch in ([*ids[:20], b"read_3"], ids[20:], [b"read_49", b"read_3"]):
            hashes.add(batch)
        assert len(hashes.held) < held
        assert hashes.repeated() == {hash(b"read_3"), hash(b"read_49")}
    assert list(tmp_path.iterdir()) == []  # the bucket files are gone


@pytest.mark.slow
def test_a_full_disk_at_any_stage_says_so_and_loses_nothing(runs):
    """The first of `runs`, on a tmpfs with 1 MB of room past its inputs, then 2, 4, 8 ... as a
    user frees space: each run that meets the full disk, at whatever stage, fails with the line that
    names the file system and says it is full, and no traceback; the same command, given room,
    finishes with the results of a run on a roomy disk (the second of `runs`; every embed job's
    commits kept through the failures). The run builds the demo models too (one more stage that may
    meet it)."""
    first, failures, no_tmpfs, killed_run, _, _ = runs
    if no_tmpfs:
        pytest.skip(no_tmpfs)
    disk = first.parent
    stages = []
    for output in failures:
        assert f"(the file system mounted at {disk} is full)" in output, output[-3000:]
        assert "Traceback" not in output and "Segmentation fault" not in output, output[-3000:]
        stages.append(sorted(set(re.findall(r"Error in rule (\w+)", output))))
    assert len(stages) >= 2 and len(set(map(tuple, stages))) >= 2, stages  # several stages met it
    assert_same_results(first, killed_run)


@contextlib.contextmanager
def memory_cgroup(name: str, limit: int):
    """A memory cgroup (v2, else v1) of `limit` bytes for the block: its cgroup.procs. The test is
    skipped, with its reason, where none can be made (not root, no memory controller)."""
    v2 = Path("/sys/fs/cgroup")
    controllers = v2 / "cgroup.controllers"
    if controllers.exists() and "memory" in controllers.read_text().split():
        group, limit_file = v2 / name, "memory.max"
    else:
        group, limit_file = v2 / "memory" / name, "memory.limit_in_bytes"
    try:
        group.mkdir()
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup: {error}")
    try:
        if not (group / limit_file).exists():
            pytest.skip(f"{group}: no memory controller")
        (group / limit_file).write_text(str(limit))
        yield group / "cgroup.procs"
    finally:
        group.rmdir()  # its processes have ended


def test_a_job_killed_for_memory_says_so(tmp_path):
    """A job killed by the kernel's OOM killer in its memory cgroup (as under SLURM's cgroups) is
    reported as such, with its rule, its mem_mb and how to raise it: on the console and as the last
    line of its log (which a SLURM run prints), not as a bare status 137."""
    log = tmp_path / "logs" / "embed" / "esm_0-0.log"  # the rule's log: run_logged.sh names the rule from it
    log.parent.mkdir(parents=True)
    hog = "x = b'x' * (512 << 20)"  # written, so every page is charged to the cgroup
    with memory_cgroup(f"workflow-test-{os.getpid()}", 64 << 20) as procs:
        enter = f'echo $$ > {procs}; exec "$@"'  # the job's shell joins the cgroup, as a SLURM step does
        command = ["sh", "-c", enter, "sh", "bash", str(ROOT / "scripts" / "run_logged.sh"), str(log)]
        env = {**ENV, "SLURM_MEM_PER_NODE": "64"}  # as SLURM sets it for mem_mb
        result = subprocess.run([*command, sys.executable, "-c", hog], capture_output=True, text=True, env=env)
    expected = (
        "error: rule embed was killed for memory by the kernel's OOM killer; it asked for mem_mb=64: raise it in "
        "the profile (set-resources: embed: mem_mb: ...) and run again"
    )
    assert (result.returncode, result.stderr) == (128 + signal.SIGKILL, expected + "\n")
    assert log.read_text().splitlines()[-1] == expected
