"""scripts/train.py with real TensorFlow and Keras, replicas on logical CPU devices."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import SCRIPTS, run_script
from helpers.records import killed_at_write, records

COMMON = ["--model", "SimpleCNN", "--device", "cpu", "--batch-per-gpu", "8"]


def train(data, out, *args, env=None):
    return run_script("train.py", "--data-dir", str(data), "--out", str(out), *COMMON, *args,
                      env=env)


@pytest.fixture(scope="module")
def one_replica_run(small_data, tmp_path_factory):
    """SimpleCNN on 1 replica for 2 epochs, run to its end: read by the replicas test and
    as the uninterrupted run the resumed one is compared with (one training for both)."""
    out = tmp_path_factory.mktemp("one_replica")
    proc = train(small_data, out, "--gpus", "1", "--epochs", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


# (2 replicas: the warm-up and batch-file tests below train on 2; two multiworker processes:
# test_features.py's TensorBoard test)
@pytest.mark.parametrize("gpus", [1, 4])
def test_replicas_global_batch_and_learning_rate(small_data, tmp_path, gpus, request):
    if gpus == 1:
        out = request.getfixturevalue("one_replica_run")
    else:
        out = tmp_path
        proc = train(small_data, out, "--gpus", str(gpus), "--epochs", "2")
        assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "completed"
    assert run["train_input"] == "memory"  # 400 images of 32 px: far below --cache-mb
    assert run["replicas"] == gpus and len(run["devices"]) == gpus
    assert run["global_batch"] == 8 * gpus
    assert run["lr"] == pytest.approx(0.01 * gpus)
    assert run["steps_per_epoch"] == 400 // (8 * gpus)
    assert 0.0 <= run["test_accuracy"] <= 1.0
    # memory per GPU on CPUs: the process's resident peak, its replicas said (issue 98)
    assert 0.1 < run["memory_gib"] < 64
    assert run["memory_from"].endswith(f"a CPU point, {gpus} replica(s) in the process)")
    epochs = records(out / "epochs.jsonl")
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert all(e["images"] == run["steps_per_epoch"] * 8 * gpus and e["seconds"] > 0
               for e in epochs)
    log = (out / "train.log").read_text()
    assert "Epoch 2/2" in log and f"on {gpus} replica(s)" in log
    assert not (out / "state").exists()


@pytest.fixture(scope="module")
def unscaled_run(small_data, tmp_path_factory):
    """One epoch on 2 replicas, the rate not scaled, the shards read every epoch
    (--cache-mb 0) and the batch from a batch finder's JSON: read by the warm-up test and
    the batch-file test (one training, not two)."""
    out = tmp_path_factory.mktemp("unscaled")
    found = out / "batch.json"
    found.write_text(json.dumps({"batch_per_gpu": 24}))
    proc = train(small_data, out / "run", "--gpus", "2", "--epochs", "1", "--lr-scaling",
                 "none", "--cache-mb", "0", "--batch-per-gpu-file", str(found))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out / "run"


def test_warmup_ramps_to_the_scaled_rate_and_no_scaling_keeps_base(small_data, unscaled_run,
                                                                   tmp_path):
    proc = train(small_data, tmp_path / "w", "--gpus", "2", "--epochs", "3",
                 "--warmup-epochs", "2", "--base-lr", "0.01")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lrs = [e["lr"] for e in records(tmp_path / "w" / "epochs.jsonl")]
    assert lrs == pytest.approx([0.015, 0.02, 0.02])
    run = json.loads((unscaled_run / "run.json").read_text())
    assert run["lr"] == pytest.approx(0.01)
    assert run["train_input"] == "files"  # --cache-mb 0: the shards are read every epoch
    assert "read from files" in (unscaled_run / "train.log").read_text()


@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_nan_loss_stops_the_run_as_failed(small_data, tmp_path, loop):
    proc = train(small_data, tmp_path, "--epochs", "3", "--base-lr", "1e9", "--loop", loop)
    assert proc.returncode == 4
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "failed" and "NaN" in run["failure"]
    assert run["test_accuracy"] is None
    # stopped at the end of the epoch whose loss went bad, not after all 3
    assert [e["epoch"] for e in records(tmp_path / "epochs.jsonl")] == [1]


def test_more_gpus_than_visible_fails_before_building_the_model(small_data, tmp_path):
    # no GPU visible on any machine, with or without GPUs: CUDA_VISIBLE_DEVICES is empty
    proc = run_script("train.py", "--data-dir", str(small_data), "--out", str(tmp_path),
                      "--model", "ResNet152V2", "--device", "gpu", "--gpus", "2",
                      env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 3
    assert "2 GPU(s) asked for but TensorFlow sees 0 (CUDA_VISIBLE_DEVICES=)" in proc.stderr
    assert "dlscale train:" not in proc.stdout  # nothing was built or trained
    run = json.loads((tmp_path / "run.json").read_text())  # the failure is recorded
    assert run["status"] == "failed" and "TensorFlow sees 0" in run["failure"]
    assert [a["status"] for a in records(tmp_path / "attempts.jsonl")] == ["failed"]


def test_unknown_model_and_bad_flags_exit_2(small_data, tmp_path):
    proc = train(small_data, tmp_path, "--model", "ResNet51V2")
    assert proc.returncode == 2 and "unknown model 'ResNet51V2'" in proc.stderr
    proc = train(small_data, tmp_path, "--gpus", "0")
    assert proc.returncode == 2 and "--gpus must be at least 1, got 0" in proc.stderr


def test_killed_run_resumes_from_its_last_epoch_without_duplicates(small_data, tmp_path):
    args = [sys.executable, str(SCRIPTS / "train.py"), "--data-dir", str(small_data),
            "--out", str(tmp_path), "--model", "SimpleCNN", "--device", "cpu",
            "--batch-per-gpu", "8", "--epochs", "6"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    live = tmp_path / "state" / "epochs.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        # two records: epoch 1's backup is saved before epoch 2 starts
        if live.exists() and live.read_text().count("\n") >= 2:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(records(live))
    assert 2 <= done_before < 6, "the kill must land after epoch 2 and before the end"
    assert not (tmp_path / "run.json").exists()

    again = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["resumed_at_epoch"] is not None and 2 <= run["resumed_at_epoch"] <= done_before + 1
    assert run["epochs_completed"] == 6
    assert [e["epoch"] for e in records(tmp_path / "epochs.jsonl")] == [1, 2, 3, 4, 5, 6]
    log = (tmp_path / "train.log").read_text()
    assert "resuming from the backup" in log
    assert f"Epoch {run['resumed_at_epoch']}/6" in log.split("resuming from the backup")[1]


def test_synthetic_input_and_mixed_auto_on_cpu(small_data, tmp_path):
    proc = train(small_data, tmp_path, "--epochs", "1", "--synthetic", "--precision",
                 "mixed_auto")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["synthetic_input"] is True and run["test_accuracy"] is None
    # this machine's CPU decides: bfloat16 with its instructions, float32 without
    from dlscale.train.telemetry import cpu_flags
    from dlscale.train.training import resolve_precision

    assert (run["precision"], run["precision_asked"]) == (
        resolve_precision("mixed_auto", "cpu", cpu_flags()), "mixed_auto")


def test_batch_from_the_finders_json(unscaled_run):
    run = json.loads((unscaled_run / "run.json").read_text())
    assert (run["batch_per_gpu"], run["global_batch"]) == (24, 48)  # the file's, not 8


def test_batch_finder_refuses_to_run_without_a_gpu(small_data, tmp_path):
    proc = run_script("find_batch_size.py", "--model", "SimpleCNN", "--data-dir", str(small_data),
                      "--out", str(tmp_path / "b.json"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 5
    assert "batch_per_gpu: auto needs a GPU: no GPU visible" in proc.stderr
    assert "set batch_per_gpu to a number to train on CPUs" in proc.stderr
    assert not (tmp_path / "b.json").exists()


def test_out_of_memory_in_fit_ends_with_status_and_hint(small_data, tmp_path, monkeypatch):
    """Fakes the OOM (patched Model.fit): on CPUs a real one ends in the kernel's OOM
    killer, not in TensorFlow's ResourceExhaustedError that GPUs raise."""
    import tensorflow as tf
    import train as train_script

    from dlscale.train.keraschoice import keras

    def exhausted(self, *args, **kwargs):
        raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    monkeypatch.setattr(keras().Model, "fit", exhausted)
    monkeypatch.setattr(sys, "stdout", sys.stdout)  # train.py tees stdout; put it back after
    code = train_script.main(["--data-dir", str(small_data), "--out", str(tmp_path),
                              *COMMON, "--epochs", "2"])
    assert code == 6
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "out_of_memory" and run["test_accuracy"] is None
    assert "out of memory with 8 images per GPU" in run["failure"]
    assert "set batch_per_gpu: auto" in run["failure"]


def kill_after(args, live, epochs_done, timeout=300):
    """Start a run, SIGKILL it once `live` holds `epochs_done` records; return the count."""
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if live.exists() and live.read_text().count("\n") >= epochs_done:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return len(records(live))


def test_a_restart_with_other_settings_starts_over_and_says_so(small_data, tmp_path):
    base = [sys.executable, str(SCRIPTS / "train.py"), "--data-dir", str(small_data), "--out",
            str(tmp_path), "--model", "SimpleCNN", "--device", "cpu"]
    done = kill_after(base + ["--batch-per-gpu", "4", "--epochs", "6"],
                      tmp_path / "state" / "epochs.jsonl", 2)
    assert 2 <= done < 6
    again = subprocess.run(base + ["--batch-per-gpu", "8", "--epochs", "3"], capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["resumed_at_epoch"] is None and run["global_batch"] == 8
    assert [(e["epoch"], e["steps"]) for e in records(tmp_path / "epochs.jsonl")] == [
        (1, 50), (2, 50), (3, 50)]  # 400 images / 8: every epoch at the new batch
    log = (tmp_path / "train.log").read_text()
    assert "other settings (batch_per_gpu 4 -> 8): starting over" in log
    assert "Epoch 1/6" not in log  # the old attempt's lines stayed with the old state
    aside = list(tmp_path.glob("superseded-*"))
    assert len(aside) == 1 and len(records(aside[0] / "epochs.jsonl")) == done


def test_fewer_epochs_than_a_killed_run_finished_are_refused(small_data, tmp_path):
    base = [sys.executable, str(SCRIPTS / "train.py"), "--data-dir", str(small_data), "--out",
            str(tmp_path), *COMMON]
    done = kill_after(base + ["--epochs", "8"],
                      tmp_path / "state" / "epochs.jsonl", 3)
    proc = subprocess.run(base + ["--epochs", "2"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 2
    assert f"{done} epochs of this run are already finished" in proc.stderr
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "failed"
    assert len(records(tmp_path / "state" / "epochs.jsonl")) == done  # nothing was dropped


def test_a_time_limit_stops_at_an_epoch_boundary_and_the_rerun_continues(small_data, tmp_path):
    # 6 s in all, 30 s kept for the end of the job: whatever the machine's speed, the run stops
    # after its first epoch, before the limit, with its backup in place
    window = ["--breakdown-steps", "3"]
    proc = train(small_data, tmp_path, "--epochs", "30", "--time-limit-min", "0.1", *window)
    assert proc.returncode == 7, proc.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "timeout" and run["epochs_completed"] == 1
    assert "stopped after epoch 1 of 30" in run["failure"]
    assert (tmp_path / "state" / "backup").is_dir()
    proc = train(small_data, tmp_path, "--epochs", "3", *window)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["status"], run["resumed_at_epoch"]) == ("completed", 2)
    assert [a["status"] for a in records(tmp_path / "attempts.jsonl")] == ["timeout", "completed"]
    # the window traced the first epoch, in the first attempt: the resumed one keeps that
    # trace and reads it (it was deleted, and the note blamed the profiler)
    breakdown = json.loads((tmp_path / "breakdown.json").read_text())
    assert breakdown["summary"]["steps"] > 0 and breakdown["window_s"] > 0
    assert not [n for n in breakdown["notes"] if "trace" in n]


def test_launch_records_a_training_process_killed_by_a_signal(small_data, tmp_path):
    log = tmp_path / "job.log"
    args = [sys.executable, str(SCRIPTS / "launch.py"), "--record", str(tmp_path), "--log",
            str(log), "--", sys.executable, str(SCRIPTS / "train.py"), "--data-dir",
            str(small_data), "--out", str(tmp_path), *COMMON, "--epochs", "50"]
    launcher = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    live = tmp_path / "state" / "epochs.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and not (live.exists() and live.read_text().count("\n") >= 1):
        time.sleep(0.05)
    child = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True, text=True)
    os.kill(int(child.stdout.split()[0]), signal.SIGKILL)  # as the OOM killer would
    assert launcher.wait(timeout=120) == 0  # recorded: the job succeeds
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "killed" and "killed by SIGKILL" in run["failure"]
    assert str(log) in run["failure"] and run["epochs_completed"] >= 1
    assert records(tmp_path / "attempts.jsonl")[-1]["status"] == "killed"
    # launch.py's record says where the job's time went as far as it knows
    assert {"job_start", "rule_start", "recorded"} <= set(run["phases"])
    assert run["job_s"] > 0 and run["overhead_s"] is None  # no training time recorded


def test_the_record_says_where_the_jobs_time_went(small_data, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "launch.py"), "--record", str(tmp_path), "--",
         sys.executable, str(SCRIPTS / "train.py"), "--data-dir", str(small_data), "--out",
         str(tmp_path), *COMMON, "--epochs", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    phases = run["phases"]
    # every phase of a completed run outside SLURM, in the order the job reached them
    # (the job's start is the rule's: no SLURM job, no Snakemake job step)
    assert list(phases) == ["job_start", "rule_start", "interpreter", "imports", "model",
                            "data", "first_step", "last_step", "evaluated", "recorded"]
    times = list(phases.values())
    assert times == sorted(times) and phases["job_start"] == phases["rule_start"]
    assert phases["last_step"] - phases["first_step"] == pytest.approx(run["fit_seconds"],
                                                                       abs=0.05)
    assert run["job_s"] == pytest.approx(phases["recorded"] - phases["job_start"], abs=0.002)
    assert run["overhead_s"] == pytest.approx(run["job_s"] - run["fit_seconds"], abs=0.002)
    assert 0 < run["overhead_fraction"] < 1


def test_launch_stops_a_training_still_running_before_the_time_limit(small_data, tmp_path):
    # a training frozen with SIGSTOP as soon as it starts never reaches an epoch boundary
    # (an epoch longer than the time left); the watchdog stops it 20 s before the limit of
    # 30 s, records a timeout and the job ends well (exit 0) before the limit
    args = [sys.executable, str(SCRIPTS / "launch.py"), "--record", str(tmp_path),
            "--time-limit-min", "0.5", "--", sys.executable, str(SCRIPTS / "train.py"),
            "--data-dir", str(small_data), "--out", str(tmp_path), *COMMON, "--epochs", "50"]
    started = time.time()
    launcher = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
    child = ""
    while not child and launcher.poll() is None:
        child = subprocess.run(["pgrep", "-P", str(launcher.pid)], capture_output=True,
                               text=True).stdout.strip()
    os.kill(int(child), signal.SIGSTOP)
    _, stderr = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, stderr
    assert time.time() - started < 30  # ended before the time limit
    assert "still running 20 s before the job's time limit" in stderr
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "timeout" and run["epochs_completed"] == 0
    assert "(inside epoch 1): stopped so that the job ends in time" in run["failure"]
    assert not os.path.exists(f"/proc/{child}") or "zombie" in open(f"/proc/{child}/status").read()


def test_train_log_is_closed_and_stdout_restored_after_a_run(small_data, tmp_path, monkeypatch):
    import train as train_script

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # device gpu fails after the log is open
    before = sys.stdout
    code = train_script.main(["--data-dir", str(small_data), "--out", str(tmp_path),
                              "--model", "SimpleCNN", "--device", "gpu", "--epochs", "1"])
    assert code == 3 and sys.stdout is before
    open_files = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{fd}")]
    assert not [f for f in open_files if f.endswith("train.log")]
    assert "TensorFlow sees 0" in json.loads((tmp_path / "run.json").read_text())["failure"]


@pytest.fixture(scope="module")
def stopped_run(small_data, tmp_path_factory):
    """A run folder stopped after epoch 1 with its state kept: a time limit of 6 s (30 s
    kept for the end of the job) stops it there whatever the machine's speed."""
    out = tmp_path_factory.mktemp("stopped")
    first = train(small_data, out, "--epochs", "2", "--time-limit-min", "0.1")
    assert first.returncode == 7, first.stderr[-3000:]
    assert (out / "state" / "backup").is_dir()
    return out


def test_a_resumed_run_trains_on_the_order_an_uninterrupted_one_does(small_data, stopped_run,
                                                                    one_replica_run, tmp_path):
    """Epoch 2 of a run stopped after epoch 1 and resumed sees the batches epoch 2 of a run
    never stopped sees (not epoch 1's order again): on CPUs its loss is the same number.
    The run never stopped: one_replica_run, the same flags (--gpus 1 is the default)."""
    shutil.copytree(stopped_run, tmp_path / "resumed")
    resumed = train(small_data, tmp_path / "resumed", "--epochs", "2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((tmp_path / "resumed" / "run.json").read_text())["resumed_at_epoch"] == 2

    def seen(run):
        return [(e["epoch"], e["loss"], e["accuracy"]) for e in records(run / "epochs.jsonl")]

    assert seen(tmp_path / "resumed") == seen(one_replica_run)


def damage(state, how: str) -> None:
    """A saved state broken as a crash, a bad disk or a stray write leaves it."""
    if how == "settings not UTF-8":
        (state / "settings.json").write_bytes(b"\xff\xfe{garbage")
    elif how == "checkpoint cut":
        data = next(p for p in (state / "backup").rglob("*.data-*"))
        data.write_bytes(data.read_bytes()[:100])
    elif how == "binary records":
        (state / "epochs.jsonl").write_bytes(b'{"epoch": 1, "seconds": 1.0}\n\x00\xff\xfe\n')
    elif how == "records with a gap":
        (state / "epochs.jsonl").write_text('{"epoch": 2, "seconds": 1.0}\n')


@pytest.mark.parametrize("how, said", [
    ("settings not UTF-8", "settings.json cannot be read ("),
    ("checkpoint cut", "cannot be read"),
    ("binary records", "epochs.jsonl line 2 is not a JSON object (cut or damaged)"),
    ("records with a gap", "epochs.jsonl holds epochs [2], not 1 to 1"),
])
def test_a_damaged_state_is_moved_aside_and_the_run_starts_over(small_data, stopped_run,
                                                                tmp_path, how, said):
    shutil.copytree(stopped_run, tmp_path, dirs_exist_ok=True)
    damage(tmp_path / "state", how)
    again = train(small_data, tmp_path, "--epochs", "2")
    assert again.returncode == 0, again.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "completed" and run["resumed_at_epoch"] is None
    assert [e["epoch"] for e in records(tmp_path / "epochs.jsonl")] == [1, 2]
    assert "the saved state cannot be used (" in run["state_note"] and said in run["state_note"]
    aside = list(tmp_path.glob("state.corrupt-*"))
    assert len(aside) == 1 and str(aside[0]) in run["state_note"]
    log = (tmp_path / "train.log").read_text()
    assert "starting over" in log and "resuming from the backup" not in log


def test_a_full_disk_is_named_as_such_not_as_out_of_memory(small_data, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
    try:
        proc = train(small_data, disk / "run", "--epochs", "2")
        text = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "out of memory" not in text
        assert "no space left on device" in text
    finally:
        subprocess.run(["umount", str(disk)], check=True)


# each file a resumed run replaces, by the name it has and the one atomic.files writes first
# (TensorFlow's checkpoints are written the same way, the pointer to the new one last;
# a kill at their write was tried by hand with -P state/backup/chief/ckpt-2.index and
# resumed from the one before: left out of the suite for CI's time)
KILL_AT = {
    "settings": ("state/settings.json", "state/.settings.tmp.json"),
    "records": ("state/epochs.jsonl", "state/.epochs.tmp.jsonl"),
    "run record": ("run.json", ".run.tmp.json"),
}


@pytest.mark.parametrize("what", KILL_AT)
def test_a_kill_while_a_record_is_written_leaves_the_previous_one(small_data, stopped_run,
                                                                   tmp_path, what):
    """The run stopped after epoch 1 (backup, records and a timeout run.json kept) is resumed
    and killed in the middle of writing one of its files: what was there stays readable,
    and the next attempt resumes at epoch 2 (or, killed after the training, finishes)."""
    shutil.copytree(stopped_run, tmp_path, dirs_exist_ok=True)
    args = [sys.executable, str(SCRIPTS / "train.py"), "--data-dir", str(small_data), "--out",
            str(tmp_path), *COMMON, "--epochs", "2"]
    killed = killed_at_write(args, tmp_path, *KILL_AT[what])
    assert killed.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), killed.stderr[-3000:]
    assert json.loads((tmp_path / "state" / "settings.json").read_text())["batch_per_gpu"] == 8
    assert [e["epoch"] for e in records(tmp_path / "state" / "epochs.jsonl")][:1] == [1]
    assert json.loads((tmp_path / "run.json").read_text())["status"] == "timeout"

    again = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "completed" and run["state_note"] is None
    # killed after its training, the run resumes with nothing left to train
    assert run["resumed_at_epoch"] == (3 if what == "run record" else 2)
    assert [e["epoch"] for e in records(tmp_path / "epochs.jsonl")] == [1, 2]
    if what == "run record":
        assert "holds all 2 epochs" in (tmp_path / "train.log").read_text()


BAD_MODELS = {
    "wrong classes": ("from tensorflow import keras\n\n"
                      "def build(input_shape, num_classes):\n"
                      "    inputs = keras.Input(shape=input_shape)\n"
                      "    x = keras.layers.GlobalAveragePooling2D()(inputs)\n"
                      "    return keras.Model(inputs, keras.layers.Dense(num_classes + 1)(x))\n",
                      "outputs shape (None, 11), but the data has 10 classes: expected "
                      "(None, 10)"),
    "Keras 3 model": ("import keras\n\n"
                      "def build(input_shape, num_classes):\n"
                      "    inputs = keras.Input(shape=input_shape)\n"
                      "    x = keras.layers.GlobalAveragePooling2D()(inputs)\n"
                      "    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))\n",
                      "not a model of the Keras this point trains with (Keras 2: tf_keras "
                      "2.21.0): it is a Keras 3 model: set training.keras to 3"),
    "raises": ("def build(input_shape, num_classes):\n"
               "    raise ValueError('depth must be even')\n",
               "raised ValueError: depth must be even"),
}


@pytest.mark.parametrize("what", BAD_MODELS)
def test_your_own_model_that_does_not_fit_is_a_failed_run_with_the_reason(small_data,
                                                                         tmp_path, what):
    code, reason = BAD_MODELS[what]
    (tmp_path / "nets.py").write_text(code)
    builder = f"{tmp_path / 'nets.py'}:build"
    proc = run_script("train.py", "--data-dir", str(small_data), "--out", str(tmp_path / "run"),
                      "--model", "Net", "--model-from", builder, "--device", "cpu",
                      "--batch-per-gpu", "8", "--epochs", "1")
    assert proc.returncode == 2, proc.stderr[-3000:]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "failed" and run["model_from"] == builder
    assert run["failure"].startswith(f"model {builder} ") and reason in run["failure"]
    assert "\n" not in run["failure"]
