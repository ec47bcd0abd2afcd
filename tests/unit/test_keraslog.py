"""Keras output of every version to epoch records."""

from __future__ import annotations

import pytest

from dlscale.keraslog import LogError, parse_text


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


def test_keras3_verbose1_bar():
    row = one("Epoch 1/1\n\x1b[1m8/8\x1b[0m ━━━━━━━━━━━━━━━━━━━━ 9s 1s/step - accuracy: 0.09 "
              "- loss: 2.63\n".replace("\x1b[1m", "").replace("\x1b[0m", ""))[0]
    assert (row["seconds"], row["steps"], row["accuracy"]) == (9.0, 8, 0.09)


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
