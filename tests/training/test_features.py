"""The course material's training features with real TensorFlow: Adam and the MLP,
TensorBoard and profiler traces, the saved model, collectives, Horovod's timeline."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest
from conftest import HOROVOD_PYTHON, HOROVOD_READY, IN_CI, SCRIPTS, run_script
from helpers.records import records


def run_json(folder):
    return json.loads((folder / "run.json").read_text())


def test_an_adam_point_with_the_mlp_trains(small_data, tmp_path):
    proc = run_script("train.py", "--data-dir", str(small_data), "--out", str(tmp_path),
                      "--model", "MLP", "--optimizer", "adam", "--base-lr", "0.001",
                      "--device", "cpu", "--batch-per-gpu", "16", "--epochs", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = run_json(tmp_path)
    assert (run["status"], run["optimizer"], run["model"]) == ("completed", "adam", "MLP")
    losses = [json.loads(line)["loss"] for line in
              (tmp_path / "epochs.jsonl").read_text().splitlines()]
    assert losses[-1] < losses[0]  # Adam at 1e-3 learns the generated classes


def test_two_workers_write_tensorboard_a_profile_and_the_model_once(small_data, tmp_path):
    """Two MultiWorkerMirroredStrategy processes train together (a replica each), and only
    the chief writes TensorBoard's events, the profile and the model."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "launch.py"), "--plan", '{"tasks": 2}', "--record",
         str(tmp_path), "--", sys.executable, str(SCRIPTS / "train.py"), "--data-dir",
         str(small_data),
         "--out", str(tmp_path), "--model", "SimpleCNN", "--device", "cpu", "--gpus", "2",
         "--batch-per-gpu", "8", "--epochs", "2", "--strategy", "multiworker",
         "--communication", "ring", "--tensorboard", "--profile-steps", "2,3", "--save-model"],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = run_json(tmp_path)
    assert (run["status"], run["workers"], run["communication"]) == ("completed", 2, "ring")
    assert (run["strategy"], run["replicas"], len(run["cluster"])) == ("multiworker", 2, 2)
    assert [e["epoch"] for e in records(tmp_path / "epochs.jsonl")] == [1, 2]
    assert run["model_file"] == "model.keras" and run["tensorboard"] == "tensorboard"

    import tensorflow as tf

    events = sorted((tmp_path / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert len(events) == 1  # the chief's only
    tags = {v.tag for e in tf.compat.v1.train.summary_iterator(str(events[0]))
            for v in e.summary.value}
    assert {"epoch_loss", "epoch_accuracy"} <= tags
    traces = list((tmp_path / "tensorboard").rglob("*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 1000

    from dlscale.train.keraschoice import keras

    model = keras().models.load_model(str(tmp_path / "model.keras"), compile=False)
    assert model.output_shape == (None, 10)
    # nothing but the chief's files: no other worker's model, events or backup copies
    # (.lock: launch.py's, held while the point trains; completed/: the kept copy of the
    # records, see test_contract_workflow.py)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".lock", "attempts.jsonl", "completed", "epochs.jsonl", "model.keras", "run.json",
        "telemetry.csv", "tensorboard", "train.log"]


@pytest.mark.skipif(not HOROVOD_READY and not IN_CI,
                    reason="the Horovod environment is not built (make horovod)")
def test_horovod_writes_rank_0s_timeline(small_data, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "launch.py"),
         "--plan", '{"tasks": 2, "horovod": true, "timeline": true}',
         "--record", str(tmp_path), "--", str(HOROVOD_PYTHON), str(SCRIPTS / "train.py"),
         "--data-dir", str(small_data), "--out", str(tmp_path), "--model", "SimpleCNN",
         "--device", "cpu", "--gpus", "2", "--batch-per-gpu", "8", "--epochs", "1",
         "--strategy", "horovod"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert run_json(tmp_path)["status"] == "completed"
    text = (tmp_path / "timeline.json").read_text()
    events = json.loads(text if text.rstrip().endswith("]") else text.rstrip().rstrip(",") + "]")
    names = {str(e.get("name", "")) for e in events} | {str(e.get("args", {}).get("name", ""))
                                                        for e in events}
    assert any("allreduce" in n.lower() for n in names), sorted(names)[:20]


def loop_run(data, out, loop, *extra, env=None):
    return run_script("train.py", "--data-dir", str(data), "--out", str(out), "--model",
                      "SimpleCNN", "--device", "cpu", "--gpus", "2", "--batch-per-gpu", "8",
                      "--epochs", "3", "--loop", loop, *extra, env=env)


@pytest.fixture(scope="module")
def fit_run(small_data, tmp_path_factory):
    """SimpleCNN on 2 replicas through Keras' fit, 3 epochs, its telemetry every 0.2 s, a
    synthetic check and glibc's malloc tuned by you: read by the telemetry test and as the
    fit the custom loop is compared with (one training, not two; none of these changes
    its maths)."""
    out = tmp_path_factory.mktemp("fit")
    proc = loop_run(small_data, out, "fit", "--telemetry-interval", "0.2",
                    "--synthetic-check-steps", "5",
                    env={"GLIBC_TUNABLES": "glibc.malloc.top_pad=1048576"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_the_custom_loop_trains_like_fit_and_writes_the_same_records(small_data, fit_run,
                                                                     tmp_path):
    from dlscale.reporting.runtable import cross_check

    proc = loop_run(small_data, tmp_path / "custom", "custom")
    assert proc.returncode == 0, proc.stderr[-3000:]
    custom = run_json(tmp_path / "custom")
    assert custom["loop"] == "custom" and custom["status"] == "completed"
    assert custom["test_accuracy"] is not None
    kept = {loop: records(out / "epochs.jsonl")
            for loop, out in (("fit", fit_run), ("custom", tmp_path / "custom"))}
    assert [r["epoch"] for r in kept["custom"]] == [1, 2, 3]
    assert [r["images"] for r in kept["custom"]] == [r["images"] for r in kept["fit"]]
    # the same seed, data and maths: both end within 0.15 of each other in loss and
    # accuracy after 3 epochs (their random streams differ, so not exactly equal)
    for key in ("loss", "accuracy"):
        assert abs(kept["fit"][-1][key] - kept["custom"][-1][key]) <= 0.15, key
    # its train.log reads like any Keras run and agrees with the records
    assert cross_check(tmp_path / "custom" / "train.log", kept["custom"], True) == "ok"

    # it resumes from its last checkpoint: a time limit of 6 s (30 s kept for the end)
    # stops it after epoch 1, checkpointed
    proc = loop_run(small_data, tmp_path / "resumed", "custom", "--time-limit-min", "0.1")
    assert proc.returncode == 7, proc.stderr[-3000:]
    assert run_json(tmp_path / "resumed")["epochs_completed"] == 1
    proc = loop_run(small_data, tmp_path / "resumed", "custom")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = run_json(tmp_path / "resumed")
    assert (run["status"], run["resumed_at_epoch"], run["epochs_completed"]) == (
        "completed", 2, 3)
    log = (tmp_path / "resumed" / "train.log").read_text()
    assert "resuming from the backup" in log and "Epoch 2/3" in log
    # with the batches of the run never stopped: on CPUs the same losses
    resumed = records(tmp_path / "resumed" / "epochs.jsonl")
    assert [(r["loss"], r["accuracy"]) for r in resumed] == [
        (r["loss"], r["accuracy"]) for r in kept["custom"]]


def test_a_cpu_run_records_its_system_its_telemetry_and_its_synthetic_speed(fit_run):
    import csv
    import os

    from dlscale.train.telemetry import HOST_COLUMNS

    run = run_json(fit_run)
    # train.py ran with glibc's malloc tuned (dlscale.train.allocator); a value you set wins
    assert run["env"]["GLIBC_TUNABLES"] == (
        "glibc.malloc.top_pad=1048576:glibc.malloc.mmap_threshold=33554432")
    system = run["system"]
    assert system["cpu_threads"] == os.cpu_count() and system["memory_gb"] > 0
    assert system["cpu_model"] and system["tensorflow"] == run["versions"]["tensorflow"]
    assert system["gpu_count"] == 0 and system["gpu_model"] is None
    assert "NVML" in system["gpu_note"] or "pynvml" in system["gpu_note"]
    assert run["telemetry"]["file"] == "telemetry.csv"
    assert run["telemetry"]["gpu_note"] == "no GPU telemetry: cpu run"
    with open(fit_run / "telemetry.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == HOST_COLUMNS  # no GPU columns, nothing filled with zeros
    assert len(rows) >= 3 and all(0 <= float(r["cpu_percent"]) <= 100 for r in rows)
    assert all(float(r["rss_mb"]) > 50 for r in rows)  # TensorFlow alone is bigger
    epochs = records(fit_run / "epochs.jsonl")
    timed = [r for r in epochs if "cpu_percent" in r]
    assert timed and all(r["rss_mb_peak"] > 50 for r in timed)
    assert not any(k.startswith(("gpu", "energy", "j_per")) for r in epochs for k in r)
    assert run["synthetic_images_per_s"] > 0


def test_a_worker_whose_host_stalls_past_the_heartbeat_default_still_finishes(small_data,
                                                                            tmp_path):
    """TensorFlow's coordination service took a worker for failed after 10 s without its
    heartbeat, and a CI machine that stalled under load lost a healthy point that way
    ("Unexpected heartbeat request from an already-in-error task"). Worker 1 is stopped
    (SIGSTOP) for 15 s after the first epoch and then continued: the point finishes."""
    import signal
    import time

    from dlscale.train.cluster import HEARTBEAT_TIMEOUT_S

    stall = 15
    assert 10 < stall < HEARTBEAT_TIMEOUT_S
    launcher = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "launch.py"), "--plan", '{"tasks": 2}', "--record",
         str(tmp_path), "--", sys.executable, str(SCRIPTS / "train.py"), "--data-dir",
         str(small_data), "--out", str(tmp_path), "--model", "MLP", "--device", "cpu",
         "--gpus", "2", "--batch-per-gpu", "8", "--epochs", "4", "--strategy", "multiworker",
         "--communication", "ring"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        worker = None
        while worker is None and launcher.poll() is None and time.monotonic() < deadline:
            epochs = tmp_path / "state" / "epochs.jsonl"  # the chief writes a line an epoch
            if epochs.exists() and epochs.read_text().count("\n") >= 1:
                # this launcher's worker 1 alone (other tests' workers run beside it)
                worker = next((p for p in psutil.Process(launcher.pid).children(recursive=True)
                               if '"index": 1' in _environ(p, "TF_CONFIG")), None)
            time.sleep(0.2)
        assert worker is not None, "worker 1 was not seen after the first epoch"
        worker.send_signal(signal.SIGSTOP)
        time.sleep(stall)
        worker.send_signal(signal.SIGCONT)
        out, err = launcher.communicate(timeout=600)
    finally:
        if launcher.poll() is None:  # the launcher ends its workers on SIGTERM
            launcher.terminate()
            launcher.wait(timeout=60)
    assert launcher.returncode == 0, err[-3000:]
    run = run_json(tmp_path)
    outcome = (run["status"], run.get("workers"), run.get("epochs_completed"))
    assert outcome == ("completed", 2, 4), run.get("failure")


def _environ(process, name: str) -> str:
    """The value of `name` in a psutil process's environment ('' when it cannot be read)."""
    try:
        return process.environ().get(name, "")
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # ended, or not ours to read
        return ""
