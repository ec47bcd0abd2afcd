"""scripts/train.py with Keras 3 (issue 44), on TensorFlow (MirroredStrategy over logical
CPU devices) and on JAX (keras.distribution.DataParallel over XLA host devices): real
TensorFlow, Keras 3 and JAX, two replicas each."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest
from conftest import SCRIPTS, run_script
from helpers.records import at_first_write, killed_at_write, records

BACKENDS = ["tensorflow", "jax"]
DISTRIBUTION = {"tensorflow": "tf.distribute.MirroredStrategy",
                "jax": "keras.distribution.DataParallel"}


def flags(data, out, backend, *more):
    return ["--data-dir", str(data), "--out", str(out), "--model", "SimpleCNN", "--device",
            "cpu", "--batch-per-gpu", "8", "--gpus", "2", "--keras", "3", "--backend", backend,
            *more]


def train(*args):
    return run_script("train.py", *args)


@pytest.fixture(scope="module")
def stopped(small_data, tmp_path_factory):
    """backend -> a run folder stopped after epoch 1 by a 6 s time limit, its state kept
    (made once per backend)."""
    made = {}

    def run_of(backend):
        if backend not in made:
            out = tmp_path_factory.mktemp(f"stopped-{backend}")
            first = train(*flags(small_data, out, backend, "--epochs", "2",
                                 "--time-limit-min", "0.1"))
            assert first.returncode == 7, first.stderr[-3000:]
            assert (out / "state" / "backup" / "training_metadata.json").exists()
            made[backend] = out
        return made[backend]

    return run_of


@pytest.fixture(scope="module")
def whole(small_data, tmp_path_factory):
    """backend -> the run folder of the same point trained 2 epochs uninterrupted, in one
    process (made once per backend)."""
    made = {}

    def run_of(backend):
        if backend not in made:
            out = tmp_path_factory.mktemp(f"whole-{backend}")
            done = train(*flags(small_data, out, backend, "--epochs", "2"))
            assert done.returncode == 0, done.stderr[-3000:]
            made[backend] = out
        return made[backend]

    return run_of


def seen(folder):
    """(epoch, loss, accuracy) of each epoch a run folder recorded."""
    return [(e["epoch"], round(e["loss"], 5), round(e["accuracy"], 5))
            for e in records(folder / "epochs.jsonl")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_keras3_resumes_where_it_stopped_and_trains_as_an_uninterrupted_run(
        small_data, stopped, whole, tmp_path, backend):
    """Epoch 2 after a resume sees the weights, optimizer and batch order an uninterrupted
    run's epoch 2 sees: on CPUs its loss is the same number. The record names Keras 3,
    the backend and the distribution."""
    out = stopped(backend)
    shutil.copytree(out, tmp_path / "resumed")
    resumed = train(*flags(small_data, tmp_path / "resumed", backend, "--epochs", "2"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    run = json.loads((tmp_path / "resumed" / "run.json").read_text())
    assert run["resumed_at_epoch"] == 2 and run["status"] == "completed"
    assert run["keras"].startswith("3.") and run["versions"]["keras"].startswith("keras 3.")
    assert (run["backend"], run["distribution"], run["replicas"]) == (
        backend, DISTRIBUTION[backend], 2)
    assert (run["versions"]["jax"] is not None) == (backend == "jax")
    assert 0.0 <= run["test_accuracy"] <= 1.0 and run["test_images"] == 100

    assert seen(tmp_path / "resumed") == seen(whole(backend))
    assert "resuming from the backup" in (tmp_path / "resumed" / "train.log").read_text()


def test_a_jax_run_like_an_earlier_one_compiles_nothing_and_trains_the_same(small_data, whole,
                                                                          tmp_path):
    """With --compile-cache (training.compile_cache), what JAX compiles is kept in the
    folder and a later run of the same shapes loads it: the second run adds nothing to
    the cache, and both train as a run without the cache does."""
    cache = tmp_path / "compile cache"  # a space: the path reaches JAX as it is
    records_of = []
    for n in (1, 2):
        out = tmp_path / f"run{n}"
        done = train(*flags(small_data, out, "jax", "--epochs", "2", "--compile-cache",
                            str(cache)))
        assert done.returncode == 0, done.stderr[-3000:]
        records_of.append(json.loads((out / "run.json").read_text()))
        assert seen(out) == seen(whole("jax"))
    first, second = (r["compile_cache"] for r in records_of)
    assert first["dir"] == str(cache) and first["entries_before"] == 0
    assert first["entries_added"] > 0  # the step, the evaluation, the initializers
    assert second == {"dir": str(cache), "entries_before": first["entries_added"],
                      "entries_added": 0}
    assert records_of[0]["test_accuracy"] == records_of[1]["test_accuracy"]
    assert json.loads((whole("jax") / "run.json").read_text())["compile_cache"] is None


def test_jax_over_two_processes_trains_the_batches_one_process_with_two_devices_does(
        small_data, whole, tmp_path):
    """The point across two nodes, as launch.py starts it outside SLURM: two processes of
    one XLA host device each, met through jax.distributed (the coordinator is TF_CONFIG's
    first worker). Each epoch's loss is the one of the same point in one process holding
    both devices; the test set's last images that do not divide over the processes are
    left out and said so; stopped after epoch 1 and started again, it resumes."""
    two = [sys.executable, str(SCRIPTS / "launch.py"), "--plan", '{"tasks": 2}', "--",
           sys.executable,
           str(SCRIPTS / "train.py"), *flags(small_data, tmp_path / "two", "jax", "--epochs",
                                              "2", "--nodes", "2")]
    stopped = subprocess.run([*two, "--time-limit-min", "0.1"], capture_output=True,
                             text=True, timeout=600)
    assert stopped.returncode == 7, stopped.stderr[-3000:]
    again = subprocess.run(two, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    run = json.loads((tmp_path / "two" / "run.json").read_text())
    assert (run["workers"], run["replicas"], run["resumed_at_epoch"]) == (2, 2, 2)
    assert run["notes"] == ["test loss and accuracy over 96 of the 100 test images: the last "
                            "4 do not divide over 2 processes"]

    assert seen(tmp_path / "two") == seen(whole("jax"))


def test_a_kill_while_keras3_saves_its_backup_leaves_the_one_before(small_data, stopped,
                                                                     tmp_path):
    """Killed at its first write of epoch 2's backup (Keras 3 writes it in place; dlscale
    writes it aside and renames it): the backup of epoch 1 stays, and the next attempt
    resumes at epoch 2."""
    backend = "jax"  # the backup callback is the same on both backends
    out = stopped(backend)
    shutil.copytree(out, tmp_path, dirs_exist_ok=True)
    args = [sys.executable, str(SCRIPTS / "train.py"),
            *flags(small_data, tmp_path, backend, "--epochs", "2")]
    killed = killed_at_write(args, tmp_path,
                             "state/backup/.latest.weights.h5.partial.weights.h5",
                             calls="write,pwrite64")
    assert killed.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL), killed.stderr[-3000:]
    assert (tmp_path / "state/backup/.latest.weights.h5.partial.weights.h5").exists()
    meta = json.loads((tmp_path / "state/backup/training_metadata.json").read_text())
    assert meta["epoch"] == 1
    again = train(*args[2:])
    assert again.returncode == 0, again.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["resumed_at_epoch"] == 2 and run["state_note"] is None


def test_keras3_prints_an_epochs_time_without_its_backup_so_the_log_agrees_with_the_records(
        small_data, stopped, tmp_path):
    """Keras 3 prints an epoch's line after every callback's epoch end, the backup's save
    among them (tf-keras before them): with the first write of epoch 2's backup held 3 s,
    the line still says the seconds recorded, and the runs table's cross-check is `ok`."""
    from dlscale.reporting.runtable import cross_check

    backend = "tensorflow"  # the backup and the printed line are the same on JAX
    out = stopped(backend)
    shutil.copytree(out, tmp_path, dirs_exist_ok=True)
    args = [sys.executable, str(SCRIPTS / "train.py"),
            *flags(small_data, tmp_path, backend, "--epochs", "2")]
    held = at_first_write(args, tmp_path, ["state/backup/.latest.weights.h5.partial.weights.h5"],
                          "write,pwrite64", "delay_exit=3000000")
    assert held.returncode == 0, held.stderr[-3000:]
    epochs = records(tmp_path / "epochs.jsonl")
    assert [e["epoch"] for e in epochs] == [1, 2]
    assert cross_check(tmp_path / "train.log", epochs, expect_epochs=True) == "ok"


def test_a_damaged_keras3_backup_is_moved_aside_and_the_run_starts_over(small_data, stopped,
                                                                       tmp_path):
    backend = "tensorflow"  # the check reads Keras 3's files, whatever the backend
    out = stopped(backend)
    shutil.copytree(out, tmp_path, dirs_exist_ok=True)
    weights = tmp_path / "state/backup/latest.weights.h5"
    weights.write_bytes(weights.read_bytes()[:2000])
    again = train(*flags(small_data, tmp_path, backend, "--epochs", "2"))
    assert again.returncode == 0, again.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["resumed_at_epoch"] is None and run["epochs_completed"] == 2
    assert "the saved state cannot be used (backup/latest.weights.h5 cannot be read (" in \
        run["state_note"]


@pytest.fixture(scope="module")
def odd_test_split(tmp_path_factory):
    """64 training and 33 test images at 16 px: with 2 replicas of 8 the test split ends on
    one image, fewer than the replicas."""
    import make_synthetic_cifar

    from dlscale.data import preparation

    root = tmp_path_factory.mktemp("odd")
    archive = make_synthetic_cifar.write_archive(root / "cifar.tar.gz", "python", 64, 33, 3)
    preparation.prepare("cifar10", archive, root / "data", 16, 2)
    return root / "data"


@pytest.mark.parametrize("backend", BACKENDS)
def test_keras3_evaluates_every_test_image_when_the_last_batch_is_smaller_than_the_replicas(
        odd_test_split, tmp_path, backend):
    """33 test images in global batches of 16 over 2 replicas: the last batch holds one
    image. MirroredStrategy would hand one replica an empty batch (oneDNN's convolution
    fails on it); it is evaluated on one device, and the accuracy is a count of 33."""
    done = run_script("train.py", *flags(odd_test_split, tmp_path, backend, "--epochs", "1"),
                      env={"TF_ENABLE_ONEDNN_OPTS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["status"], run["replicas"], run["test_images"]) == ("completed", 2, 33)
    hits = run["test_accuracy"] * 33
    assert abs(hits - round(hits)) < 1e-6, run["test_accuracy"]
    assert run["test_loss"] > 0


def test_profile_steps_on_jax_trace_those_steps_into_the_tensorboard_folder(small_data,
                                                                             tmp_path):
    """training.profile_steps on JAX was refused: Keras' TensorBoard callback profiles JAX
    from Python 3.12 only. dlscale's window traces them instead (jax.profiler), into the
    TensorBoard folder as its profile plugin reads it; steps past the first epoch are
    said, not silently dropped, and the breakdown's window steps aside."""
    out = tmp_path / "out"
    done = train("--data-dir", str(small_data), "--out", str(out), "--model", "SimpleCNN",
                 "--device", "cpu", "--batch-per-gpu", "8", "--gpus", "1", "--keras", "3",
                 "--backend", "jax", "--epochs", "1", "--steps-per-epoch", "4",
                 "--profile-steps", "3,9", "--breakdown-steps", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    traces = list((out / "tensorboard" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0, traces
    run = json.loads((out / "run.json").read_text())
    assert run["profile_steps"] == [3, 9] and run["tensorboard"] == "tensorboard"
    assert ("training.profile_steps [3, 9]: on JAX and PyTorch the trace stays in the first "
            "epoch (4 steps): steps 3 to 4 traced") in run["notes"], run["notes"]
    breakdown = json.loads((out / "breakdown.json").read_text())
    assert "no window: training.profile_steps holds the profiler" in breakdown["notes"]
