"""Aggregation: the published study's figures from its own logs, and the run checks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import parse_logs
from conftest import ROOT
from dlscale.analysis import scaling, summarize_runs, t95
from dlscale.keraslog import parse_file

STUDY = ROOT / "tests" / "data" / "reference-study"


def study_epochs() -> pd.DataFrame:
    rows = []
    for gpus in (1, 2, 4):
        parsed = parse_file(str(STUDY / f"ResNet50_{gpus}gpu.out"))
        rows += parse_logs.table(parsed, {"run": f"ref{gpus}", "model": "ResNet50V2",
                                          "gpus": gpus, "images_per_epoch": 50000,
                                          "global_batch": 256 * gpus, "source": "external"})
    return pd.DataFrame(rows)


def test_the_published_study_is_reproduced_from_its_logs():
    epochs = study_epochs()
    runs = summarize_runs(epochs, skip_epochs=1)
    table = scaling(epochs, runs, skip_epochs=1, accuracy_tolerance=0.05)
    assert list(table["gpus"]) == [1, 2, 4]
    assert list(table["epoch_time_s"]) == [45.0, 24.0, 12.0]
    assert list(table["speedup"]) == [1.0, 1.875, 3.75]
    assert list(table["efficiency"]) == [1.0, 0.9375, 0.9375]
    assert [round(v) for v in table["images_per_s"]] == [1111, 2083, 4167]
    assert list(table["final_accuracy"]) == [0.507, 0.5049, 0.501]
    assert not table["accuracy_flag"].any()  # "about 0.50 whatever the GPU count"


def test_runs_that_do_not_count_say_why():
    epochs = study_epochs()
    epochs.loc[(epochs["run"] == "ref2") & (epochs["epoch"] == 5), "loss"] = np.nan
    epochs = epochs[~((epochs["run"] == "ref4") & (epochs["epoch"] == 5))]
    runs = summarize_runs(epochs, skip_epochs=1).set_index("run")
    assert runs.loc["ref2", "problem"] == "NaN or infinite loss"
    assert runs.loc["ref4", "problem"] == "4 of 5 epochs"
    table = scaling(epochs, runs.reset_index(), 1, 0.05)
    assert list(table["gpus"]) == [1]


def test_replicas_fewer_than_asked_are_not_counted():
    epochs = study_epochs()
    epochs["gpus_asked"] = epochs["gpus"]
    epochs.loc[epochs["run"] == "ref4", "gpus_asked"] = 8
    runs = summarize_runs(epochs, 1).set_index("run")
    assert runs.loc["ref4", "problem"] == "4 replicas used, 8 asked for"


def test_no_one_gpu_point_means_no_speedup_not_a_guess():
    epochs = study_epochs()
    epochs = epochs[epochs["gpus"] != 1]
    runs = summarize_runs(epochs, 1)
    table = scaling(epochs, runs, 1, 0.05)
    assert table["speedup"].isna().all() and table["efficiency"].isna().all()
    assert table["accuracy_delta"].isna().all()


def test_repeats_are_pooled_with_a_confidence_interval():
    epochs = study_epochs()
    again = epochs[epochs["gpus"] == 1].copy()
    again["run"], again["repeat"] = "ref1b", 2
    again.loc[again["epoch"] > 1, "seconds"] = 47.0
    epochs = pd.concat([epochs, again])
    runs = summarize_runs(epochs, 1)
    one = scaling(epochs, runs, 1, 0.05).iloc[0]
    seconds = np.array([45.0] * 4 + [47.0] * 4)
    assert one["repeats"] == 2 and one["epoch_time_s"] == pytest.approx(46.0)
    assert one["epoch_time_std"] == pytest.approx(seconds.std(ddof=1))
    assert one["epoch_time_ci95"] == pytest.approx(t95(7) * seconds.std(ddof=1) / np.sqrt(8))


def test_accuracy_change_beyond_tolerance_is_flagged():
    epochs = study_epochs()
    epochs.loc[(epochs["run"] == "ref4") & (epochs["epoch"] == 5), "accuracy"] = 0.30
    table = scaling(epochs, summarize_runs(epochs, 1), 1, 0.05)
    assert list(table["accuracy_flag"]) == [False, False, True]


def test_parse_logs_cli_cross_checks_against_the_records(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("Epoch 1/2\n4/4 - 1s - loss: 2.0 - accuracy: 0.2 - 900ms/epoch - 225ms/step\n"
                   "Epoch 2/2\n4/4 - 0s - loss: 1.5 - accuracy: 0.4 - 400ms/epoch - 100ms/step\n")
    records = tmp_path / "epochs.jsonl"
    records.write_text(json.dumps({"epoch": 1, "seconds": 0.88, "lr": 0.01}) + "\n"
                       + json.dumps({"epoch": 2, "seconds": 0.41, "lr": 0.01}) + "\n")
    out = tmp_path / "out.csv"
    assert parse_logs.main([str(log), "--records", str(records), "-o", str(out)]) == 0
    assert list(pd.read_csv(out)["seconds"]) == [0.88, 0.41]
    records.write_text(json.dumps({"epoch": 1, "seconds": 0.88}) + "\n"
                       + json.dumps({"epoch": 2, "seconds": 9.0}) + "\n")
    assert parse_logs.main([str(log), "--records", str(records), "-o", str(out)]) == 1
    records.write_text(json.dumps({"epoch": 1, "seconds": 0.88}) + "\n")
    assert parse_logs.main([str(log), "--records", str(records), "-o", str(out)]) == 1


def test_parse_logs_cli_warns_on_cut_and_fails_on_empty(tmp_path, capsys):
    cut = tmp_path / "cut.out"
    cut.write_text("Epoch 1/2\n4/4 - 1s - loss: 2.0 - accuracy: 0.2\nEpoch 2/2\n")
    assert parse_logs.main([str(cut), "-o", str(tmp_path / "a.csv")]) == 0
    assert "was cut inside epoch 2: keeping the 1 finished epoch(s)" in capsys.readouterr().err
    empty = tmp_path / "empty.out"
    empty.write_text("nothing here\n")
    assert parse_logs.main([str(empty), "-o", str(tmp_path / "b.csv")]) == 1
    assert f"{empty}: no finished epoch found" in capsys.readouterr().err
    assert not (tmp_path / "b.csv").exists()
