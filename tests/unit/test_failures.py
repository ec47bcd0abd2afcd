"""Failure handling below the workflow: attempt history, planning checks, data checks,
tables that name what they lack, plots that draw labels literally."""

from __future__ import annotations

import copy
import gzip
import json
import struct

import aggregate
import make_synthetic_cifar
import numpy as np
import pandas as pd
import prepare_data
import pytest
import tabulate_run

from dlscale.core import contract
from dlscale.core.schema import validate
from dlscale.data.datasets import DATASETS, DatasetError
from dlscale.data.sources import _cifar_python_batch, parse_idx, read_idx_dataset
from dlscale.jobs import outcomes
from dlscale.jobs.slurm import parse_duration as parse_slurm_duration
from dlscale.plan.sweep import SweepError, plan_sweep
from dlscale.train.resume import prepare_state
from dlscale.train.training import RunError


def points_of(config: dict):
    """The sweep's points (plan_sweep without its notes)."""
    return plan_sweep(config)[0]


def write_attempts(folder, *statuses):
    for status in statuses:
        contract.append_attempt(folder, {"status": status})


@pytest.mark.parametrize("statuses, attempt, factor", [
    ((), 1, 1),
    (("completed",), 1, 1),
    (("failed",), 2, 1),                          # failed: planned again
    (("failed", "completed"), 2, 1),              # then stays done
    (("failed", "completed", "completed"), 2, 1),  # a forced rerun that completes: still done
    (("timeout",), 2, 2),                         # twice the runtime after one timeout
    (("timeout", "timeout"), 3, 3),
    (("timeout", "completed"), 2, 1),             # back to the configured runtime
    (("completed", "killed"), 2, 1),
    (("out_of_memory",), 1, 1),                   # a result: not planned again (issue 98)
    (("failed", "out_of_memory"), 2, 1),
])
def test_attempt_and_runtime_factor_follow_the_history(tmp_path, statuses, attempt, factor):
    write_attempts(tmp_path, *statuses)
    assert outcomes.planned_attempt(tmp_path) == attempt
    assert outcomes.runtime_factor(tmp_path) == factor


def test_a_requeued_job_that_completed_is_not_planned_again(tmp_path):
    # SLURM requeued the job: launch.py recorded `killed` (SIGTERM), then the same job ran
    # again with the same --attempt and completed
    contract.append_attempt(tmp_path, {"status": "killed", "attempt": 1})
    contract.append_attempt(tmp_path, {"status": "completed", "attempt": 1})
    assert outcomes.planned_attempt(tmp_path) == 1


def test_a_requeued_job_plans_the_attempt_it_was_submitted_with(tmp_path, monkeypatch):
    contract.append_attempt(tmp_path, {"status": "failed", "attempt": 1,
                                       "env": {"SLURM_JOB_ID": "3"}})
    contract.append_attempt(tmp_path, {"status": "killed", "attempt": 2,
                                       "env": {"SLURM_JOB_ID": "4"}})
    monkeypatch.setenv("SLURM_JOB_ID", "4")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")
    assert outcomes.planned_attempt(tmp_path) == 3  # job 4 before its requeue
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert outcomes.planned_attempt(tmp_path) == 2  # job 4 requeued: what it was given


def test_a_kill_between_the_attempt_line_and_run_json_plans_the_point_again(
        tmp_path, monkeypatch):
    """The attempt line goes first: a process killed before run.json leaves the point
    without its record (Snakemake trains it again) and its attempt counted, never a
    failed record whose attempt is missing (planned as done for ever)."""
    def killed(path, data):
        raise KeyboardInterrupt  # the process ends here

    monkeypatch.setattr(contract, "write_json_atomic", killed)
    record = contract.RunRecord.ending(contract.Status.FAILED, "NaN loss at epoch 1")
    with pytest.raises(KeyboardInterrupt):
        record.write(tmp_path)
    assert not (tmp_path / contract.RUN_JSON).exists()
    assert [a["status"] for a in contract.read_attempts(tmp_path)] == ["failed"]
    assert outcomes.planned_attempt(tmp_path) == 2


def test_a_cut_attempt_line_does_not_hide_the_others(tmp_path):
    write_attempts(tmp_path, "failed")
    with open(tmp_path / contract.ATTEMPTS, "a") as handle:
        handle.write('{"status": "tim')
    assert outcomes.planned_attempt(tmp_path) == 2


@pytest.mark.parametrize("text, seconds", [
    ("0:45", 45), ("5:00", 300), ("1:05:00", 3900), ("2-01:00:00", 176400),
    ("UNLIMITED", None), ("NOT_SET", None), ("", None)])
def test_squeue_time_left(text, seconds):
    assert parse_slurm_duration(text) == seconds


SETTINGS = {"model": "SimpleCNN", "gpus": 1, "strategy": "mirrored", "batch_per_gpu": 16,
            "base_lr": 0.01, "lr_scaling": "linear", "warmup_epochs": 0, "momentum": 0,
            "precision": "float32", "seed": 42, "synthetic": False, "steps_per_epoch": None,
            "image_shape": [32, 32, 3], "data_sha256": "ab"}


def saved_state(tmp_path, epochs_done):
    state = tmp_path / "state"
    prepare_state(state, SETTINGS, epochs=6)
    (state / "epochs.jsonl").write_text("".join(
        json.dumps({"epoch": e, "seconds": 1}) + "\n" for e in range(1, epochs_done + 1)))
    (state / "backup").mkdir()
    return state


def test_same_settings_keep_the_state_and_more_epochs_continue(tmp_path):
    state = saved_state(tmp_path, 2)
    assert prepare_state(state, SETTINGS, epochs=10) is None
    assert (state / "backup").is_dir()


def test_other_settings_move_the_state_aside_and_say_what_changed(tmp_path):
    state = saved_state(tmp_path, 2)
    note = prepare_state(state, {**SETTINGS, "batch_per_gpu": 32}, epochs=4)
    assert "batch_per_gpu 16 -> 32" in note and "starting over" in note
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("superseded-")]
    assert len(aside) == 1 and (aside[0] / "backup").is_dir()
    assert not (state / "backup").exists()
    assert json.loads((state / "settings.json").read_text())["batch_per_gpu"] == 32


def test_fewer_epochs_than_finished_are_refused(tmp_path):
    state = saved_state(tmp_path, 3)
    with pytest.raises(RunError, match="3 epochs of this run are already finished .* "
                                       "--epochs is 2"):
        prepare_state(state, SETTINGS, epochs=2)


def config(**sections):
    config = copy.deepcopy(sections)
    validate(config)
    return config


def test_a_global_batch_larger_than_the_training_images_fails_at_planning():
    with pytest.raises(SweepError, match=r"point SimpleCNN/gpus2/rep1: global batch 400 "
                       r"\(batch_per_gpu 200 x 2 GPUs\) is larger than the 320 training images "
                       r"of data.limit_train"):
        points_of(config(data={"limit_train": 320}, sweep={"models": ["SimpleCNN"], "gpus": [1, 2]},
                      training={"batch_per_gpu": 200}))
    # without a limit the dataset's own size counts
    with pytest.raises(SweepError, match="60000 training images of fashion_mnist"):
        points_of(config(data={"dataset": "fashion_mnist"}, sweep={"models": ["SimpleCNN"],
                      "gpus": [4]}, training={"batch_per_gpu": 20000}))


def test_a_batch_search_on_cpus_and_a_limit_beyond_the_dataset_fail_at_planning():
    with pytest.raises(SweepError, match="batch_per_gpu auto searches on a GPU"):
        points_of(config(sweep={"models": ["SimpleCNN"]},
                      training={"batch_per_gpu": "auto", "device": "cpu"}))
    with pytest.raises(SweepError, match="data.limit_train is 70000 but cifar10 has 50000"):
        points_of(config(data={"limit_train": 70000}, sweep={"models": ["SimpleCNN"]}))


# --- data ---------------------------------------------------------------------------------

def idx(array: np.ndarray) -> bytes:
    return bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape) + \
        array.astype(np.uint8).tobytes()


def idx_folder(tmp_path, train_labels):
    for prefix, labels in (("train", train_labels), ("t10k", np.arange(4) % 10)):
        images = np.zeros((len(labels), 28, 28), np.uint8)
        (tmp_path / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx(images)))
        (tmp_path / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(
            gzip.compress(idx(np.asarray(labels))))
    return tmp_path


def test_idx_labels_outside_the_classes_are_refused(tmp_path):
    folder = idx_folder(tmp_path, [1, 2, 12, 3])
    with pytest.raises(DatasetError, match=r"\(train labels\) has label 12 at index 2: expected "
                                           r"integers 0\.\.9"):
        read_idx_dataset(folder, DATASETS["fashion_mnist"])


def test_prepare_data_names_the_bad_label_in_one_line_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "src").mkdir()
    folder = idx_folder(tmp_path / "src", [1, 12])
    with pytest.raises(SystemExit) as exit_info:
        prepare_data.main(["--dataset", "mnist", "--source", str(folder), "--image-size", "28",
                           "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 1
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "has label 12 at index 1" in error
    assert not (tmp_path / "out").exists()


def test_an_idx_header_whose_dimensions_overflow_is_a_corrupt_file():
    header = bytes([0, 0, 8, 3]) + struct.pack(">3I", 2**32 - 1, 2**32 - 1, 2**32 - 1)
    with pytest.raises(DatasetError, match="x.idx is truncated or corrupt: 0 payload bytes, "
                                           "expected 79228162458924105385300197375"):
        parse_idx(header, "x.idx")


@pytest.mark.parametrize("bad, shown", [(3.5, "3.5 (float)"), (b"3", "b'3' (bytes)"),
                                        (True, "True (bool)")])
def test_cifar_labels_that_are_not_integers_are_refused(bad, shown):
    rows = np.zeros((3, 3072), np.uint8)
    batch = make_synthetic_cifar.py2_pickle({b"data": rows, b"labels": [1, bad, 2]})
    with pytest.raises(DatasetError, match=f"CIFAR-10 batch 'data_batch_1' has label "
                                           f"{shown.replace('(', '.').replace(')', '.')}"):
        _cifar_python_batch(batch, "data_batch_1")


# --- tables and plots -----------------------------------------------------------------------

def test_aggregate_names_the_file_and_the_missing_columns(tmp_path, capsys):
    table = tmp_path / "run1.csv"
    pd.DataFrame({"model": ["M"], "gpus": [1], "epoch": [1], "seconds": [2.0], "loss": [1.0],
                  "accuracy": [0.5]}).to_csv(table, index=False)
    assert aggregate.main([str(table), "--out-dir", str(tmp_path / "t")]) == 1
    assert f"{table} lacks the column(s) images_per_epoch" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("content, words", [
    ('{"model": "M"}', "lacks the key(s) record_version, status"),
    ('{"record_version": 1, "status": "completed", "fail', "is not a JSON run record"),
    (b"\xff\xfe\x00garbage", "is not a JSON run record"),
])
def test_a_damaged_run_record_is_a_failed_row_and_the_point_is_planned_again(
        tmp_path, capsys, content, words):
    (tmp_path / "train.log").write_text("Epoch 1/1\n4/4 - 1s - loss: 2.0 - accuracy: 0.2\n")
    (tmp_path / "epochs.jsonl").write_text("")
    run_json = tmp_path / "run.json"
    run_json.write_bytes(content if isinstance(content, bytes) else content.encode())
    contract.append_attempt(tmp_path, {"status": "completed"})
    assert outcomes.planned_attempt(tmp_path) == 1
    out = tmp_path / "e.csv"
    assert tabulate_run.main([str(tmp_path), "--meta", "run=M/gpus1/rep1", "-o", str(out)]) == 0
    assert f"{run_json} {words}" in capsys.readouterr().err
    row = pd.read_csv(out).iloc[0]
    assert row["status"] == "failed" and f"{run_json} {words}" in row["failure"]
    assert outcomes.planned_attempt(tmp_path) == 2  # the next run trains it again


def test_a_failed_run_without_epochs_is_one_row_and_listed_as_failed(tmp_path):
    (tmp_path / "train.log").write_text("dlscale train: error before the first epoch\n")
    (tmp_path / "epochs.jsonl").write_text("")
    record = contract.RunRecord.ending(contract.Status.FAILED,
                                       "2 GPU(s) asked for but TensorFlow sees 0")
    (tmp_path / "run.json").write_text(json.dumps(record))
    out = tmp_path / "epochs.csv"
    assert tabulate_run.main([str(tmp_path), "--meta", "run=M/gpus2/rep1", "--meta", "model=M",
                              "--meta", "gpus=2", "-o", str(out)]) == 0
    ok = pd.DataFrame({"run": ["M/gpus1/rep1"] * 2, "model": "M", "gpus": 1, "epoch": [1, 2],
                       "seconds": 3.0, "loss": 1.0, "accuracy": 0.5, "images_per_epoch": 300})
    ok.to_csv(tmp_path / "ok.csv", index=False)
    assert aggregate.main([str(tmp_path / "ok.csv"), str(out), "--out-dir",
                           str(tmp_path / "t")]) == 0
    failed = pd.read_csv(tmp_path / "t" / "failed.csv")
    assert list(failed["run"]) == ["M/gpus2/rep1"] and list(failed["status"]) == ["failed"]
    assert "TensorFlow sees 0" in failed["problem"][0]
    assert list(pd.read_csv(tmp_path / "t" / "scaling.csv")["gpus"]) == [1]
    assert len(pd.read_csv(tmp_path / "t" / "epochs.csv")) == 2


def test_labels_are_drawn_literally_and_missing_points_are_named(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from dlscale.reporting import plots as plot_scaling
    from dlscale.reporting.analysis import SCALING_COLUMNS

    labels = ["Bob's $5 & $6 study", "_under_score", "100% {braces}"]
    table = pd.DataFrame([{c: 1.0 for c in SCALING_COLUMNS} | {"series": label, "gpus": 1,
                                                                  "nodes": 1}
                          for label in labels])
    runs = pd.DataFrame({"run": ["a", "b"], "counted": [True, False],
                         "problem": ["", "timeout: stopped after epoch 3"]})
    captured = {}
    original = plot_scaling.save

    def keep(fig, stem):
        captured.setdefault(stem.name, [t.get_text() for ax in fig.axes if ax.get_legend()
                                        for t in ax.get_legend().get_texts()]
                            + [t.get_text() for t in fig.texts])
        return original(fig, stem)

    plot_scaling.save = keep
    try:
        plot_scaling.plot_all(table, tmp_path, "subtitle", runs)
    finally:
        plot_scaling.save = original
    texts = captured["epoch_time"]
    assert [t.replace("\u200b", "") for t in texts[:3]] == sorted(labels)
    assert "1 of 2 run(s) failed or do not count and are not drawn: b (timeout)" in texts[-1]
    assert (tmp_path / "epoch_time.png").stat().st_size > 10_000


def test_a_time_limit_guard_that_cannot_ask_squeue_says_so(monkeypatch):
    from dlscale.train.timelimit import job_deadline

    # a job id SLURM does not know: squeue (or its absence) cannot give the end
    monkeypatch.setenv("SLURM_JOB_ID", "999999999")
    notes = []
    assert job_deadline(None, 0.0, notes) is None
    assert len(notes) == 1 and notes[0].startswith(
        "the time-limit guard cannot read the job's end (squeue -h -j 999999999")
    assert job_deadline(2.0, 100.0, []) == 100.0 + 120.0  # --time-limit-min still applies


def test_a_record_written_before_records_had_a_version_is_read_and_upgraded(tmp_path):
    # the keys the previous dlscale wrote for a killed run (launch.py), and no version
    old = {"status": "killed", "failure": "the training process was killed by SIGKILL",
           "epochs_completed": 2, "attempt": 1, "host": "n1", "env": {},
           "started": "2026-11-21T10:00:00+00:00", "finished": "2026-11-21T10:05:00+00:00"}
    (tmp_path / "run.json").write_text(json.dumps(old))
    record = contract.RunRecord.read(tmp_path / "run.json")
    assert record.status is contract.Status.KILLED and record["upgraded_from_version"] == 0
    assert record["images_per_epoch"] is None and record["notes"] == []


@pytest.mark.parametrize("script, words", [
    ("run_command.py", "a rerun starts the command over, with more time"),
    ("train.py", "a rerun continues from the last finished epoch, with more time")])
def test_a_timeout_says_what_a_rerun_will_do_for_a_command_and_for_dlscales_training(
        tmp_path, script, words):
    """launch.py's record of a training stopped before the job's time limit: dlscale's
    training resumes from its backup, a command of yours is started over."""
    import json
    from datetime import UTC, datetime

    from dlscale.launch.launcher import Plan, record_end

    plan = Plan(command=script == "run_command.py")
    record_end(tmp_path, -15, None, datetime.now(UTC), plan, late=True)
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "timeout" and words in run["failure"]
