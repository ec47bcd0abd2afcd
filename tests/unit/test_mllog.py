"""MLPerf's `:::MLLOG` logs read without a pattern, on real results (tests/data/mlperf)."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest
from conftest import ROOT

from dlscale.logparse.formats.mllog import platform_counts
from dlscale.logparse.reader import parse_file_runs, parse_runs

MLPERF = ROOT / "tests" / "data" / "mlperf"
DELL = ("Dell_DSS8440x8A100-PCIE-40GB.txt", "Dell_2xDSS8440x8A100-PCIE-40GB.txt",
        "Dell_3xDSS8440x8A100-PCIE-40GB.txt")


@pytest.mark.parametrize("name, settings, epochs, first, to_train, accuracy", [
    (DELL[0], {"gpus": 8, "nodes": 1, "global_batch": 3264}, 35, 65.238, 2181.397, 0.7602),
    (DELL[1], {"gpus": 16, "nodes": 2, "global_batch": 3264}, 35, 36.137, 1259.24, 0.75966),
    (DELL[2], {"gpus": 24, "nodes": 3, "global_batch": 6144}, 40, 24.145, 930.09, 0.76208),
    ("NVIDIA_dgxa100_ngc21.05_mxnet.txt", {"gpus": 8, "nodes": 1, "global_batch": 3264}, 35,
     80.161, 1724.542, 0.76066),
    ("NVIDIA_dgxa100_n8_merlin_hugectr_dlrm.txt", {"nodes": 8, "global_batch": 71680}, 1,
     62.586, 62.575, 0.802565),
    ("Google_tpu-v4-128-TF.txt", {"global_batch": 8192}, 44, 25.812 / 4, 258.099, 0.7602),
])
def test_an_mlperf_result_is_one_complete_run_with_its_settings(name, settings, epochs, first,
                                                                 to_train, accuracy):
    """The values of tests/data/mlperf/README.md, read by hand: a run stopped at its
    quality target is complete at its last epoch, not cut short of a planned count."""
    [run] = parse_file_runs(str(MLPERF / name))
    assert run.settings == settings
    assert len(run.epochs) == epochs and run.epochs_total == epochs and not run.cut
    assert run.epochs[1]["seconds"] == pytest.approx(first)
    assert run.facts["time_to_train_s"] == pytest.approx(to_train)
    assert run.facts["run_status"] == "success" and run.facts["log_format"] == "mllog"
    assert run.test == {"test_accuracy": accuracy}
    assert run.epochs[epochs]["val_accuracy"] == accuracy


def test_mxnets_own_epoch_times_are_a_cross_check_that_names_a_difference(tmp_path):
    [run] = parse_file_runs(str(MLPERF / DELL[0]))
    assert run.facts["log_check"] == "ok" and run.warnings == []
    assert run.facts["checked_against"] == "MXNet's Time cost"
    text = (MLPERF / DELL[0]).read_text()
    assert "Epoch[1] Time cost=62.070" in text
    changed = tmp_path / "result.txt"
    changed.write_text(text.replace("Epoch[1] Time cost=62.070", "Epoch[1] Time cost=72.070"))
    [run] = parse_file_runs(str(changed))
    assert run.epochs[2]["seconds"] == pytest.approx(62.068)  # the rows stay the MLLOG's
    assert run.facts["log_check"] == "epoch 2: 72.07 s against 62.068 s"
    assert [w.split(": ", 1)[1] for w in run.warnings] == [
        "MXNet's Time cost differs from the MLLOG epochs (epoch 2: 72.07 s against 62.068 s): "
        "the rows are the MLLOG's"]


def test_every_ranks_copy_of_an_event_counts_once_timed_by_the_slowest():
    """HugeCTR's DLRM prints each event on all 8 ranks; its epoch_stop is numbered 2 for
    the epoch_start numbered 1."""
    [run] = parse_file_runs(str(MLPERF / "NVIDIA_dgxa100_n8_merlin_hugectr_dlrm.txt"))
    assert run.streams == 8 and len(run.epochs) == 1
    assert [w.split(": ", 1)[1] for w in run.warnings] == [
        "epoch_stop's numbers differ from epoch_start's: paired in order",
        "each MLLOG epoch event came 8 times (every rank prints it): counted once, a stop at "
        "the slowest rank's time"]


def test_epochs_logged_only_in_blocks_each_take_their_blocks_share():
    [run] = parse_file_runs(str(MLPERF / "Google_tpu-v4-128-TF.txt"))
    assert [run.epochs[e]["seconds"] for e in (1, 2, 3, 4)] == [pytest.approx(6.453)] * 4
    assert run.epochs[4]["val_accuracy"] == 0.25054  # evaluated inside the first block
    assert "epochs logged in blocks" in run.warnings[0]


def test_each_timed_evaluation_is_a_column_of_its_own_never_in_an_epochs_time():
    """The Dell result evaluates after epochs 3, 7, 11, ... (eval_start 189.387 s,
    eval_stop 191.307 s after run_start for the first): eval_seconds of those epochs, empty
    for the others; the epochs' seconds are their own start to stop, as before."""
    [run] = parse_file_runs(str(MLPERF / DELL[0]))
    assert run.epochs[3]["eval_seconds"] == pytest.approx(1.920)
    assert run.epochs[3]["seconds"] == pytest.approx(61.924)
    assert [e for e in range(1, 36) if pd.notna(run.epochs[e].get("eval_seconds"))] == [
        3, 7, 11, 15, 19, 23, 27, 31, 35]  # empty elsewhere
    assert "eval_seconds" in run.epochs.columns
    # a log that times no evaluation has no such column
    [google] = parse_file_runs(str(MLPERF / "Google_tpu-v4-128-TF.txt"))
    assert "eval_seconds" not in google.epochs.columns


def test_a_blocks_evaluation_is_kept_out_of_its_epochs_share():
    """Epochs logged only in blocks, with the evaluation timed inside the block (the Dell
    result with its epoch_start and epoch_stop lines left out, here in the test): block 1
    runs 191.307 s, its evaluation 1.920 s of it, so each of its 3 epochs takes 63.129 s
    (63.769 s with the evaluation counted in, as before)."""
    lines = [line for line in (MLPERF / DELL[0]).read_text().splitlines(keepends=True)
             if '"key": "epoch_start"' not in line and '"key": "epoch_stop"' not in line]
    [run] = parse_runs("".join(lines), "blocks.txt")
    assert [run.epochs[e]["seconds"] for e in (1, 2, 3)] == [pytest.approx(63.129, abs=1e-3)] * 3
    assert run.epochs[3]["eval_seconds"] == pytest.approx(1.920)
    assert "less its evaluations" in run.warnings[0]


def test_a_result_cut_inside_its_run_keeps_the_finished_epochs(tmp_path):
    lines = (MLPERF / DELL[0]).read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if '"epoch_num": 6}' in line
               and '"epoch_start"' in line)
    [run] = parse_runs("".join(lines[:cut + 1]), "cut.txt")
    assert (len(run.epochs), run.cut, run.cut_epoch, run.epochs_total) == (5, True, 6, None)
    assert "run_status" not in run.facts and "time_to_train_s" not in run.facts


def test_a_second_run_in_one_file_is_its_own_run():
    text = (MLPERF / DELL[0]).read_text() + (MLPERF / DELL[2]).read_text()
    first, second = parse_runs(text, "both.txt")
    assert (first.settings["gpus"], len(first.epochs)) == (8, 35)
    assert (second.settings["gpus"], len(second.epochs)) == (24, 40)


@pytest.mark.parametrize("platform, counts", [
    ("1xDSS8440x8A100-PCIE-40GB", (1, 8)), ("2xXE8545x4A100-SXM-80GB", (2, 8)),
    ("8xNVIDIA DGX A100", (8, None)), ("tpu-v4-128", (None, None))])
def test_the_platform_names_nodes_and_accelerators_where_it_writes_them(platform, counts):
    assert platform_counts(platform) == counts


def test_parse_log_tables_an_mlperf_series_with_its_gpus_and_batch(tmp_path):
    out = tmp_path / "mlperf.csv"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "parse_logs.py"),
                           *(str(MLPERF / name) for name in DELL), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(out)
    runs = table.groupby("file").first()
    assert sorted(zip(runs["gpus"], runs["global_batch"], runs["platform"])) == [
        (8, 3264, "1xDSS8440x8A100-PCIE-40GB"), (16, 3264, "2xDSS8440x8A100-PCIE-40GB"),
        (24, 6144, "3xDSS8440x8A100-PCIE-40GB")]
    assert set(table["log_format"]) == {"mllog"} and set(table["run_status"]) == {"success"}
    assert len(table) == 35 + 35 + 40



@pytest.mark.parametrize("path, gpus", [
    ("training_results_v2.0/Dell/results/XE8545x4A100-SXM-40GB/bert/result_0.txt", 4),
    ("training_results_v2.0/Dell/results/2xXE8545x4A100-SXM-40GB/bert/result_0.txt", 8),
    ("training_results_v3.0/Dell/results/R750xax4A100-PCIE-80GB/bert/result_0.txt", 4)])
def test_a_micro_batch_per_device_counts_its_accumulation_steps(path, gpus):
    """Dell's BERT results (the prediction corpus, MLPerf v2.0 and v3.0 as published) log
    `d_batch_size` as one micro-batch of `gradient_accumulation_steps` 2: 448 in all, 28 a
    device is 8 devices, not 16, as the platform's name says; the two no longer disagree."""
    [run] = parse_file_runs(str(ROOT / "bench" / "corpus" / path))
    assert run.settings["gpus"] == gpus
    assert not [w for w in run.warnings if "the platform" in w], run.warnings
