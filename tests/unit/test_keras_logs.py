"""Keras output of every version to epoch records."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from dlscale.logparse.formats.stated import settings_sequence
from dlscale.logparse.lines import printable, read_text
from dlscale.logparse.reader import compile_patterns, parse_file_runs, parse_runs, parse_text
from dlscale.logparse.runs import LogError

DATA = ROOT / "tests" / "data"
STUDY = DATA / "reference-study"


def one(text):
    return parse_text(text).rows()


def test_keras2_2021_verbose2():
    rows = one("Epoch 1/5\n196/196 - 45s - loss: 1.7626 - accuracy: 0.3536\n")
    assert rows == [{"epoch": 1, "epochs_total": 5, "seconds": 45.0, "seconds_resolution": 1.0,
                     "loss": 1.7626, "accuracy": 0.3536, "steps": 196, "samples": None}]


def test_tf_keras_2_21_verbose2_uses_the_precise_ms_per_epoch():
    row = one("Epoch 2/3\n4/4 - 1s - loss: 2.3112 - accuracy: 0.1133 - 878ms/epoch - "
              "219ms/step\n")[0]
    assert row["seconds"] == pytest.approx(0.878) and row["seconds_resolution"] == 1e-3
    assert row["seconds_per_step"] == pytest.approx(0.219) and row["epoch"] == 2


def test_keras3_verbose2():
    row = one("Epoch 1/1\n8/8 - 9s - 1s/step - accuracy: 0.0918 - loss: 2.6331\n")[0]
    assert (row["seconds"], row["accuracy"], row["loss"], row["steps"]) == (9.0, 0.0918,
                                                                            2.6331, 8)


def test_keras2_verbose1_progress_bar_with_validation():
    text = ("Epoch 1/2\n"
            "600/600 [==============================] - 2s 3ms/step - loss: 0.3012 - "
            "acc: 0.9100 - val_loss: 0.2 - val_acc: 0.93\n"
            "Epoch 2/2\n"
            "600/600 [==============================] - 3s 4ms/step - loss: 0.2 - acc: 0.95\n")
    rows = one(text)
    assert [r["seconds"] for r in rows] == [2.0, 3.0]
    assert rows[0]["accuracy"] == 0.91 and rows[0]["val_accuracy"] == 0.93
    assert rows[0]["seconds_per_step"] == pytest.approx(0.003)


def test_tf1_samples_and_overwritten_updates():
    text = ("Epoch 1/1\n"
            " 3200/60000 [>.............................] - ETA: 7s - loss: 0.9 - acc: 0.7\r"
            "60000/60000 [==============================] - 8s 131us/sample - loss: 0.2 - "
            "acc: 0.94\n")
    row = one(text)[0]
    assert (row["samples"], row["steps"], row["seconds"]) == (60000, None, 8.0)
    assert row["seconds_per_sample"] == pytest.approx(131e-6)


def test_other_output_is_ignored_and_a_cut_log_keeps_finished_epochs():
    text = ("2026-01-01 I tensorflow/core: something 3/4 done\n"
            "python ResNet50.py --epochs 5\n"
            "Epoch 1/5\n196/196 - 45s - loss: 1.7 - accuracy: 0.35\n"
            "Epoch 2/5\n 50/196 [=====>....] - ETA: 30s - loss: 1.6\n")
    log = parse_text(text, "job.out")
    assert [r["epoch"] for r in log.rows()] == [1]
    assert log.cut and log.cut_epoch == 2


def test_a_resumed_run_counts_each_epoch_once():
    text = ("Epoch 1/3\n4/4 - 1s - loss: 2.0 - accuracy: 0.2\nEpoch 2/3\n"
            "dlscale train: resuming from the backup in state/backup\n"
            "Epoch 2/3\n4/4 - 1s - loss: 1.5 - accuracy: 0.4\n"
            "Epoch 3/3\n4/4 - 1s - loss: 1.2 - accuracy: 0.5\n")
    log = parse_text(text)
    assert [r["epoch"] for r in log.rows()] == [1, 2, 3] and not log.cut


def test_a_file_without_epochs_is_an_error_naming_it():
    with pytest.raises(LogError, match="slurm-123.out: no finished epoch found"):
        parse_text("srun: error: node failure\n", "slurm-123.out")


def test_nan_loss_is_kept_as_nan():
    row = one("Epoch 1/1\n4/4 - 1s - loss: nan - accuracy: 0.1\n")[0]
    assert row["loss"] != row["loss"]


# --- real captured logs, read as they are stored ------------------------------------------

def test_keras3_logs_as_keras_writes_them_ansi_codes_and_all():
    verbose1 = read_text(DATA / "keras3" / "fit_verbose1.log")
    assert "\x1b[1m" in verbose1 and "\x08" in verbose1  # the stored bytes are untouched
    bar = parse_text(verbose1, "fit_verbose1.log")
    line = parse_text(read_text(DATA / "keras3" / "fit_verbose2.log"), "fit_verbose2.log")
    assert [(r["epoch"], r["steps"], r["accuracy"], r["loss"]) for r in bar.rows()] == [
        (1, 8, 0.0859, 2.4853), (2, 8, 0.1016, 2.4064), (3, 8, 0.1016, 2.3666)]
    assert [(r["accuracy"], r["loss"]) for r in line.rows()] == [
        (r["accuracy"], r["loss"]) for r in bar.rows()]  # the same training, both formats
    assert not bar.cut and not line.cut


def test_other_metric_names_a_loss_only_log_zero_second_epochs_and_printed_results():
    """tests/data/metric-names, as captured: sparse_categorical_accuracy is the accuracy;
    a regression's lines have none; Keras 3's `0s` takes its time from ms/step x steps;
    `Test accuracy: 0.0781` printed after fit is the test accuracy."""
    names = DATA / "metric-names"
    sparse = parse_text(read_text(names / "tfkeras_sparse_metric.log"), "sparse.log")
    assert [(r["accuracy"], r["sparse_categorical_accuracy"]) for r in sparse.rows()] == [
        (0.0859, 0.0859), (0.0898, 0.0898), (0.1055, 0.1055)]
    assert sparse.test == {"test_loss": 2.441, "test_accuracy": 0.0781}
    regression = parse_text(read_text(names / "keras3_loss_only.log"), "regression.log")
    assert [(r["seconds"], r["loss"], r.get("accuracy")) for r in regression.rows()] == [
        (1.0, 0.2675, None), (pytest.approx(0.096), 0.2313, None),
        (pytest.approx(0.192), 0.2231, None)]
    assert regression.test == {"test_loss": 0.2358}
    assert [r["seconds"] for r in parse_text(read_text(DATA / "keras3" / "fit_verbose2.log"),
                                             "k3.log").rows()] == pytest.approx(
        [0.4, 0.032, 0.064])  # "0s - 50ms/step", "0s - 4ms/step", "0s - 8ms/step" x 8


def test_the_studys_job_output_holds_three_runs_kept_apart():
    runs = parse_runs(read_text(STUDY / "ResNet50_all.out"), "ResNet50_all.out")
    assert [r.line for r in runs] == [1, 11, 21]
    assert [[e["seconds"] for e in r.rows()] for r in runs] == [
        [49, 45, 45, 45, 45], [26, 24, 24, 24, 24], [14, 12, 12, 12, 12]]
    assert [r.rows()[-1]["accuracy"] for r in runs] == [0.507, 0.5049, 0.501]
    assert not any(r.warnings or r.cut for r in runs)


def test_a_shorter_second_run_is_not_spliced_onto_the_first():
    lines = read_text(STUDY / "ResNet50_all.out").splitlines(keepends=True)
    text = "".join(lines[:10] + lines[10:16] + lines[20:])  # run 2 stops after epoch 3
    runs = parse_runs(text)
    assert [len(r.epochs) for r in runs] == [5, 3, 5]
    assert runs[1].rows()[-1]["accuracy"] == 0.4207 and runs[0].rows()[-1]["accuracy"] == 0.507


def test_a_run_header_begins_a_run_and_states_its_settings():
    runs = parse_runs(read_text(DATA / "course-headers" / "ResNet50_headers.out"))
    assert [r.settings for r in runs] == [{"gpus": g, "global_batch": 64 * g} for g in (1, 2, 4)]
    assert [len(r.epochs) for r in runs] == [3, 3, 3]
    err = settings_sequence(read_text(DATA / "course-headers" / "ResNet50_headers.err"))
    assert err == [{"gpus": 1}, {"gpus": 2}, {"gpus": 4}]  # TensorFlow's device lists


def test_settings_from_command_lines_and_keras2_epoch_lines():
    text = ("python ResNet50.py --epochs 2 --batch_size 512 --n_gpus 2\n"
            "Epoch 1/2\n25/25 - 14s - loss: 2.1255 - accuracy: 0.2195 - 14s/epoch - 544ms/step\n"
            "Epoch 2/2\n25/25 - 13s - loss: 2.0 - accuracy: 0.3 - 13s/epoch - 520ms/step\n"
            "python ResNet50.py --epochs=2 --batch-size=512 --num_gpus=4\n"
            "Epoch 1/2\n13/13 - 8s - loss: 2.2 - accuracy: 0.2 - 8s/epoch - 600ms/step\n"
            "Epoch 2/2\n13/13 - 7s - loss: 2.1 - accuracy: 0.25 - 7s/epoch - 550ms/step\n")
    runs = parse_runs(text)
    assert [r.settings for r in runs] == [{"epochs": 2, "batch_per_gpu": 512, "gpus": g}
                                          for g in (2, 4)]
    assert [r.rows()[0]["seconds"] for r in runs] == [14, 8]


def test_user_patterns_are_checked_and_used():
    patterns = compile_patterns({"gpus": r"running on (\d+) devices"})
    runs = parse_runs("running on 4 devices\nEpoch 1/1\n2/2 - 1s - loss: 1.0 - accuracy: 0.5\n",
                      patterns=patterns)
    assert runs[0].settings == {"gpus": 4}
    with pytest.raises(ValueError, match=r"external_runs\[0\].patterns.gpus: 'GPUs: \\d\+' "
                                         "has no group"):
        compile_patterns({"gpus": r"GPUs: \d+"}, "external_runs[0].patterns")
    with pytest.raises(ValueError, match="patterns.gpus: '\\(' is not a regular expression"):
        compile_patterns({"gpus": "("})


def test_an_earlier_epoch_inside_a_run_is_a_warning_naming_the_line():
    text = ("Epoch 1/3\n4/4 - 1s - loss: 2.0 - accuracy: 0.2\nEpoch 2/3\n"
            "4/4 - 1s - loss: 1.5 - accuracy: 0.4\nEpoch 2/3\n"
            "4/4 - 1s - loss: 1.4 - accuracy: 0.4\n"
            "Epoch 3/3\n4/4 - 1s - loss: 1.2 - accuracy: 0.5\n")
    runs = parse_runs(text, "job.out")
    assert len(runs) == 1 and [r["loss"] for r in runs[0].rows()] == [2.0, 1.4, 1.2]
    assert runs[0].warnings == ["job.out:5: epoch 2 comes again after epoch 2: taken as a resume "
                                "from an older backup, the later result replaces the earlier"]


@pytest.mark.parametrize("ending", [
    "196/196 - 45s - loss: 1.3539 - accur",         # no newline, inside a pair
    "196/196 - 45s - loss: 1.3539 - accuracy: 0.50",  # no newline, inside a number
    "196/196 - 45s - loss: 1.3539 - accur\n",       # a newline, but inside a pair
])
def test_a_last_line_without_its_end_leaves_the_epoch_unfinished(ending):
    lines = read_text(STUDY / "ResNet50_1gpu.out").splitlines(keepends=True)
    text = "".join(lines[:-1]) + ending
    log = parse_text(text, "cut.out")
    assert sorted(log.epochs) == [1, 2, 3, 4] and log.cut and log.cut_epoch == 5


def test_a_pattern_matching_something_that_is_not_a_number_is_a_warning():
    from dlscale.logparse.reader import compile_patterns

    patterns = compile_patterns({"gpus": r"running on (\S+) GPUs"})
    text = ("running on four GPUs\nEpoch 1/1\n4/4 - 1s - loss: 2.0 - accuracy: 0.2\n")
    runs = parse_runs(text, "job.out", patterns)
    assert "gpus" not in runs[0].settings
    assert runs[0].warnings == ["job.out:1: pattern gpus matched 'four', which is not a "
                                "number: ignored"]


# --- several tasks in one job output (tests/data/job-streams/README.md) ------------------

STREAMS = DATA / "job-streams"


@pytest.mark.parametrize("name, seconds", [
    ("srun_label.out", [0.744, 0.152]),
    ("mpirun_tag.out", [1.0, 0.160]),
    ("mpirun_timestamp.out", [1.0, 0.170]),
    ("srun_plain.out", [1.0]),
])
def test_each_task_is_a_stream_and_the_slowest_worker_sets_the_epoch_time(name, seconds):
    runs = parse_file_runs(str(STREAMS / name))
    assert len(runs) == 1
    run = runs[0]
    assert run.streams == 2 and run.settings == {"gpus": 2} and not run.cut
    assert [e["seconds"] for e in run.rows()] == pytest.approx(seconds)
    assert [e["loss"] for e in run.rows()] == [2.4706, 2.4098][:len(seconds)]
    test = (2.4401, 0.0938) if name == "srun_plain.out" else (2.3969, 0.0977)
    assert (run.test["test_loss"], run.test["test_accuracy"]) == test


def test_settings_the_job_script_prints_before_labelled_tasks_hold_for_their_run():
    [run] = parse_file_runs(str(STREAMS / "srun_label_header.out"))
    assert run.settings == {"gpus": 2, "epochs": 2} and run.streams == 2
    assert [e["seconds"] for e in run.rows()] == pytest.approx([0.581, 0.092])


def test_two_workers_with_the_same_label_are_two_workers_and_the_slower_counts():
    [run] = parse_file_runs(str(STREAMS / "srun_two_zero.out"))
    assert run.streams == 2 and run.settings == {"gpus": 2} and run.warnings == []
    assert [e["seconds"] for e in run.rows()] == pytest.approx([0.591, 0.104, 0.103])
    assert run.test == {"test_loss": 2.3722, "test_accuracy": 0.0977}
    # the same lines as a slower worker prints them: its epoch line after the faster
    # worker's next header is still its line for the epoch before, not a resume
    lines = (STREAMS / "srun_two_zero.out").read_text().splitlines(keepends=True)
    epoch_lines = [i for i, line in enumerate(lines) if line.startswith("0: 8/8")]
    headers = [i for i, line in enumerate(lines) if line.startswith("0: Epoch 2/3")]
    late = lines.pop(epoch_lines[1])
    lines.insert(headers[0], late)  # after the first "Epoch 2/3"
    [run] = parse_runs("".join(lines), "reordered.out")
    assert [e["seconds"] for e in run.rows()] == pytest.approx([0.591, 0.104, 0.103])
    assert run.streams == 2 and run.warnings == []


def test_a_single_worker_resumed_inside_an_epoch_is_one_worker_with_a_note():
    [run] = parse_file_runs(str(STREAMS / "resumed_single.out"))
    assert run.streams == 1 and not run.cut
    assert [(e["epoch"], e["seconds"]) for e in run.rows()] == [(1, 0.281), (2, 0.278),
                                                                (3, 0.04)]
    assert run.test == {"test_loss": 2.3435, "test_accuracy": 0.125}
    assert len(run.warnings) == 1 and "taken as a run resumed inside that epoch" in \
        run.warnings[0]


def test_unprefixed_copies_of_one_training_out_of_step_are_one_run_with_one_warning():
    """tests/data/job-streams/README.md, "Eight unprefixed copies": 8 tasks each train
    alone and print the whole output; their lines interleave, a copy finishing its 3
    epochs (and evaluating) while another is still in epoch 1."""
    [run] = parse_file_runs(str(STREAMS / "srun_copies.out"))
    assert run.streams == 8 and run.settings == {"gpus": 8, "epochs": 3} and not run.cut
    assert [e["loss"] for e in run.rows()] == [2.4439, 2.3777, 2.3598]
    assert [e["seconds"] for e in run.rows()] == pytest.approx([2.0, 0.072, 0.068])
    assert run.test == {"test_loss": 2.3426, "test_accuracy": 0.1211}
    [warning] = run.warnings
    assert "8 copies" in warning and "not in step" in warning


def test_copies_in_step_are_workers_and_runs_after_them_stay_runs():
    """Workers of one data-parallel training print in step: no copies warning; the same
    training run again after them (all workers finished) is the next run."""
    one = ("Epoch 1/2\nEpoch 1/2\n4/4 - 2s - loss: 2.0 - accuracy: 0.2\n"
           "4/4 - 3s - loss: 2.0 - accuracy: 0.2\nEpoch 2/2\nEpoch 2/2\n"
           "4/4 - 1s - loss: 1.0 - accuracy: 0.3\n4/4 - 1s - loss: 1.0 - accuracy: 0.3\n")
    runs = parse_runs(one + one, "job.out")
    assert [[e["seconds"] for e in r.rows()] for r in runs] == [[3.0, 1.0], [3.0, 1.0]]
    assert [r.streams for r in runs] == [2, 2] and runs[0].warnings == []


def test_a_job_that_trains_nothing_is_no_training_found_with_its_last_lines():
    """tests/data/no-training/README.md: a jax.distributed hello world on two tasks."""
    path = DATA / "no-training" / "hello_jax.out"
    with pytest.raises(LogError) as raised:
        parse_file_runs(str(path))
    message = str(raised.value)
    assert message.startswith(f"{path}: no finished epoch found")
    assert message.endswith("its last lines: 1: process 1 of 2: 1 local device(s), 2 in all | "
                            "1: devices: [CpuDevice(id=0), CpuDevice(id=2048)] | "
                            "0: devices: [CpuDevice(id=0), CpuDevice(id=2048)]")


def test_evaluate_after_the_last_epoch_is_the_test_result_not_an_epoch():
    text = ("Epoch 1/2\n1875/1875 - 4s - loss: 0.4975 - accuracy: 0.8234 - 4s/epoch - 2ms/step\n"
            "Epoch 2/2\n1875/1875 - 3s - loss: 0.3731 - accuracy: 0.8653 - 3s/epoch - 2ms/step\n"
            "313/313 - 1s - loss: 0.1106 - accuracy: 0.9668 - 1s/epoch - 4ms/step\n"
            "313/313 - 0s - 0s/epoch - 1ms/step\n")  # predict(): no metric
    log = parse_text(text)
    assert [e["epoch"] for e in log.rows()] == [1, 2]
    assert log.test == {"test_loss": 0.1106, "test_accuracy": 0.9668}


def test_labelled_tasks_with_different_run_counts_are_matched_in_order_with_a_warning():
    text = ("0: Epoch 1/2\n0: 4/4 - 2s - loss: 2.0 - accuracy: 0.2\n"
            "0: Epoch 2/2\n0: 4/4 - 2s - loss: 1.0 - accuracy: 0.3\n"
            "1: Epoch 1/2\n1: 4/4 - 3s - loss: 2.0 - accuracy: 0.2\n"
            "1: Epoch 2/2\n1: 4/4 - 1s - loss: 1.0 - accuracy: 0.3\n"
            "0: Epoch 1/3\n0: 4/4 - 2s - loss: 2.0 - accuracy: 0.2\n")
    runs = parse_runs(text, "job.out")
    assert [[e["seconds"] for e in r.rows()] for r in runs] == [[3.0, 2.0], [2.0]]
    assert [r.streams for r in runs] == [2, 1]
    assert runs[0].warnings == ["job.out: the tasks hold different numbers of runs (task 0: 2, "
                                "task 1: 1): runs are matched in order"]


@pytest.mark.parametrize("name, seconds", [
    ("mpirun_tag_progress.out", [8.0, 1.0, 1.0]),
    ("horovodrun_progress.out", [5.0, 0.448, 0.448]),
])
def test_tagged_progress_bars_are_rank_0s_epochs_and_each_ranks_evaluate_is_the_test(
        name, seconds):
    """tests/data/horovod-progress/README.md: the launcher tags every piece of a progress
    bar, and other ranks' pieces land inside its lines."""
    runs = parse_file_runs(str(DATA / "horovod-progress" / name))
    assert len(runs) == 1
    run = runs[0]
    assert [(e["epoch"], e["steps"]) for e in run.rows()] == [(1, 64), (2, 64), (3, 64)]
    assert [e["seconds"] for e in run.rows()] == pytest.approx(seconds)
    assert [e["loss"] for e in run.rows()] == [2.3172, 2.3067, 2.2998]
    assert [e["accuracy"] for e in run.rows()] == [0.0989, 0.1079, 0.1138]
    assert run.test == {"test_loss": 2.2924, "test_accuracy": 0.1299}
    assert run.settings == {"gpus": 2} and run.streams == 2 and not run.cut
    assert run.warnings == []


def test_a_job_wide_device_count_is_not_replaced_by_one_workers_devices():
    worker = ("Using MirroredStrategy with devices ('/job:localhost/replica:0/task:0/device:"
              "GPU:0', '/job:localhost/replica:0/task:0/device:GPU:1')\n")
    epochs = "Epoch 1/1\n8/8 - 2s - loss: 2.4 - accuracy: 0.1 - 2s/epoch - 250ms/step\n"
    assert parse_text("Number of devices: 4\n" + worker * 2 + epochs).settings == {"gpus": 4}
    assert parse_text(worker + "Horovod size: 4\n" + epochs).settings == {"gpus": 4}
    # a single node's MirroredStrategy: its devices are the job's
    assert parse_text(worker + epochs).settings == {"gpus": 2}


def test_user_patterns_need_exactly_one_group_and_cannot_backtrack_without_end():
    with pytest.raises(ValueError, match=r"patterns.gpus: 'job \(\\d\+\) running on \(\\d\+\) "
                                         r"GPUs' has 2 groups: expected exactly one"):
        compile_patterns({"gpus": r"job (\d+) running on (\d+) GPUs"})
    with pytest.raises(ValueError, match="is not a regular expression RE2 accepts"):
        compile_patterns({"gpus": r"(?<=GPUs: )(\d+)"})
    slow = compile_patterns({"gpus": r"(a+)+$"})  # exponential in Python's re, linear in RE2
    runs = parse_runs("a" * 200_000 + "b\nEpoch 1/1\n2/2 - 1s - loss: 1.0 - accuracy: 0.5\n",
                      patterns=slow)
    assert len(runs[0].epochs) == 1


BENCH = DATA / "benchmark-outputs"


@pytest.mark.parametrize("name, images_per_s, settings", [
    ("horovod_synthetic_1rank.out", 11.0, {"batch_per_gpu": 8, "gpus": 1}),
    ("horovod_synthetic_2ranks.out", 13.6, {"batch_per_gpu": 8, "gpus": 2}),
    # the page's own command, `horovodrun -np 16 ...` (its largest launch: logs.launch)
    ("horovod_docs_benchmarks.rst", 1656.82, {"batch_per_gpu": 64, "gpus": 16}),
])
def test_benchmark_outputs_are_runs_with_their_total_throughput(name, images_per_s, settings):
    runs = parse_file_runs(str(BENCH / name))
    assert [(r.rate, r.settings, len(r.epochs)) for r in runs] == [
        (images_per_s, settings, 0)]


def test_a_tf_cnn_benchmarks_header_states_the_devices_and_the_global_batch():
    text = ("Batch size:  128 global\n             64 per device\n"
            "Devices:     ['horovod/gpu:0', 'horovod/gpu:1']\n"
            "1\timages/sec: 11.8 +/- 0.0 (jitter = 0.0)\t8.327\n"
            "----------------------------------------------------------------\n"
            "total images/sec: 23.51\n")
    runs = parse_runs(text)
    assert [(r.rate, r.settings) for r in runs] == [
        (23.51, {"global_batch": 128, "gpus": 2})]


def test_a_keras_log_without_train_images_fails_when_the_config_is_read(tmp_path):
    from dlscale.plan.external import resolve

    item = {"log": str(STUDY / "ResNet50_1gpu.out"), "model": "M", "gpus": 1,
            "global_batch": 256}
    with pytest.raises(ValueError, match=r"external_runs\[0\]: .*ResNet50_1gpu.out holds "
                                         "epochs: give train_images"):
        resolve(item, "external_runs[0]")
    bench = {"log": str(BENCH / "horovod_synthetic_2ranks.out"), "model": "M",
             "global_batch": 16}
    assert resolve(bench, "external_runs[1]")[0] == [{"line": 1, "gpus": 2, "gpus_from": "log",
                                                      "global_batch": 16}]


def test_a_custom_loops_epoch_lines_are_read_with_user_patterns():
    patterns = compile_patterns({"epoch_time": r"Time/epoch: ([0-9.]+)",
                                 "loss": r"Loss: ([0-9.]+)", "gpus": r"on (\d+) GPUs"})
    text = ("training on 4 GPUs\n"
            "Epoch: 1  Loss: 0.42  Time/epoch: 0.545\n"
            "Epoch: 2  Loss: 0.31  Time/epoch: 0.512\n")
    runs = parse_runs(text, patterns=patterns)
    assert runs[0].settings == {"gpus": 4}
    assert [(e["epoch"], e["seconds"], e["loss"]) for e in runs[0].rows()] == [
        (1, 0.545, 0.42), (2, 0.512, 0.31)]
    with pytest.raises(ValueError, match="loss and accuracy are read from the lines "
                                         "epoch_time matches"):
        compile_patterns({"loss": r"Loss: ([0-9.]+)"})
    bench = compile_patterns({"images_per_s": r"throughput ([0-9.]+) img/s"})
    assert [r.rate for r in parse_runs("throughput 812.5 img/s\n", patterns=bench)] == [
        812.5]


def test_a_progress_bar_of_many_megabytes_is_read_in_bounded_memory(tmp_path):
    """verbose=1 rewrites its bar with \\r: an epoch of updates is one "line" of the file.
    It is read a chunk at a time and compacted (first and last segment), so parsing holds
    far less than the file."""
    import tracemalloc

    updates = "".join(f"\r{i}/200000 [=====>....] - ETA: 1s - loss: 0.5000" for i in
                      range(1, 200000))
    epoch = (f"Epoch {{n}}/2\n{updates}\r200000/200000 [==============================] - "
             "12s 240us/step - loss: 0.4000 - accuracy: 0.9000\n")
    log = tmp_path / "bar.log"
    log.write_text(epoch.format(n=1) + epoch.format(n=2))
    assert log.stat().st_size > 20_000_000
    tracemalloc.start()
    runs = parse_file_runs(str(log))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [(r["epoch"], r["seconds"], r["steps"]) for r in runs[0].rows()] == [
        (1, 12.0, 200000), (2, 12.0, 200000)]
    assert peak < log.stat().st_size / 4, peak  # a few chunks of 1 MB, not the file


def test_text_quoted_from_a_log_has_its_control_characters_escaped(tmp_path):
    assert printable("\x1b]0;pwned\x07ok\tthen") == "\\x1b]0;pwned\\x07ok then"
    log = tmp_path / "x.out"
    log.write_bytes(b"\x1b]0;title\x07no epochs here\n")
    quoted = "its last lines: \\x1b]0;title\\x07no epochs here"
    with pytest.raises(LogError, match=re.escape(quoted)):
        parse_file_runs(str(log))
    log.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\n\x00\x00")  # a program, not a log
    with pytest.raises(LogError, match=r"x\.out is binary \(it holds NUL bytes\): expected a "
                                       r"text log$"):
        parse_file_runs(str(log))


def test_a_log_is_parsed_once_and_read_back_while_it_is_unchanged(tmp_path, monkeypatch):
    """Planning parses an external log and keeps what it found (dlscale.core.contract.PARSED);
    the rule that tabulates it, later runs and SLURM's job steps read that back."""
    import dlscale.logparse.reader as reader

    log = tmp_path / "job.out"
    log.write_text("Epoch 1/2\n8/8 - 2s - loss: 2.0 - accuracy: 0.2\n"
                   "Epoch 2/2\n8/8 - 1s - loss: 1.5 - accuracy: 0.3\n")
    cache = tmp_path / "parsed"
    parses = []
    real = reader.read_file
    monkeypatch.setattr(reader, "read_file", lambda *a, **k: parses.append(1) or real(*a, **k))
    first = parse_file_runs(str(log), None, str(cache))
    again = parse_file_runs(str(log), None, str(cache))
    assert len(parses) == 1
    assert [r.rows() for r in again] == [r.rows() for r in first]
    assert [e["seconds"] for e in again[0].rows()] == [2.0, 1.0]
    # other patterns, or a changed log, parse again
    parse_file_runs(str(log), compile_patterns({"gpus": r"on (\d+) GPUs"}), str(cache))
    assert len(parses) == 2
    with open(log, "a") as handle:
        handle.write("Epoch 1/1\n8/8 - 3s - loss: 1.0 - accuracy: 0.5\n")
    assert len(parse_file_runs(str(log), None, str(cache))) == 2 and len(parses) == 3
    # a damaged cache is parsed again, never an error
    for kept in cache.iterdir():
        kept.write_bytes(b"not a pickle")
    assert len(parse_file_runs(str(log), None, str(cache))) == 2 and len(parses) == 4
    # a log without epochs: the same error from the cache
    empty = tmp_path / "crashed.out"
    empty.write_text("Traceback (most recent call last):\nMemoryError\n")
    for _ in range(2):
        with pytest.raises(LogError, match="crashed.out: no finished epoch found"):
            parse_file_runs(str(empty), None, str(cache))
    assert len(parses) == 5


def test_the_live_reader_is_linear_in_a_line_without_newline(monkeypatch):
    """A command that prints 16 MB of a progress bar without a newline (carriage returns
    only), read 64 KB at a time: the unfinished line is compacted only when it has doubled,
    so the bytes compacted are a few times the input (every chunk re-joined and compacted
    was about 128 times it), and the line is the one read at once."""
    from dlscale.logparse import lines as logtext

    seen = []
    real = logtext.compact
    monkeypatch.setattr(logtext, "compact", lambda line: seen.append(len(line)) or real(line))
    bar = b"".join(b"\r%d/100000 [====] - loss: 0.5" % i for i in range(500_000))
    text = b"Epoch 1/1" + bar + b"\n4/4 - 1s - loss: 0.4\nthe end"
    lines = logtext.Lines()
    got = [line for lo in range(0, len(text), 65536) for line in lines.add(text[lo:lo + 65536])]
    assert sum(seen) < 4 * len(text), (sum(seen), len(text))
    # a long line is compacted to its first and last segments, as it grows: what is left
    # is at most a few chunks of the bar, ending on its last state
    first, last = got
    assert first.startswith("Epoch 1/1\r") and len(first) < 2 * logtext.LONG_LINE
    assert first.endswith("\r499999/100000 [====] - loss: 0.5")
    assert last == "4/4 - 1s - loss: 0.4"
    assert lines.rest() == "the end"


def test_a_16_mb_line_of_text_costs_the_live_reader_a_few_times_its_bytes(monkeypatch):
    """A line without newline or carriage return cannot be compacted: it was joined and
    searched again at every 64 KB chunk (quadratic: a 60 MB line read past a command's
    time limit). Now it is joined once and searched only when it has doubled."""
    from dlscale.logparse import lines as logtext

    seen = []
    real = logtext.compact
    monkeypatch.setattr(logtext, "compact", lambda line: seen.append(len(line)) or real(line))
    text = b"x" * (16 << 20) + b"\nend"
    lines = logtext.Lines()
    got = [line for lo in range(0, len(text), 65536) for line in lines.add(text[lo:lo + 65536])]
    assert sum(seen) < 4 * len(text), (sum(seen), len(text))
    assert [len(line) for line in got] == [16 << 20] and lines.rest() == "end"


def test_the_live_reader_gives_the_lines_of_the_whole_text_whatever_the_chunks():
    import random

    from dlscale.logparse.lines import Lines

    rng = random.Random(3)
    text = "".join(rng.choice(["a", "b\r", "\n", "é", " "]) for _ in range(20_000)).encode()
    for _ in range(20):
        lines, got, lo = Lines(), [], 0
        while lo < len(text):
            step = rng.choice([1, 2, 7, 100, 5000])
            got += lines.add(text[lo:lo + step])
            lo += step
        *whole, last = text.decode().split("\n")
        assert (got, lines.rest()) == (whole, last)


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-be", "utf-16-le",
                                      "utf-16-be without its mark"])
def test_a_log_with_a_byte_order_mark_is_the_same_runs(tmp_path, encoding):
    """A UTF-8 byte order mark (Windows editors, PowerShell) split the first run in two; a
    UTF-16 log was called binary, with its mark or without (issue 78, 13). All read as the
    UTF-8 file does, live and whole."""
    text = read_text(STUDY / "ResNet50_all.out")
    marked = tmp_path / "ResNet50_all.out"
    data = text.encode(encoding.split()[0])
    if encoding == "utf-16-be":
        data = b"\xfe\xff" + data
    marked.write_bytes(data)
    runs = parse_file_runs(str(marked))
    assert [r.line for r in runs] == [1, 11, 21]
    assert [[e["seconds"] for e in r.rows()] for r in runs] == [
        [49, 45, 45, 45, 45], [26, 24, 24, 24, 24], [14, 12, 12, 12, 12]]
    assert not any(r.warnings or r.cut for r in runs)
    assert read_text(marked) == text


def test_a_second_log_appended_with_its_byte_order_mark_is_a_run_of_its_own(tmp_path):
    """`cat a.out b.out` where b.out begins with a UTF-8 byte order mark: the mark, in the
    middle of the text, hid b's first Epoch line, so its epochs joined a's run and one
    was read as the test accuracy (issue 78, 12)."""
    one = (STUDY / "ResNet50_1gpu.out").read_bytes()
    two = (STUDY / "ResNet50_2gpu.out").read_bytes()
    both = tmp_path / "both.out"
    both.write_bytes(one + b"\xef\xbb\xbf" + two)
    runs = parse_file_runs(str(both))
    assert [[e["seconds"] for e in r.rows()] for r in runs] == [
        [49, 45, 45, 45, 45], [26, 24, 24, 24, 24]]
    assert all(r.test == {} for r in runs)


def test_a_huge_line_without_a_newline_is_held_in_bounded_memory(monkeypatch):
    """A log ending in a 1 GB line without a newline (no carriage return in it to cut at)
    peaked at 3.2 GB (issue 78, 14): a line keeps at most MAX_LINE bytes, its first and
    last halves. Here MAX_LINE is 1 MiB and the line 24 MiB, fed in 64 KiB chunks.
    (`dlscale parse-log` on the 1 GB line: docs/benchmarks.md, "Parsing logs".)"""
    from dlscale.logparse import lines as logtext

    monkeypatch.setattr(logtext, "MAX_LINE", 1 << 20)
    lines, chunk, held = logtext.Lines(), b"x" * (1 << 16), []
    got = lines.add((STUDY / "ResNet50_1gpu.out").read_bytes())
    for _ in range(24 * 16):
        got += lines.add(chunk)
        held.append(lines.size)
    assert max(held) <= 2 * (1 << 20) + 2 * len(chunk)
    rest = lines.rest()
    assert len(rest) <= 2 * (1 << 20) + len(chunk) and rest.startswith("x") and rest.endswith("x")
    assert any(line.startswith("Epoch 5/5") for line in got)
