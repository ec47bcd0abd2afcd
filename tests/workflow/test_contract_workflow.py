"""The run contract through `snakemake --profile profiles/local`: a point killed by
SIGKILL and a train.log that disagrees with the records both end with the study's
tables; neither loses the other points."""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import pandas as pd
import psutil
import pytest
import yaml
from conftest import (
    ROOT,
    TABLES,
    dlscale_status,
    needs_fashion,
    run_snakemake,
    start_snakemake,
    training_processes,
    write_config,
)

from dlscale.core.contract import KEPT, UNATTENDED

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]
KILL = ROOT / "tests" / "configs" / "kill.yaml"
KILLED = "MLP/gpus1/rep1"
DONE = "SimpleCNN/gpus1/rep1"


def kill_training_after(workdir, point: str, epochs: int, timeout: float = 600
                        ) -> threading.Thread:
    """SIGKILL the train.py process of `point` in `workdir` once its live records hold
    `epochs` epochs (what the out-of-memory killer does); the thread's `killed_at` says
    how many there were when the signal was sent."""
    folder = f"results/runs/{point}"
    live = workdir / folder / "state" / "epochs.jsonl"

    def watch():
        deadline = time.time() + timeout
        while time.time() < deadline:
            done = live.read_text().count("\n") if live.exists() else 0
            if done >= epochs:
                for proc in training_processes(workdir, point):
                    proc.send_signal(signal.SIGKILL)
                    thread.killed_at = done
                    return
            time.sleep(0.01)

    thread = threading.Thread(target=watch, daemon=True)
    thread.killed_at = None
    thread.start()
    return thread


@needs_fashion
def test_a_killed_point_and_a_disagreeing_log_still_give_the_tables(tmp_path):
    killer = kill_training_after(tmp_path, KILLED, 2)
    first = run_snakemake(tmp_path, *PROFILE, f"--configfile={KILL}", check=False)
    killer.join(5)
    assert killer.killed_at is not None and 2 <= killer.killed_at < 200
    # the study's tables list both points; the exit status says one did not complete
    assert first.returncode != 0
    assert f"failed point: {KILLED}: killed: the training process was killed by SIGKILL" \
        in first.stdout
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("run")
    assert runs.loc[DONE, "counted"] and runs.loc[DONE, "log_check"] == "ok"
    assert runs.loc[KILLED, "status"] == "killed" and not runs.loc[KILLED, "counted"]
    assert runs.loc[KILLED, "epochs_done"] >= killer.killed_at  # one more may have ended
    failed = pd.read_csv(tmp_path / "results/tables/failed.csv")
    assert list(failed["run"]) == [KILLED] and "SIGKILL" in failed["problem"][0]
    assert list(pd.read_csv(tmp_path / "results/tables/scaling.csv")["series"]) == ["SimpleCNN"]
    assert (tmp_path / "results/plots/overview.png").stat().st_size > 10_000

    # Keras' printed time of a finished point disagrees with its records (a busy machine):
    # a warning and a column, never a lost point
    log = tmp_path / "results/runs" / DONE / "train.log"
    first_epoch = re.search(r"^\d+/\d+ - \d+s - .*$", log.read_text(), re.M).group(0)
    doctored = re.sub(r"^(\d+/\d+ - )\d+s( - )", r"\g<1>99s\g<2>", first_epoch)
    doctored = re.sub(r" - [\d.]+m?s/epoch", " - 99s/epoch", doctored)
    text = log.read_text().replace(first_epoch, doctored, 1)
    log.write_text(text)
    # the killed point reruns (fewer epochs now): it resumes from its last finished epoch
    fixed = yaml.safe_load(KILL.read_text())
    fixed["models"]["MLP"]["epochs"] = 6
    config = write_config(tmp_path / "fixed.yaml", yaml.safe_dump(fixed))
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    warning = "train.log does not match the records (epoch 1 99 s in the log"
    assert warning in (tmp_path / "logs/tabulate_run" / f"{DONE}.log").read_text()
    assert warning in (tmp_path / "logs/aggregate_runs.log").read_text()
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("run")
    assert runs["counted"].all() and len(runs) == 2
    assert runs.loc[DONE, "log_check"].startswith("epoch 1 99 s in the log, ")
    # (its log may lack the line of the epoch the kill interrupted: a warning, no more)
    assert runs.loc[KILLED, "epochs_done"] == 6
    assert pd.read_csv(tmp_path / "results/tables/failed.csv").empty
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv").set_index("series")
    assert scaling.loc["SimpleCNN", "epoch_time_s"] < 99  # the records' time, not the log's

    # a finished point's record that went missing is never "up to date"
    (tmp_path / "results/runs" / DONE / "run.json").unlink()
    dry = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", "-n")
    assert re.search(r"^train\s+1$", dry.stdout, re.M), dry.stdout[-3000:]


def training_process(workdir, point: str, timeout: float = 600) -> psutil.Process:
    """The train.py process of `point` in `workdir`, once it exists."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if found := training_processes(workdir, point):
            return found[0]
        time.sleep(0.05)
    raise AssertionError(f"no training of {point} started in {timeout} s")


def one_point_training(workdir, epochs: int, finished: int):
    """SimpleCNN alone (tests/configs/kill.yaml) started in the background with `epochs`,
    once its training has recorded `finished` epochs: (Snakemake's arguments, the
    Snakemake process, the train.py process, a deadline for what the test waits on)."""
    config = yaml.safe_load(KILL.read_text())
    config["sweep"]["models"], config["training"]["epochs"] = ["SimpleCNN"], epochs
    path = write_config(workdir / "c.yaml", yaml.safe_dump(config))
    args = (*PROFILE, f"--configfile={path}", TABLES)
    first = start_snakemake(workdir, *args, output=False)
    live = workdir / f"results/runs/{DONE}/state/epochs.jsonl"
    training = training_process(workdir, DONE)
    deadline = time.time() + 600
    while not (live.exists() and live.read_text().count("\n") >= finished) and (
            time.time() < deadline):
        time.sleep(0.05)
    return args, first, training, deadline


@needs_fashion
def test_a_restarted_snakemake_never_trains_a_point_twice_at_once(tmp_path):
    """Snakemake killed (-9) while a point trains, started again: its second job for the
    point waits for the first, keeps the first's record, and the study ends whole."""
    args, first, training, deadline = one_point_training(tmp_path, epochs=3, finished=1)
    training.suspend()  # the first job keeps the point, paused, for as long as the test needs
    # the epochs recorded once it is paused: another may have ended since the count (0.1 s
    # epochs; the requeue test's status once said one more on CI)
    recorded = (tmp_path / f"results/runs/{DONE}/state/epochs.jsonl").read_text().count("\n")
    assert 1 <= recorded < 3, recorded
    # `dlscale status` reads it from the run folder, beside the running Snakemake
    assert re.search(rf"^{re.escape(DONE)}\s+running\s+epoch {recorded} of 3, last [\d.e+-]+ s, "
                     r"ends ~\d\d:\d\d:\d\d$", dlscale_status(tmp_path), re.M)
    first.kill()  # the login node's Snakemake dies; its job goes on
    first.wait()
    run_snakemake(tmp_path, "--unlock", *args)
    second = start_snakemake(tmp_path, *args)
    log = tmp_path / f"logs/train/{DONE}.log"
    while "is being trained by another process" not in (
            log.read_text(errors="replace") if log.exists() else "") and time.time() < deadline:
        time.sleep(0.05)
    others = [p for p in psutil.process_iter(["cmdline", "cwd"])
              if any(w.endswith("train.py") for w in (p.info["cmdline"] or [])[1:2])
              and p.info["cwd"] == str(tmp_path)]
    assert [p.pid for p in others] == [training.pid]  # the second job trains nothing
    training.resume()
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output[-6000:]
    assert "its record is kept, nothing is trained again" in log.read_text()
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("run")
    assert runs.loc[DONE, "status"] == "completed" and runs.loc[DONE, "counted"]
    epochs = pd.read_csv(tmp_path / f"results/runs/{DONE}/epochs.csv")
    assert list(epochs["epoch"]) == [1, 2, 3]
    assert (tmp_path / f"results/runs/{DONE}/train.log").read_text().count("Epoch 1/3") == 1
    done, summary = dlscale_status(tmp_path).splitlines()
    assert done == f"{DONE}  completed     3 epoch(s)"
    assert summary.startswith("1 point(s): 1 completed (planned ")


@needs_fashion
def test_a_point_that_completed_while_snakemake_was_away_is_not_trained_again(tmp_path):
    """Snakemake killed (-9) while its point trains; the training goes on and completes
    with no Snakemake there; the restarted Snakemake (which finds the job incomplete and
    runs it again) keeps that record and trains nothing. Before, it trained the point a
    second time from epoch 1 (two completed attempts)."""
    args, first, training, _ = one_point_training(tmp_path, epochs=2, finished=0)
    first.kill()  # the workstation's Snakemake dies; its point trains on
    first.wait()
    psutil.wait_procs([training], timeout=600)
    launcher = [p for p in psutil.process_iter(["cmdline", "cwd"])
                if p.info["cwd"] == str(tmp_path)
                and any(w.endswith("launch.py") for w in (p.info["cmdline"] or []))]
    psutil.wait_procs(launcher, timeout=120)  # it notes the record was made unattended
    record = json.loads((tmp_path / f"results/runs/{DONE}/run.json").read_text())
    assert record["status"] == "completed"
    # what the first job left, for the message if the second trains again
    kept = sorted(p.name for p in (tmp_path / f"results/runs/{DONE}/completed").glob("*"))
    first_log = (tmp_path / f"logs/train/{DONE}.log").read_text(errors="replace")[-3000:]
    run_snakemake(tmp_path, "--unlock", *args)
    second = run_snakemake(tmp_path, *args)
    assert "rule train:" in second.stdout  # Snakemake runs the job again: it was incomplete
    log = (tmp_path / f"logs/train/{DONE}.log").read_text()
    assert "completed while Snakemake was away" in log, (
        f"kept: {kept} (launchers waited for: {[p.pid for p in launcher]}); first job's "
        f"log:\n{first_log}")
    attempts = [json.loads(x) for x in
                (tmp_path / f"results/runs/{DONE}/attempts.jsonl").read_text().splitlines()]
    assert [a["status"] for a in attempts] == ["completed"]
    assert (tmp_path / f"results/runs/{DONE}/train.log").read_text().count("Epoch 1/2") == 1
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("run")
    assert runs.loc[DONE, "status"] == "completed" and runs.loc[DONE, "counted"]

    # the same unattended record again (the mark as launch.py leaves it), and the user
    # forces the point: `snakemake -R train` trains it again (docs/failures.md). Before,
    # Snakemake had not read its flags when dlscale asked (at parsing), so no launcher
    # heard of the force and the record was kept
    mark = tmp_path / f"results/runs/{DONE}/{KEPT}/{UNATTENDED}"
    mark.write_text(json.dumps({"snakemake_pid": first.pid, "noted": time.time()}))
    forced = run_snakemake(tmp_path, *args, "-R", "train")
    assert "completed while Snakemake was away" not in (
        tmp_path / f"logs/train/{DONE}.log").read_text(), forced.stdout[-3000:]
    attempts = [json.loads(x) for x in
                (tmp_path / f"results/runs/{DONE}/attempts.jsonl").read_text().splitlines()]
    assert [a["status"] for a in attempts] == ["completed", "completed"]


@needs_fashion
def test_a_finished_points_record_is_kept_until_a_new_one_replaces_it(tmp_path):
    """The issue's case: a completed point, a restart with another batch size killed
    (-9) mid-training, which took the point's outputs with it (Snakemake deletes a job's
    outputs before it runs), then the original config again."""
    config = yaml.safe_load(KILL.read_text())
    config["sweep"]["models"], config["training"]["epochs"] = ["SimpleCNN"], 2
    original = write_config(tmp_path / "c.yaml", yaml.safe_dump(config))
    run_snakemake(tmp_path, *PROFILE, f"--configfile={original}", TABLES)
    folder = tmp_path / f"results/runs/{DONE}"
    first = (folder / "run.json").read_text()
    config["training"]["batch_per_gpu"] = 8
    other = write_config(tmp_path / "other.yaml", yaml.safe_dump(config))
    restart = start_snakemake(tmp_path, *PROFILE, f"--configfile={other}", TABLES,
                              output=False)
    training_process(tmp_path, DONE)
    tree = psutil.Process(restart.pid)
    for proc in [tree, *tree.children(recursive=True)]:  # kill -9 of the whole session
        proc.kill()
    restart.wait()
    assert not (folder / "run.json").exists()  # the outputs went with the restart
    assert (folder / "completed/run.json").read_text() == first  # the record did not
    run_snakemake(tmp_path, "--unlock", *PROFILE, f"--configfile={original}")
    # the whole study (rule all names each record): a missing record is trained again
    again = run_snakemake(tmp_path, *PROFILE, f"--configfile={original}")
    assert f"point {DONE}: results/runs/{DONE}/run.json is missing, so it is trained again; " \
           f"the last completed record is kept in results/runs/{DONE}/completed/" in again.stdout
    record = json.loads((folder / "run.json").read_text())
    assert record["status"] == "completed" and record["batch_per_gpu"] == 16
    assert (folder / "completed/run.json").read_text() == (folder / "run.json").read_text()
