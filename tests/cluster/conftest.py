"""The SLURM test cluster (scripts/testcluster.sh): used if running, started if possible.

In CI (.ci/run starts it) a missing cluster is a failure, never a skip. Its four nodes are
two partitions of two: each test file of this folder has one of its own (test_slurm.py
`debug`, n1 and n2; test_slurm_endings.py `second`, n3 and n4), so that the two files run
side by side on two pytest workers (`--dist loadfile`: a file's tests run in order on one
worker) and no test sees the other file's jobs in its queue or on its nodes.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from conftest import IN_CI, ROOT, snakemake_env, write_config

# Workers that share the cluster: one at a time looks for it and starts it (STARTING,
# held exclusive), each holds USERS shared while its tests run, and the one that started
# it stops it once it gets USERS exclusive: when the others are done.
STARTING = Path(tempfile.gettempdir()) / "dlscale-testcluster.starting"
USERS = Path(tempfile.gettempdir()) / "dlscale-testcluster.users"


def _cluster_up() -> bool:
    if not shutil.which("sinfo"):
        return False
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True)
    return proc.returncode == 0 and any(s in proc.stdout for s in (" idle", " mix", " alloc"))


@pytest.fixture(scope="session")
def slurm():
    script = ROOT / "scripts" / "testcluster.sh"
    with open(STARTING, "a") as starting, open(USERS, "a") as users:
        fcntl.flock(starting, fcntl.LOCK_EX)
        started = False
        if not _cluster_up():
            can_start = os.geteuid() == 0 and shutil.which("slurmctld") and shutil.which("munged")
            if can_start:
                proc = subprocess.run([str(script), "start"], capture_output=True, text=True)
                started = proc.returncode == 0 and _cluster_up()
                reason = proc.stderr.strip() or proc.stdout.strip()
            else:
                reason = "needs root and Debian's slurm-wlm and munge (make sysdeps)"
            if not started:
                message = (f"no SLURM test cluster: {reason}; "
                           "start it with scripts/testcluster.sh start")
                if IN_CI:
                    pytest.fail(message)
                pytest.skip(message)
        fcntl.flock(users, fcntl.LOCK_SH)
        fcntl.flock(starting, fcntl.LOCK_UN)
        yield
        if started:
            fcntl.flock(users, fcntl.LOCK_EX)  # the other workers' tests are done
            subprocess.run([str(script), "stop"], capture_output=True)


def partition_queue(partition: str, *fields: str) -> list[list[str]]:
    """squeue rows of this user's jobs in `partition`, e.g. (..., "%i", "%k") -> [[id,
    comment], ...]."""
    proc = subprocess.run(["squeue", "-h", "--me", "-p", partition, "-o", " ".join(fields)],
                          capture_output=True, text=True, check=True)
    return [line.split() for line in proc.stdout.splitlines() if line.strip()]


def end_what_outlived(job: str) -> list[str]:
    """End the processes still running in SLURM job `job` (by the SLURM_JOB_ID of their
    environment) once the job is over, and return their command lines. Tracked by parent
    process (proctrack/linuxproc, where the machine has no writable cgroup freezer), a
    process whose parent died first escapes: a job step's Snakemake was once seen running
    on, its parent init, after the requeue test. Tracked by cgroup, none should."""
    import psutil

    left = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.environ().get("SLURM_JOB_ID") == job:
                left.append(" ".join(proc.info["cmdline"] or [])[:200])
                proc.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return left


@pytest.fixture(autouse=True)
def nothing_left_on_the_partition(request, tmp_path, slurm):
    """What a test of this folder started is ended before the next test of its file: the
    Snakemake and trainings it left running (processes in its tmp_path) and the jobs left
    in its file's partition (PARTITION). A test that failed mid-study once left its point's
    training suspended, and the job held both nodes until its 10-minute time limit while
    the next test's probe waited for them whole (a CI run: that test 808 s, not 210).
    After the cluster fixture: where there is no cluster, the test is skipped first."""
    import psutil

    yield
    partition = getattr(request.module, "PARTITION", None)
    if partition is None:
        return
    for proc in psutil.process_iter(["cwd"]):
        cwd = Path(proc.info["cwd"] or "/")
        if cwd == tmp_path or tmp_path in cwd.parents:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
    jobs = [job for job, in partition_queue(partition, "%i")]
    if jobs:
        subprocess.run(["scancel", *jobs], capture_output=True)
        deadline = time.time() + 120
        while partition_queue(partition, "%i") and time.time() < deadline:
            time.sleep(0.5)
        for job in jobs:
            end_what_outlived(job)


def partition_profile(folder: Path, partition: str) -> list[str]:
    """profiles/slurm with its partition's EDIT line filled in, as a site's user does
    (copied into `folder`): the Snakemake arguments that use it."""
    text = (ROOT / "profiles/slurm/config.v8+.yaml").read_text()
    edited = text.replace('  slurm_partition: ""\n', f"  slurm_partition: {partition}\n")
    assert edited != text, "profiles/slurm no longer has the partition's EDIT line"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.v8+.yaml").write_text(edited)
    return ["--profile", str(folder)]


def sweep_config(path: Path, archive: Path, **sections: str) -> Path:
    """tests/configs/sweep.yaml on the generated archive, with `sections` (YAML) replaced."""
    config = yaml.safe_load((ROOT / "tests" / "configs" / "sweep.yaml").read_text())
    config["data"]["source"] = str(archive)
    config.update({k: yaml.safe_load(v) for k, v in sections.items()})
    return write_config(path, yaml.safe_dump(config))


@pytest.fixture(scope="session")
def archive(tmp_path_factory):
    import make_synthetic_cifar

    return make_synthetic_cifar.write_archive(
        tmp_path_factory.mktemp("slurmdata") / "cifar.tar.gz", "python", 400, 100, 5)


def slow_status_queries(folder: Path) -> tuple[Path, dict]:
    """A `sacct` first on PATH that answers the plugin's status queries (the real sacct)
    after 8 s, as a busy cluster's accounting does, and touches a file while it waits:
    (that file, the environment that puts it first)."""
    folder.mkdir()
    querying = folder / "querying"
    sacct = folder / "sacct"
    sacct.write_text(f"""#!/bin/bash
case " $* " in *JobIdRaw*) touch {shlex.quote(str(querying))}; sleep 8;; esac
exec {shlex.quote(shutil.which("sacct"))} "$@"
""")
    sacct.chmod(0o755)
    return querying, {"PATH": f"{folder}:{snakemake_env()['PATH']}"}


def sacct(jobs: list[str], *fields: str) -> dict[str, list[str]]:
    """SLURM's accounting of `jobs` (sacct -X): each job's `fields`, by its id."""
    proc = subprocess.run(["sacct", "-n", "-X", "-P", "-o", ",".join(["JobID", *fields]),
                           "-j", ",".join(jobs)], capture_output=True, text=True, check=True)
    rows = (line.split("|") for line in proc.stdout.splitlines())
    return {row[0]: row[1:] for row in rows if len(row) == len(fields) + 1}


def accounted_states(jobs: list[str], wait_s: float = 60) -> list[str]:
    """SLURM's accounting of the jobs' states, each its first word, in the jobs' order,
    once none is pending or running (or after `wait_s`)."""
    deadline = time.time() + wait_s
    while True:
        states = sacct(jobs, "State")
        found = [(states.get(job, [""])[0] or "?").split()[0] for job in jobs]
        if time.time() > deadline or not {"?", "PENDING", "RUNNING"} & set(found):
            return found
        time.sleep(1)


def accounted_fields(job: str, *fields: str, wait_s: float = 60) -> list[str]:
    """SLURM's accounting of one job's `fields` (sacct -o), once it has them all."""
    deadline = time.time() + wait_s
    while True:
        found = sacct([job], *fields).get(job, [])
        if (found and all(found)) or time.time() > deadline:
            return found
        time.sleep(1)


def node_cpus(node: str) -> int:
    """The node's CPUs, as SLURM's controller has them (scontrol: CPUTot)."""
    proc = subprocess.run(["scontrol", "show", "node", node], capture_output=True,
                          text=True, check=True)
    return int(re.search(r"\bCPUTot=(\d+)", proc.stdout).group(1))
