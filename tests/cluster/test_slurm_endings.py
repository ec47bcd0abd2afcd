"""How a point's SLURM job ends, through the SLURM profile (fake GPU devices; this file's
jobs go to the test cluster's partition `second`, nodes n3 and n4, so that it runs beside
test_slurm.py, which has `debug`): a timeout and a failure, a cancelled point and a
cancelled probe, your own script's tasks, a command that leaves children or never ends,
a Snakemake restarted while its point trains, and a point past its job's memory (the
cluster's task/cgroup holds a job to its --mem, as sites' ConstrainRAMSpace does)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pandas as pd
import pytest
from conftest import (
    IN_CI,
    ROOT,
    TABLES,
    needs_torch,
    run_snakemake,
    start_snakemake,
    training_processes,
    write_config,
)

from cluster.conftest import (
    accounted_states,
    partition_profile,
    partition_queue,
    slow_status_queries,
    sweep_config,
)

# `make test` runs pytest with --dist loadfile: the tests of this file run in order on one
# worker, beside test_slurm.py on another (cluster/conftest.py)
pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("slurm")]
PARTITION = "second"


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> list[str]:
    """profiles/slurm for this file's partition, its EDIT line filled in."""
    return partition_profile(tmp_path_factory.mktemp("profile") / "slurm", PARTITION)


def queue(*fields: str) -> list[list[str]]:
    """squeue rows of this user's jobs in this file's partition."""
    return partition_queue(PARTITION, *fields)


def test_cancelled_point_is_reported_others_finish_and_rerun_resumes_only_it(profile, tmp_path,
                                                                             archive):
    config = sweep_config(tmp_path / "c.yaml", archive,
                          sweep="{models: [SimpleCNN], gpus: [1, 2]}",
                          training="{epochs: 6, batch_per_gpu: 2, device: cpu}")
    first = start_snakemake(tmp_path, *profile, f"--configfile={config}")
    live = tmp_path / "results/runs/SimpleCNN/gpus2/rep1/state/epochs.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline and first.poll() is None:
        if live.exists() and live.read_text().count("\n") >= 2:
            break
        time.sleep(0.1)
    victims = [job for job, comment in queue("%i", "%k") if "gpus2" in comment]
    assert len(victims) == 1, queue("%i", "%k")
    subprocess.run(["scancel", victims[0]], check=True)
    output, _ = first.communicate(timeout=900)
    assert first.returncode != 0
    assert "Error in rule train" in output and "gpus2" in output.split("Error in rule train")[1]
    done = tmp_path / "results/runs/SimpleCNN/gpus1/rep1/run.json"
    assert json.loads(done.read_text())["status"] == "completed"
    assert not (tmp_path / "results/runs/SimpleCNN/gpus2/rep1/run.json").exists()
    kept = done.stat().st_mtime_ns

    target = "results/runs/SimpleCNN/gpus2/rep1/run.json"
    rerun = run_snakemake(tmp_path, *profile, f"--configfile={config}", target)
    stats = rerun.stdout.split("Job stats:")[1].split("total")[0]
    assert [line.split() for line in stats.splitlines() if line.startswith("train")] == [
        ["train", "1"]]
    assert done.stat().st_mtime_ns == kept
    run = json.loads((tmp_path / target).read_text())
    assert run["status"] == "completed" and run["resumed_at_epoch"] >= 2
    records = [json.loads(x) for x in (tmp_path / target).with_name("epochs.jsonl").read_text()
               .splitlines()]
    assert [r["epoch"] for r in records] == [1, 2, 3, 4, 5, 6]
    # the cancelled attempt's window (epoch 1) is kept by the resumed one, which times
    # the all-reduce after training: a breakdown for the point (issue 78, 1)
    breakdown = json.loads((tmp_path / target).with_name("breakdown.json").read_text())
    assert breakdown["summary"]["steps"] > 0, breakdown.get("notes")
    assert len(breakdown["collective"]["seconds"]) > 1, breakdown["collective"]


def test_a_probe_that_slurm_cancels_leaves_every_table_and_the_first_page(profile, tmp_path,
                                                                           archive):
    """The network's probe ended by SLURM (scancel here; its time limit or a node's failure
    alike) failed the study: its job wrote nothing, Snakemake deleted its output, and
    breakdown.csv, prediction.csv and the first page were not made. The rule's retry
    records the job's state as the probe's JSON; the tables and the page are made, and
    prediction.csv's note names the failed probe."""
    config = sweep_config(tmp_path / "c.yaml", archive,
                          sweep="{models: [MLP], gpus: [2], nodes: [1, 2], "
                                "strategy: [multiworker]}",
                          training="{epochs: 2, batch_per_gpu: 16, device: cpu}",
                          analysis="{accuracy_tolerance: 1.0, breakdown: 2}")
    first = start_snakemake(tmp_path, *profile, f"--configfile={config}", TABLES,
                            "results/tables/prediction.csv", "results/report/first-page.rst",
                            env={"DLSCALE_TEST_SLOW_PROBE_S": "600"})
    started = tmp_path / "logs/probe_network/multiworker/nodes2.job"
    deadline = time.time() + 600
    victims = []
    while time.time() < deadline and first.poll() is None and not victims:
        if started.exists() and started.read_text().strip():
            victims = [job for job, comment in queue("%i", "%k") if "probe_network" in comment]
        time.sleep(0.2)
    assert len(victims) == 1, (queue("%i", "%k"), first.poll())
    time.sleep(2)  # its workers are up, sleeping before they time anything
    subprocess.run(["scancel", victims[0]], check=True)
    output, _ = first.communicate(timeout=900)
    assert first.returncode == 0, output[-4000:]
    assert "Error in rule probe_network" in output  # the first attempt, as SLURM ended it
    probe = json.loads((tmp_path / "results/network/multiworker/nodes2.json").read_text())
    assert f"its SLURM job {victims[0]} ended CANCELLED" in probe["error"], probe
    prediction = pd.read_csv(tmp_path / "results/tables/prediction.csv")
    assert prediction["note"].str.contains(
        "the network's probe over 2 nodes failed: the probe failed (its SLURM job",
        regex=False).all(), prediction["note"].tolist()
    assert (tmp_path / "results/tables/breakdown.csv").exists()
    page = (tmp_path / "results/report/first-page.rst").read_text()
    assert "How this study scales" in page


def test_a_sweep_with_a_timeout_and_a_failure_reports_both_and_reruns_only_them(profile, tmp_path):
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'slurm-failures.yaml'}"
    first = start_snakemake(tmp_path, *profile, config)
    # SimpleCNN's training is frozen (SIGSTOP) as soon as it starts: its first epoch never
    # ends, as an epoch longer than the time left would not; launch.py's watchdog must
    # stop it 20 s before the 1-minute limit, so that the job ends on its own
    frozen, deadline = [], time.time() + 600
    while not frozen and first.poll() is None and time.time() < deadline:
        frozen = training_processes(tmp_path, "SimpleCNN/gpus1/rep1")
        time.sleep(0.05)
    for proc in frozen:
        proc.suspend()
    output, _ = first.communicate(timeout=900)
    assert frozen, output[-8000:]
    assert first.returncode != 0  # check_points: two points did not complete
    assert (tmp_path / "results/tables/runs.csv").exists(), output[-8000:]
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("run")
    assert runs["status"].to_dict() == {"MLP/gpus1/rep1": "completed",
                                        "MobileNetV3Small/gpus1/rep1": "failed",
                                        "SimpleCNN/gpus1/rep1": "timeout"}
    failed = pd.read_csv(tmp_path / "results/tables/failed.csv").set_index("run")
    assert "loss became NaN" in failed.loc["MobileNetV3Small/gpus1/rep1", "problem"]
    assert "20 s before the job's time limit (inside epoch 1)" in failed.loc[
        "SimpleCNN/gpus1/rep1", "problem"]
    assert list(pd.read_csv(tmp_path / "results/tables/scaling.csv")["series"]) == ["MLP"]
    assert (tmp_path / "results/plots/overview.png").stat().st_size > 10_000
    timed = json.loads((tmp_path / "results/runs/SimpleCNN/gpus1/rep1/run.json").read_text())
    assert "SLURM_JOB_ID" in timed["env"] and timed["epochs_completed"] == 0
    run_snakemake(tmp_path, *profile, config, "--report", str(tmp_path / "report.html"))
    assert "failed.csv" in (tmp_path / "report.html").read_text(errors="replace")

    # the same command again: it plans the two failed points and nothing else; watched
    # until both are submitted (the timed-out one with twice the time), then interrupted
    # while Snakemake asks SLURM for their states, which cancels the jobs (the full rerun
    # would only repeat the first run's outcomes; a failed point's second attempt is
    # followed to its end by the local failures test)
    done = tmp_path / "results/runs/MLP/gpus1/rep1/run.json"
    kept = done.stat().st_mtime_ns
    nan_attempts = tmp_path / "results/runs/MobileNetV3Small/gpus1/rep1/attempts.jsonl"
    querying, slow = slow_status_queries(tmp_path / "slow-sacct")
    second = start_snakemake(tmp_path, *profile, config, env=slow)
    limits, jobs, deadline = {}, {}, time.time() + 600
    while time.time() < deadline and second.poll() is None:
        for job, limit, comment in queue("%i", "%l", "%k"):
            limits[comment], jobs[comment] = limit, job
        if len([k for k in limits if k.startswith("rule_train_")]) >= 2:
            break
        time.sleep(0.2)
    querying.unlink(missing_ok=True)  # the next status query asks about both jobs
    while time.time() < deadline and second.poll() is None and not querying.exists():
        time.sleep(0.05)
    second.send_signal(signal.SIGINT)  # Snakemake cancels its SLURM jobs on the way out
    output, _ = second.communicate(timeout=300)
    assert querying.exists(), output[-8000:]
    # both jobs cancelled, though the interrupt came while their states were asked for
    # (the plugin had them out of its active list: dlscale.plan.pluginfix)
    train_jobs = [job for comment, job in jobs.items() if comment.startswith("rule_train_")]
    assert accounted_states(train_jobs) == ["CANCELLED", "CANCELLED"], output[-8000:]
    stats = output.split("Job stats:")[1].split("total")[0]
    assert [line.split() for line in stats.splitlines() if line.startswith("train")] == [
        ["train", "2"]]
    assert "point SimpleCNN/gpus1/rep1 ended timeout" in output
    assert done.stat().st_mtime_ns == kept
    # exactly the two failed points were submitted; the timed-out one with twice the time
    assert {k: v for k, v in limits.items() if k.startswith("rule_train_")} == {
        "rule_train_wildcards_MobileNetV3Small_gpus1_rep1": "10:00",
        "rule_train_wildcards_SimpleCNN_gpus1_rep1": "2:00"}
    attempts = [json.loads(line) for line in nan_attempts.read_text().splitlines()]
    assert [(a["attempt"], a["status"]) for a in attempts[:1]] == [(1, "failed")]
    assert queue("%i") == []


def test_your_own_script_runs_one_task_per_gpu_through_slurm(profile, tmp_path):
    """A sweep.commands entry whose command starts itself with `srun --label` in a job
    of one task per GPU: each task's lines are read as its own stream, and the points get
    the tables of dlscale's own."""
    import shutil

    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'slurm-command.yaml'}"
    run_snakemake(tmp_path, *profile, config)
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["gpus"], runs["status"], runs["streams"])) == [
        (1, "completed", 1), (2, "completed", 2)]
    run = json.loads((tmp_path / "results/runs/my_train/gpus2/rep1/run.json").read_text())
    assert run["env"]["SLURM_NTASKS"] == "2" and run["env"]["SLURM_JOB_ID"]
    log = (tmp_path / "results/runs/my_train/gpus2/rep1/train.log").read_text()
    assert "\n0: Epoch 2/2" in log and "\n1: Epoch 2/2" in log
    assert (tmp_path / "results/plots/speedup.png").exists()


def test_a_command_that_leaves_children_or_never_ends_ends_whole_through_slurm(profile, tmp_path):
    """Through the SLURM profile: a command whose background child holds its output open
    ends when the command exits (the child with it), and one that hangs deaf to SIGTERM
    is stopped by the watchdog before the job's limit, as a `timeout` row with its
    finished epoch; no process of either is left on the nodes."""
    config = write_config(tmp_path / "c.yaml", """
sweep:
  models: []
  gpus: [1]
  commands:
    lingering: >-
      (sleep 3144 &); echo 'Epoch 1/{epochs}'; echo '1/1 - 1s - loss: 0.5 - accuracy: 0.5';
      echo 'Epoch 2/{epochs}'; echo '1/1 - 1s - loss: 0.4 - accuracy: 0.6'
    stubborn: >-
      echo 'Epoch 1/{epochs}'; echo '1/1 - 1s - loss: 0.5 - accuracy: 0.5';
      echo 'Epoch 2/{epochs}'; trap '' TERM; sleep 3145
training: {epochs: 2, batch_per_gpu: 4, device: cpu}
resources: {cpus_per_gpu: 1, mem_mb_per_gpu: 500, runtime_min: 1}
""")
    proc = run_snakemake(tmp_path, *profile, f"--configfile={config}", check=False)
    assert proc.returncode != 0  # check_points: stubborn timed out
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("series")
    assert runs["status"].to_dict() == {"lingering": "completed", "stubborn": "timeout"}
    assert runs.loc["stubborn", "epochs_done"] == 1
    lingering = json.loads((tmp_path / "results/runs/lingering/gpus1/rep1/run.json")
                           .read_text())
    assert lingering["env"]["SLURM_JOB_ID"] and lingering["job_s"] < 30
    left = subprocess.run(["pgrep", "-f", "sleep 314[45]"], capture_output=True, text=True)
    assert left.stdout == "", left.stdout
    assert "Traceback" not in "".join(p.read_text(errors="replace")
                                      for p in (tmp_path / "logs").rglob("*.log"))


def test_a_restarted_snakemake_never_holds_two_allocations_for_one_point(profile, tmp_path,
                                                                         archive):
    """Snakemake on the login node killed (SIGKILL) while its point trains, then started
    again: it submits the point again (it does not re-attach to running jobs), but with a
    dependency on the job that still trains it: the new job waits PENDING, holding no
    GPUs, and when it starts it keeps the first job's completed record. (The first job's
    training is held with SIGSTOP while Snakemake restarts, so that it cannot end first
    however fast the machine is.)"""
    config = sweep_config(tmp_path / "c.yaml", archive,
                          sweep="{models: [SimpleCNN], gpus: [1]}",
                          training="{epochs: 3, batch_per_gpu: 4, device: cpu}")
    first = start_snakemake(tmp_path, *profile, f"--configfile={config}", TABLES,
                            output=False)
    point = tmp_path / "results/runs/SimpleCNN/gpus1/rep1"
    deadline = time.time() + 600
    while not ((point / "state/epochs.jsonl").exists()
               and (point / "state/epochs.jsonl").read_text().count("\n") >= 1):
        assert first.poll() is None and time.time() < deadline
        time.sleep(0.1)
    [training] = training_processes(tmp_path, "SimpleCNN/gpus1/rep1")
    training.suspend()  # SIGSTOP: the first job goes on holding its allocation
    first.send_signal(signal.SIGKILL)  # the login node's Snakemake dies; its job runs on
    first.wait(60)
    [job] = [j for j, state in queue("%i", "%T") if state == "RUNNING"]
    run_snakemake(tmp_path, "--unlock", *profile, f"--configfile={config}")
    second = start_snakemake(tmp_path, *profile, f"--configfile={config}", TABLES)
    seen, held = [], True  # this user's jobs, as often as squeue answers
    while second.poll() is None:
        rows = queue("%i", "%T", "%r")
        seen.append(rows)
        assert sum(state == "RUNNING" for _, state, _ in rows) <= 1, rows
        if held and any(j != job and state == "PENDING" and reason == "Dependency"
                        for j, state, reason in rows):
            training.resume()  # the new job waits on the first: let the first finish
            held = False
        time.sleep(0.2)
    output = second.stdout.read()
    assert second.returncode == 0, output[-4000:]
    assert f"is still being trained by SLURM job {job}: its new job waits for it" in output
    waiting = {(j, reason) for rows in seen for j, state, reason in rows if state == "PENDING"}
    assert any(j != job and reason == "Dependency" for j, reason in waiting), seen
    record = json.loads((point / "run.json").read_text())
    assert record["status"] == "completed" and record["env"]["SLURM_JOB_ID"] == job
    attempts = [json.loads(line) for line in (point / "attempts.jsonl").read_text()
                .splitlines()]
    assert [(a["status"], a["slurm_job_id"]) for a in attempts] == [("completed", job)]
    log = (tmp_path / "logs/train/SimpleCNN/gpus1/rep1.log").read_text()
    assert "another job completed" in log and "nothing is trained again" in log


@needs_torch
def test_a_batch_past_its_jobs_memory_is_a_result_through_slurm(profile, tmp_path):
    """The seed study's chapter 11 train.py, unchanged, over its batch through the SLURM
    profile (tests/configs/chapter11-slurm.yaml): each point a job of 1400 MiB (--mem);
    SLURM's cgroup lets 128 a batch train and the kernel ends 8192 past it: an
    out_of_memory row, a result (snakemake exits 0; srun exits 1 after such a step), the
    first page naming 128, and SLURM's accounting saying OUT_OF_MEMORY."""
    shown = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                           check=True).stdout
    if not re.search(r"^ConstrainRAMSpace\s*=\s*yes", shown, re.MULTILINE):
        message = ("the test cluster holds no job to its memory: scripts/testcluster.sh "
                   "uses task/cgroup only where cgroup v1's memory hierarchy is writable")
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    for name in ("examples", ".venv-torch"):
        (tmp_path / name).symlink_to(ROOT / name)
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'chapter11-slurm.yaml'}"
    run_snakemake(tmp_path, *profile, config)
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("batch_per_gpu")
    assert runs.loc[128, "status"] == "completed", runs.loc[128, "problem"]
    assert runs.loc[8192, "status"] == "out_of_memory", runs.loc[8192, "problem"]
    assert "the kernel's out-of-memory killer" in runs.loc[8192, "problem"]
    fit = next(line for line in (tmp_path / "results/report/first-page.rst").read_text()
               .splitlines() if line.startswith("- chapter11 on 1 GPU"))
    assert "the largest batch per GPU that fit is 128 (" in fit
    assert fit.endswith("; 8192 ran out of memory")
    job = str(int(runs.loc[8192, "slurm_job_id"]))
    assert accounted_states([job]) == ["COMPLETED"]  # the job's batch step: dlscale's
    steps = subprocess.run(["sacct", "-n", "-P", "-o", "JobID,State", "-j", job],
                           capture_output=True, text=True, check=True).stdout
    assert "|OUT_OF_MEMORY" in steps, steps  # the point's own step: the kernel's kill
