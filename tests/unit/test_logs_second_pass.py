"""Logs without a pattern, second pass (issue 99): a one-epoch run timed by the run total
every rank prints (`Train samples N time Ts rate R samples/s`), under srun -l on two nodes
and under torchrun without prefixes; timed from its total, not from the job's start
(issue 101, item 5). Captures of own_train.py --style total (tests/data/own-scripts)."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from dlscale.logparse.reader import parse_file_runs

DATA = ROOT / "tests" / "data" / "own-scripts"
TOTAL = r"Train samples \d+ time ([\d.]+)s rate ([\d.]+) samples/s"


@pytest.mark.parametrize("name, gpus", [("total_srun.out", 2), ("total_torchrun.out", None)])
def test_a_one_epoch_run_is_timed_by_the_total_every_rank_prints(name, gpus):
    path = DATA / name
    totals = re.findall(TOTAL, path.read_text())
    [run] = parse_file_runs(str(path))  # ("no finished epoch found" before)
    [row] = run.rows()
    assert row["epoch"] == 1  # its `Epoch 0` began it
    assert row["seconds"] == max(float(t) for t, _rate in totals)  # the slowest rank's
    assert run.settings.get("gpus") == gpus  # srun -l's two tasks
    assert "the run's total" in run.facts["epoch_time_from"]
    if gpus is None:  # both ranks' lines unprefixed: one run, the copies counted
        assert run.facts["copies"] == 2


def test_the_set_up_before_the_epoch_is_not_the_epochs_time():
    """`Starting run` comes seconds before `Epoch 0`: the epoch is the total's time, not
    the time from the first line (101, item 5: start-up counted)."""
    path = DATA / "total_srun.out"
    stamps = re.findall(r"(\d\d):(\d\d):(\d\d),(\d+) INFO (Starting run|Train samples)",
                        path.read_text())
    seconds = {w: int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000
               for h, m, s, ms, w in stamps}
    [run] = parse_file_runs(str(path))
    since_start = seconds["Train samples"] - seconds["Starting run"]
    assert run.rows()[0]["seconds"] < since_start - 3  # its 4 s of set-up left out


def test_a_restarted_epoch_is_timed_from_its_last_start_and_the_restarts_said():
    """restarted.out: three attempts killed inside epoch 0, then one that trains 2 epochs,
    appended to one file: epoch 1 is the last attempt's (20 s from the first attempt's
    start before: the restarts' gaps counted as training)."""
    path = DATA / "restarted.out"
    text = path.read_text()
    stamp = r"(\d\d):(\d\d):(\d\d),(\d+) INFO "

    def at(h, m, s, ms):
        return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000

    starts = [at(*g) for g in re.findall(stamp + "Epoch 0", text)]
    second = [at(*g) for g in re.findall(stamp + "Epoch 1", text)]
    [run] = parse_file_runs(str(path))
    rows = run.rows()
    assert rows[0]["seconds"] == pytest.approx(second[0] - starts[-1])
    assert run.facts["restarts"] == len(starts) - 1
    assert any("restart(s)" in w for w in run.warnings)


def test_a_job_scripts_echo_of_its_cluster_and_node_list_is_read():
    """banner_2nodes.out: the job script echoes SLURM_CLUSTER_NAME, SLURM_JOB_NODELIST and
    a banner's `Nodes : 2`, then srun -l runs one process a node: 2 GPUs on 2 nodes (1 node
    before), the cluster and node list kept as facts."""
    path = DATA / "banner_2nodes.out"
    text = path.read_text()
    [run] = parse_file_runs(str(path))
    assert (run.settings["gpus"], run.settings["nodes"]) == (2, 2)
    assert run.facts["slurm_cluster"] == re.search(r"SLURM_CLUSTER_NAME = (\S+)", text)[1]
    assert run.facts["nodelist"] == re.search(r"SLURM_JOB_NODELIST = (\S+)", text)[1]


@pytest.mark.parametrize("hosts, count", [("gpu[003,009]", 2), ("n[1-4],m1", 5), ("n1", 1),
                                          ("a[1-3,7],b[01-02]", 6)])
def test_a_host_list_is_counted_as_slurm_expands_it(hosts, count):
    from dlscale.logparse.formats.launch import hostlist_count

    assert hostlist_count(hosts) == count


def test_two_independent_runs_interleaved_in_one_file_are_two_runs():
    """interleaved.out: two 2-process runs (batch 32 and 64) started side by side into one
    file; their `Epoch k took:` lines interleave (1, 1, 2, 3, 2, 3). Read before as one run
    of 3 epochs (epoch 1 the slower of both) and a second of 2."""
    path = DATA / "interleaved.out"
    lines = re.findall(r"Epoch (\d) took: ([\d.]+)s loss=([\d.]+)", path.read_text())
    runs = parse_file_runs(str(path))
    assert [len(run.rows()) for run in runs] == [3, 3]
    read = sorted((r["epoch"], r["seconds"], r["loss"]) for run in runs for r in run.rows())
    assert read == sorted((int(e), float(s), float(loss)) for e, s, loss in lines)
    for run in runs:  # each run's losses fall epoch by epoch: one run's sequence
        losses = [r["loss"] for r in run.rows()]
        assert losses == sorted(losses, reverse=True)
    assert any("interleave" in w for w in runs[0].warnings)


def test_the_slurm_cluster_column_is_not_run_jsons_worker_cluster():
    """run.json's `cluster` is a multi-worker run's TF_CONFIG workers (host:port each): a
    column read from it split 'SimpleCNN multiworker' into a series per worker list (the
    cluster tests). The SLURM cluster is `slurm_cluster`."""
    from dlscale.core.columns import RECORD_KEYS

    assert RECORD_KEYS.get("slurm_cluster") == "slurm_cluster"
    assert "cluster" not in RECORD_KEYS.values()


HOROVOD_TOTAL = r"Total img/sec on (\d+) CPU\(s\): ([\d.]+)"


def test_a_benchmark_total_every_rank_prints_is_one_run_its_copies_noted():
    # own_train.py --style horovod under torchrun without --tee: both ranks' Horovod
    # benchmark lines unprefixed, each rank's own total (read as 2 runs before)
    path = DATA / "horovod_copies.out"
    totals = re.findall(HOROVOD_TOTAL, path.read_text())
    [run] = parse_file_runs(str(path))
    assert len(totals) == 2 and run.rate == float(totals[0][1])
    assert run.settings["gpus"] == int(totals[0][0]) and run.facts["summary_copies"] == 2
    assert any(f"({float(totals[1][1]):g} images/s) differs" in w for w in run.warnings)


def test_a_second_benchmark_run_after_its_own_settings_is_not_a_copy():
    # a job that ran the benchmark on 1 and then 2 processes: two runs, the second's
    # total printed by both of its ranks (one of them joined to the other's line)
    path = DATA / "horovod_twice.out"
    totals = re.findall(HOROVOD_TOTAL, path.read_text())
    runs = parse_file_runs(str(path))
    assert [(r.settings["gpus"], r.rate) for r in runs] == [
        (int(totals[0][0]), float(totals[0][1])), (int(totals[1][0]), float(totals[1][1]))]
    assert "summary_copies" not in runs[0].facts and runs[1].facts["summary_copies"] == 2
