"""scripts/testcluster.sh leaves a machine as it found it: stop removes the SLURM
configuration and the /etc/hosts lines that start wrote, and nothing else.

The script runs for real, with its configuration folder and hosts file pointed at a
temporary folder (DLSCALE_SLURM_ETC, DLSCALE_HOSTS_FILE), so the test cluster that CI
runs beside this test is not touched. That a dry run after `stop` costs what it cost
before `start` is checked by .ci/run around the whole suite (it needs the real
/etc/slurm, which the cluster tests are using here).
"""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import ROOT

SCRIPT = ROOT / "scripts" / "testcluster.sh"
USERS_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n10.0.0.7 login1 # site\n"


def run(tmp_path, *args):
    env = dict(os.environ, DLSCALE_CLUSTER_DIR=str(tmp_path / "state"),
               DLSCALE_SLURM_ETC=str(tmp_path / "etc"),
               DLSCALE_HOSTS_FILE=str(tmp_path / "hosts"),
               DLSCALE_CGROUPS=str(tmp_path / "cgroup"))
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="the fake GPUs are made with mknod (root)")
def test_stop_removes_what_start_wrote_and_nothing_else(tmp_path):
    (tmp_path / "hosts").write_text(USERS_HOSTS)
    done = run(tmp_path, "config")
    assert done.returncode == 0, done.stderr
    conf = (tmp_path / "etc" / "slurm.conf").read_text()
    assert conf.startswith("# dlscale test cluster")
    # two partitions of two nodes, one per cluster test file (tests/cluster)
    assert [line.split()[:3] for line in conf.splitlines()
            if line.startswith("PartitionName=")] == [
        ["PartitionName=debug", "Nodes=n1,n2", "Default=YES"],
        ["PartitionName=second", "Nodes=n3,n4", "MaxTime=INFINITE"]]
    hosts = (tmp_path / "hosts").read_text()
    assert hosts.startswith(USERS_HOSTS)
    for node in ("n1", "n2", "n3", "n4"):
        assert f"127.0.0.1 {node} # dlscale test cluster" in hosts
    # writing again adds no second line per node
    assert run(tmp_path, "config").returncode == 0
    assert (tmp_path / "hosts").read_text() == hosts

    done = run(tmp_path, "stop")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "hosts").read_text() == USERS_HOSTS
    assert sorted(p.name for p in (tmp_path / "etc").iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="the fake GPUs are made with mknod (root)")
def test_processes_are_tracked_by_cgroup_where_the_freezer_is_writable(tmp_path):
    (tmp_path / "hosts").write_text(USERS_HOSTS)
    assert run(tmp_path, "config").returncode == 0
    assert "\nProctrackType=proctrack/linuxproc\n" in (tmp_path / "etc/slurm.conf").read_text()
    (tmp_path / "cgroup" / "freezer").mkdir(parents=True)
    assert run(tmp_path, "config").returncode == 0
    assert "\nProctrackType=proctrack/cgroup\n" in (tmp_path / "etc/slurm.conf").read_text()
    cgroup = (tmp_path / "etc/cgroup.conf").read_text().splitlines()
    assert cgroup[0] == "# dlscale test cluster" and "CgroupPlugin=cgroup/v1" in cgroup
    assert f"CgroupMountpoint={tmp_path / 'cgroup'}" in cgroup
    # what slurmd makes there (here plain folders), removed by stop; the rest is kept
    (tmp_path / "cgroup/freezer/slurm_n1/uid_0/job_3").mkdir(parents=True)
    (tmp_path / "cgroup/freezer/site").mkdir()
    assert run(tmp_path, "stop").returncode == 0
    assert sorted(p.name for p in (tmp_path / "cgroup/freezer").iterdir()) == ["site"]


def test_stop_keeps_a_configuration_it_did_not_write(tmp_path):
    (tmp_path / "etc").mkdir()
    site = "ClusterName=site\nSlurmctldHost=head\n"
    (tmp_path / "etc" / "slurm.conf").write_text(site)
    (tmp_path / "hosts").write_text(USERS_HOSTS)
    done = run(tmp_path, "config")
    assert done.returncode == 1
    assert "was not written by this script" in done.stderr
    done = run(tmp_path, "stop")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "etc" / "slurm.conf").read_text() == site
    assert (tmp_path / "hosts").read_text() == USERS_HOSTS


def test_env_sets_nothing_for_slurms_default_place():
    # a SLURM_CONF naming a file that stop removed makes every SLURM command wait a minute
    done = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith("DLSCALE_")})
    assert done.returncode == 0
    assert "export" not in done.stdout


def ip_state() -> dict[str, str]:
    """What the machine's network looks like from its own namespace."""
    return {name: subprocess.run(["ip", *args], capture_output=True, text=True,
                                 check=True).stdout
            for name, args in (("addr", ["-br", "addr"]),
                               ("route", ["route", "show", "table", "all"]),
                               ("netns", ["netns", "list"]), ("link", ["-br", "link"]))}


def run_net(tmp_path, *args, **env):
    env = dict(os.environ, DLSCALE_CLUSTER_DIR=str(tmp_path / "state"),
               DLSCALE_NETNS_PREFIX=f"dlt{os.getpid() % 10000}", **env)
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_the_nodes_network_is_removed_whole_and_never_overlaps_the_machines(tmp_path):
    """The nodes' namespaces, veth pairs and bridge: a subnet that no address or route of
    this machine uses (the test cluster's own network, if up, among them), and after
    net-down `ip addr`, `ip route`, `ip netns` and the links are as net-up found them."""
    before = ip_state()
    done = run_net(tmp_path, "net-up")
    assert done.returncode == 0, done.stderr
    try:
        base = (tmp_path / "state/net.env").read_text().strip().removeprefix("SUBNET=")
        assert base.startswith("10.213.") and base.endswith(".0")
        assert f"{base.removesuffix('.0')}.1/24" not in before["addr"]
        prefix = f"dlt{os.getpid() % 10000}"
        up = ip_state()
        assert f"{prefix}-n1" in up["netns"] and f"{prefix}-n2" in up["netns"]
        # the machine's namespace gets the bridge's one address and its subnet's route
        added = set(up["addr"].split()) - set(before["addr"].split())
        assert f"{base.removesuffix('.0')}.1/24" in added
        assert [line.strip() for line in up["route"].splitlines()
                if line not in before["route"]
                and "table local" not in line] == [
            f"{base}/24 dev {prefix}-br proto kernel scope link src {base.removesuffix('.0')}.1"]
        # node 1 reaches node 2 through the bridge, inside their namespaces
        reach = subprocess.run(
            ["nsenter", f"--net=/run/netns/{prefix}-n1", "ip", "route", "get",
             f"{base.removesuffix('.0')}.12"], capture_output=True, text=True)
        assert reach.returncode == 0 and "dev eth0" in reach.stdout, reach.stderr
    finally:
        done = run_net(tmp_path, "net-down")
    assert done.returncode == 0, done.stderr
    assert ip_state() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_a_subnet_that_overlaps_the_machines_own_is_refused_before_anything_is_added(tmp_path):
    route = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    taken = next(word for line in route.splitlines() for word in line.split()[:1]
                 if "/" in word)  # the subnet of this machine's own interface
    before = ip_state()
    done = run_net(tmp_path, "net-up", DLSCALE_CLUSTER_SUBNET=taken)
    assert done.returncode == 1
    assert f"subnet {taken} overlaps" in done.stderr and "expected one that no" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert ip_state() == before
    assert not (tmp_path / "state/net.env").exists()


def test_favour_moves_the_nodes_daemons_into_a_heavier_cpu_group_and_back(tmp_path):
    """`favour on` puts each node's slurmd (so every job it starts after) into a cpu
    cgroup of more shares than any other session's 1024, `favour off` back into the root
    one; where cgroup v1's cpu controller is not writable it says so in one line. Here the
    cgroup folder is a plain one, so each write leaves the last node's pid. Only the test
    bed's pair (n1, n2) is favoured: the other partition's jobs, a cluster test file of
    their own beside it, share the CPU with the rest."""
    state = tmp_path / "state"
    state.mkdir()
    done = run(tmp_path, "favour", "on")
    assert done.returncode == 1 and done.stderr.strip().endswith(
        f"favour needs cgroup v1's cpu controller writable at {tmp_path / 'cgroup/cpu'}")
    (tmp_path / "cgroup/cpu").mkdir(parents=True)
    assert "no slurmd is running" in run(tmp_path, "favour", "on").stderr
    (state / "slurmd-n1.pid").write_text("4101\n")
    (state / "slurmd-n2.pid").write_text("4102\n")
    (state / "slurmd-n3.pid").write_text("4103\n")
    done = run(tmp_path, "favour", "on")
    assert done.returncode == 0, done.stderr
    group = tmp_path / "cgroup/cpu/dlscale-testcluster"
    assert int((group / "cpu.shares").read_text()) > 1024
    assert (group / "cgroup.procs").read_text() == "4102\n"
    assert run(tmp_path, "favour", "off").returncode == 0
    assert (tmp_path / "cgroup/cpu/cgroup.procs").read_text() == "4102\n"
    assert run(tmp_path, "favour", "maybe").stderr.strip().endswith(
        "usage: " + str(SCRIPT) + " favour on|off (the nodes' jobs first on the CPU, or shared)")
