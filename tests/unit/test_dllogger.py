"""NVIDIA DLLogger output read without a pattern, on real captures (tests/data/dllogger)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

from dlscale.logparse.reader import parse_file_runs, parse_runs

DLL = ROOT / "tests" / "data" / "dllogger"


def test_deeplearningexamples_resnet50_json_gives_its_epochs_settings_and_summary():
    """The values of tests/data/dllogger/README.md, read by hand."""
    [run] = parse_file_runs(str(DLL / "example_resnet_log.json"))
    assert run.settings == {"batch_per_gpu": 128, "global_batch": 128, "gpus": 1}
    assert [round(r["seconds"], 3) for r in run.rows()] == [11.276, 6.635]
    assert [r["loss"] for r in run.rows()] == [8.34140625, 7.094375]
    assert [round(r["logged_images_per_s"], 2) for r in run.rows()] == [648.93, 675.03]
    assert [r["val_accuracy"] for r in run.rows()] == [0.0, 0.0]
    assert run.epochs_total == 2 and not run.cut
    assert run.facts == {"log_format": "dllogger", "amp": True, "gpus_from": "log",
                         "summary_images_per_s": pytest.approx(661.98, abs=0.01),
                         "summary_compute_images_per_s": pytest.approx(663.98, abs=0.01)}


@pytest.mark.parametrize("name", ["dllogger_keras_stdout.txt", "dllogger_keras.json"])
def test_a_keras_training_logged_by_dllogger_reads_the_same_from_stdout_and_json(name):
    [run] = parse_file_runs(str(DLL / name))
    rows = run.rows()
    assert run.settings == {"batch_per_gpu": 32, "global_batch": 32, "gpus": 1}
    assert [round(r["seconds"], 3) for r in rows] == [1.288, 0.357]
    assert [r["loss"] for r in rows] == [1.7796603441238403, 0.911146879196167]
    # top-1 in percent (its unit says so) becomes a fraction
    assert [r["accuracy"] for r in rows] == [0.458984375, 0.6904296875]
    assert [r["val_accuracy"] for r in rows] == [0.6796875, 0.734375]
    assert [round(r["logged_images_per_s"], 2) for r in rows] == [1252.39, 2888.12]
    assert run.facts["summary_images_per_s"] == pytest.approx(1658.71, abs=0.01)
    assert run.facts["amp"] is False and not run.cut


def test_iteration_entries_end_an_epoch_whose_own_entry_holds_no_loss():
    """dllogger's own example: `Epoch: N Iteration: M` steps (DeepLearningExamples'
    format) under the older `DLLL` prefix; validation iterations are left out."""
    [run] = parse_file_runs(str(DLL / "example_stdout_log.txt"))
    rows = run.rows()
    assert [r["epoch"] for r in rows] == [1, 2]
    assert rows[0]["seconds"] == pytest.approx(0.000765, abs=1e-6)
    assert rows[1]["seconds"] == pytest.approx(0.000640, abs=1e-6)
    assert all(r.get("loss_unknown") for r in rows)


def test_prefixed_ranks_a_cut_run_and_a_benchmark_summary():
    stdout = (DLL / "dllogger_keras_stdout.txt").read_text().splitlines()
    # srun --label's prefix on every line: the same run
    [labelled] = parse_runs("\n".join(f"0: {line}" for line in stdout) + "\n")
    assert [r["loss"] for r in labelled.rows()] == [1.7796603441238403, 0.911146879196167]
    # the job ended inside epoch 2 (epochs: 2 stated, no summary): cut after epoch 1
    [cut] = parse_runs("\n".join(stdout[:8]) + "\n")
    assert len(cut.epochs) == 1 and cut.cut and cut.cut_epoch == 2
    # only the summary's throughput (a benchmark): a run without epochs
    [bench] = parse_runs("\n".join([stdout[0], stdout[-1]]) + "\n")
    assert not bench.epochs and bench.rate == pytest.approx(1658.71, abs=0.01)


def test_a_line_that_only_starts_with_dll_is_not_dlloggers():
    keras = ("DLL load failed while importing _pywrap_tensorflow_internal\n"
             "Epoch 1/1\n16/16 [==============================] - 2s 10ms/step - loss: 0.5"
             " - accuracy: 0.8\n")
    [run] = parse_runs(keras)
    assert [r["loss"] for r in run.rows()] == [0.5] and "log_format" not in run.facts


def test_dlscale_parse_log_reads_a_dllogger_capture(tmp_path):
    """The console command pip installed, with no pattern."""
    out = tmp_path / "t.csv"
    proc = subprocess.run([str(Path(sys.executable).with_name("dlscale")), "parse-log",
                           str(DLL / "dllogger_keras_stdout.txt"), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(out)
    assert list(table["epoch"]) == [1, 2] and set(table["log_format"]) == {"dllogger"}
    assert list(table["gpus"]) == [1, 1] and list(table["global_batch"]) == [32, 32]


@pytest.mark.parametrize("name", ["dllogger_keras_stdout.txt", "example_resnet_log.json"])
def test_the_live_view_shows_each_epoch_once_a_later_one_began(name):
    """A command's output is read as it comes (dlscale.launch.command): its DLLogger
    epochs show while it runs, in one run object, and end as the whole file reads."""
    from dlscale.logparse.reader import LogReader

    reader, seen = LogReader(name), []
    for line in (DLL / name).read_text().splitlines():
        reader.feed(line)
        run = reader.current()
        if run is not None and (not seen or len(run.epochs) != seen[-1][1]):
            seen.append((id(run), len(run.epochs)))
    [final] = parse_file_runs(str(DLL / name))
    assert len({ident for ident, _ in seen}) == 1  # one object, grown
    assert [count for _, count in seen] == list(range(1, len(final.epochs) + 1))
    assert reader.current().rows() == final.rows()


def test_a_dllogger_line_without_epochs_leaves_the_live_view_to_the_keras_lines():
    from dlscale.logparse.reader import LogReader

    reader = LogReader("mixed.out")
    for line in ("DLL 2026-11-27 10:00:00.000000 - PARAMETER batch_size : 32 ",
                 "Epoch 1/2", "4/4 - 1s - loss: 2.0 - accuracy: 0.2"):
        reader.feed(line)
    assert [r["loss"] for r in reader.current().rows()] == [2.0]
