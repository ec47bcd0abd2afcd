"""SLURM variables to TF_CONFIG, without a cluster (the cluster tests run it for real)."""

import shutil
import subprocess

import pytest
from conftest import IN_CI

from dlscale.core.errors import RunError
from dlscale.core.vocabulary import THREADS_ENV
from dlscale.jobs.slurm import expand_tasks_per_node, hostnames, parse_hostlist
from dlscale.launch.workers import threads_env
from dlscale.train.cluster import lonely_rank, slurm_tf_config

HOSTLISTS = {
    "gpu[01-02,05],login1": ["gpu01", "gpu02", "gpu05", "login1"],
    "n1": ["n1"],
    "n[1-2]-ib": ["n1-ib", "n2-ib"],
    "r[1-2]n[01-02]": ["r1n01", "r1n02", "r2n01", "r2n02"],
    "a[8-10],b-[1,3]-x": ["a8", "a9", "a10", "b-1-x", "b-3-x"],
}


@pytest.mark.parametrize("hostlist, hosts", HOSTLISTS.items())
def test_hostlists_without_scontrol(hostlist, hosts, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol: the fallback parser answers
    assert hostnames(hostlist) == hosts


def scontrol_answers() -> bool:
    return bool(shutil.which("scontrol")) and subprocess.run(
        ["scontrol", "show", "hostnames", "n1"], capture_output=True).returncode == 0


@pytest.mark.skipif(not scontrol_answers() and not IN_CI,
                    reason="no working scontrol (slurm-wlm and a slurm.conf)")
# SLURM 22.05's scontrol answers "Invalid hostlist" (exit status 0, no names) for text
# after a range, such as n[1-2]-ib; the fallback expands those as names with a suffix
@pytest.mark.parametrize("hostlist", ["gpu[01-02,05],login1", "n1", "r[1-2]n[01-02]"])
def test_the_fallback_agrees_with_scontrol(hostlist):
    real = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True,
                          text=True, check=True)
    assert parse_hostlist(hostlist) == real.stdout.split()


def test_a_broken_hostlist_is_named():
    with pytest.raises(RunError, match=r"unbalanced brackets"):
        parse_hostlist("n[1-2")


def test_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]


def test_every_task_gets_its_own_port_even_on_a_shared_host():
    env = {"SLURM_STEP_NODELIST": "n[1-2]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
           "SLURM_PROCID": "3", "SLURM_JOB_ID": "17"}
    config = slurm_tf_config(env)
    assert config["task"] == {"type": "worker", "index": 3}
    assert config["cluster"]["worker"] == ["n1:12850", "n1:12851", "n2:12852", "n2:12853"]


@pytest.mark.parametrize("launcher, expected", [
    ("mpirun --allow-run-as-root", ["mpirun", "--allow-run-as-root", "-np", "4"]),
    ("/opt/mpi/bin/mpiexec", ["/opt/mpi/bin/mpiexec", "-np", "4"]),
    ("srun --mpi=pmix", ["srun", "--mpi=pmix", "--ntasks=4", "--kill-on-bad-exit=1",
                         "--ntasks-per-node=2"]),
    ("my-launcher 'a b'", ["my-launcher", "a b"]),  # another launcher: used as written
])
def test_horovod_across_nodes_is_started_by_the_sites_launcher_with_its_ranks(launcher,
                                                                             expected):
    from dlscale.launch.workers import horovod_command

    command = ["/venv/bin/python", "train.py"]
    assert horovod_command(4, 2, command, launcher, tasks_per_node=2) == expected + command


def test_horovod_across_nodes_without_a_launcher_is_refused():
    from dlscale.launch.workers import horovod_command

    with pytest.raises(SystemExit, match="horovod.mpi_launcher"):
        horovod_command(4, 2, ["python"], None)


@pytest.mark.parametrize("size, env, alone", [
    (1, {"OMPI_COMM_WORLD_SIZE": "2"}, True), (2, {"OMPI_COMM_WORLD_SIZE": "2"}, False),
    (1, {"PMI_SIZE": "4"}, True), (1, {}, False), (1, {"OMPI_COMM_WORLD_SIZE": ""}, False)])
def test_a_rank_that_sees_fewer_ranks_than_its_launcher_started_is_named(size, env, alone):
    assert (lonely_rank(size, env) is not None) == alone


@pytest.mark.parametrize(("granted", "tasks", "env", "told"), [
    (2, 2, {}, {THREADS_ENV: "1"}),
    (4, 2, {}, {THREADS_ENV: "2"}),
    (1, 2, {}, {THREADS_ENV: "1"}),  # fewer than its tasks: one each, never 0
    (2, 1, {}, {THREADS_ENV: "2"}),
    (2, 2, {"SLURM_JOB_ID": "7"}, {}),  # SLURM_CPUS_PER_TASK says it in a job
    (None, 2, {}, {}),
])
def test_each_worker_is_told_its_share_of_the_cores_snakemake_granted(granted, tasks, env,
                                                                       told):
    """Outside SLURM a point's workers share the cores Snakemake granted it (launch.py
    --threads): torch's thread count follows it, not the host's cores over the workers."""
    assert threads_env(granted, tasks, env) == told
