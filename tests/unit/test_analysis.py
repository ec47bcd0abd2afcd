"""Aggregation: the published study's figures from its own logs, and the run checks."""

from __future__ import annotations

import json

import aggregate
import numpy as np
import pandas as pd
import parse_logs
import pytest
import tabulate_run
from conftest import ROOT
from helpers.studies import EPOCHS, LOG, completed_run, study_epochs

from dlscale.core import models
from dlscale.reporting import runtable
from dlscale.reporting.analysis import scaling, summarize_runs, t95
from dlscale.reporting.prediction.links import Link
from dlscale.reporting.prediction.series import series_prediction


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


def test_the_studys_1_gpu_fit_point_reproduces_itself_on_a_given_network():
    """The published study's 1- and 2-GPU points on a network the user gives (a V100
    node's NVLink 2.0, 150 GB/s each way): the gradient's all-reduce is a few milliseconds
    of a 0.23 s step, and a compute taken as the fit points' median left the 1-GPU point
    6 % off its own measurement. Each fit point gives back the step it was fitted on."""
    epochs = study_epochs()
    table = scaling(epochs, summarize_runs(epochs, 1), 1, 0.05)
    nvlink = {"within_node": (Link(3.4e-6, 150e9), "given")}
    breakdown = pd.DataFrame(columns=["series", "gpus", "nodes", "communication_share"])
    rows = pd.DataFrame(series_prediction("V100 study", table, breakdown, {},
                                          known_size=models.table()["ResNet50V2"].gradient_bytes,
                                          network=nvlink))
    fit = rows[rows["role"] == "fit"]
    assert list(fit["gpus"]) == [1, 2]
    assert list(fit["predicted_step_s"]) == pytest.approx(list(fit["measured_step_s"]),
                                                          rel=1e-9)


def test_results_that_look_wrong_are_flagged_and_kept():
    epochs = study_epochs()
    assert not scaling(epochs, summarize_runs(epochs, 1), 1, 0.05)["flags"].any()
    # 2 GPUs slower than 1 (the speedup 0.775), 4 GPUs faster than linear, and a
    # log that says 8 GPUs for the run counted under 4
    epochs.loc[(epochs["run"] == "ref2") & (epochs["epoch"] > 1), "seconds"] = 45 / 0.775
    epochs.loc[(epochs["run"] == "ref4") & (epochs["epoch"] > 1), "seconds"] = 10.0
    epochs.loc[epochs["run"] == "ref4", "gpus_logged"] = 8
    table = scaling(epochs, summarize_runs(epochs, 1), 1, 0.05).set_index("gpus")
    assert table.loc[2, "speedup"] == pytest.approx(0.775)  # kept as measured
    assert table.loc[2, "flags"] == ("slowdown: speedup 0.775 on 2 GPUs; serial fraction 1.58 "
                                     "outside [0, 1]")
    assert table.loc[4, "efficiency"] == pytest.approx(1.125)
    assert table.loc[4, "flags"] == ("super-linear: efficiency 1.12 (were the runs alike?); "
                                     "serial fraction -0.037 outside [0, 1]; the log states "
                                     "8 GPU(s), counted as 4")
    assert table.loc[1, "flags"] == ""


def test_runs_that_do_not_count_say_why():
    epochs = study_epochs()
    epochs.loc[(epochs["run"] == "ref2") & (epochs["epoch"] == 5), "loss"] = np.nan
    epochs = epochs[~((epochs["run"] == "ref4") & (epochs["epoch"] == 5))]
    runs = summarize_runs(epochs, skip_epochs=1).set_index("run")
    assert runs.loc["ref2", "problem"] == "NaN or infinite loss"
    assert runs.loc["ref4", "problem"] == "4 of 5 epochs"
    table = scaling(epochs, runs.reset_index(), 1, 0.05)
    assert list(table["gpus"]) == [1]


@pytest.mark.parametrize("bad", [0.0, -3.0, np.nan, np.inf])
def test_an_epoch_time_no_epoch_can_take_is_said_and_left_out_of_the_means(bad):
    epochs = study_epochs()
    epochs["seconds"] = epochs["seconds"].astype(float)
    epochs.loc[(epochs["run"] == "ref2") & (epochs["epoch"] == 3), "seconds"] = bad
    runs = summarize_runs(epochs, skip_epochs=1).set_index("run")
    assert runs.loc["ref2", "epoch_time_s"] == 24 and runs.loc["ref2", "epochs_used"] == 3
    assert f"epoch time(s) {bad:g} s of epoch(s) 3 left out of the means" in runs.loc[
        "ref2", "notes"]
    table = scaling(epochs, runs.reset_index(), 1, 0.05).set_index("gpus")
    assert table.loc[2, "epoch_time_s"] == 24 and table.loc[2, "epochs_used"] == 3
    assert np.isfinite(table["images_per_s"]).all() and runs.loc["ref2", "counted"]


def test_replicas_fewer_than_asked_are_not_counted():
    epochs = study_epochs()
    epochs["gpus_asked"] = epochs["gpus"]
    epochs.loc[epochs["run"] == "ref4", "gpus_asked"] = 8
    runs = summarize_runs(epochs, 1).set_index("run")
    assert runs.loc["ref4", "problem"] == "4 replicas used, 8 asked for"


def test_without_a_one_gpu_point_the_speedup_is_over_the_fewest_gpus_and_says_so():
    """A series measured from 2 GPUs (MLPerf results start at 8): speedup and efficiency
    over its fewest GPUs, named in base_gpus; a series of one point has none."""
    epochs = study_epochs()
    epochs = epochs[epochs["gpus"] != 1]
    runs = summarize_runs(epochs, 1)
    table = scaling(epochs, runs, 1, 0.05)
    assert list(table["base_gpus"]) == [2, 2]
    assert list(table["speedup"]) == [1.0, 2.0] and list(table["efficiency"]) == [1.0, 1.0]
    assert list(table["accuracy_delta"].notna()) == [True, True]
    alone = epochs[epochs["gpus"] == 4]
    table = scaling(alone, summarize_runs(alone, 1), 1, 0.05)
    assert table["speedup"].isna().all() and table["efficiency"].isna().all()
    assert table["base_gpus"].isna().all()


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
    # a flag as the others are: in the flags column (the first page and status read it)
    delta = table["accuracy_delta"].iloc[2]
    assert list(table["flags"]) == ["", "", f"accuracy {delta:+.3f} against 1 GPU, beyond "
                                            "the tolerance 0.05"]


def test_a_run_table_comes_from_the_records_and_the_log_is_a_cross_check(tmp_path):
    folder = completed_run(tmp_path / "run", EPOCHS, LOG)
    out = tmp_path / "out.csv"
    assert tabulate_run.main([str(folder), "-o", str(out)]) == 0
    table = pd.read_csv(out)
    assert list(table["seconds"]) == [0.88, 0.41]
    # loss and accuracy are the records' exact values, not the log's rounded ones
    assert list(table["loss"]) == [2.01234, 1.49876]
    assert list(table["accuracy"]) == [0.1875, 0.4375]
    assert list(table["log_check"]) == ["ok", "ok"]


def test_a_log_that_disagrees_with_the_records_is_a_warning_not_a_lost_point(tmp_path, capsys):
    # what a busy machine does: Keras prints 99 s for epoch 1 while the records say 12 s
    doctored = LOG.replace("4/4 - 1s - loss: 2.0", "4/4 - 99s - loss: 2.0").replace(
        "900ms/epoch", "99s/epoch")
    epochs = [dict(EPOCHS[0], seconds=12.0), EPOCHS[1]]
    folder = completed_run(tmp_path / "M/gpus1/rep1", epochs, doctored)
    out = folder / "epochs.csv"
    assert tabulate_run.main([str(folder), "--meta", "run=M/gpus1/rep1", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "epoch 1 99 s in the log, 12 s in the records" in err
    assert "the tables use the records" in err
    assert aggregate.main([str(out), "--out-dir", str(tmp_path / "t")]) == 0
    runs = pd.read_csv(tmp_path / "t" / "runs.csv")
    assert bool(runs["counted"][0]) and "epoch 1 99 s in the log" in runs["log_check"][0]
    scaling_table = pd.read_csv(tmp_path / "t" / "scaling.csv")
    assert scaling_table["epoch_time_s"][0] == 0.41  # epoch 2, from the records
    assert "train.log does not match the records" in capsys.readouterr().err


def test_a_log_missing_an_epoch_is_named_in_the_log_check(tmp_path):
    folder = completed_run(tmp_path / "run", EPOCHS, LOG.split("Epoch 2/2")[0])
    rows, check = runtable.run_rows(folder, {})
    assert len(rows) == 2 and check == "the log has epochs [1], the records [1, 2]"


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


def test_parse_logs_never_writes_over_the_log_or_into_a_folder(tmp_path, capsys):
    log = tmp_path / "job.out"
    text = "Epoch 1/1\n4/4 - 1s - loss: 2.0 - accuracy: 0.2\n"
    log.write_text(text)
    for out, says in ((log, f"-o {log} is the log {log}"),
                      (tmp_path, f"-o {tmp_path} is a folder")):
        with pytest.raises(SystemExit) as stopped:
            parse_logs.main([str(log), "-o", str(out)])
        assert stopped.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert says in error and "Traceback" not in error
    assert log.read_text() == text


def test_serial_fraction_per_point_and_the_amdahl_fit_of_the_published_study():
    from dlscale.reporting.amdahl import amdahl, fit_table

    epochs = study_epochs()
    table = scaling(epochs, summarize_runs(epochs, 1), 1, 0.05)
    # Karp-Flatt: S(2) = 1.875 -> e = 0.0667, S(4) = 3.75 -> e = 0.0222 (the figures)
    assert np.isnan(table["serial_fraction"][0])
    assert list(table["serial_fraction"][1:].round(4)) == [0.0667, 0.0222]
    fit = fit_table(table).iloc[0]
    # the least-squares f, found here independently by scanning f in steps of 1e-6
    grid = np.arange(0, 0.1, 1e-6)
    sse = ((1.875 - amdahl(2, grid[:, None]))[:, 0] ** 2
           + (3.75 - amdahl(4, grid[:, None]))[:, 0] ** 2)
    assert fit["serial_fraction"] == pytest.approx(grid[np.argmin(sse)], abs=2e-6)
    assert 0.0222 < fit["serial_fraction"] < 0.0667
    assert fit["serial_fraction_se"] > 0 and fit["points"] == 2
    f = fit["serial_fraction"]
    assert (fit["gpus_2x"], fit["gpus_4x"]) == (8, 16)
    assert fit["speedup_2x"] == pytest.approx(1 / (f + (1 - f) / 8))
    assert fit["speedup_4x"] == pytest.approx(1 / (f + (1 - f) / 16))
    assert fit["efficiency_4x"] == pytest.approx(fit["speedup_4x"] / 16)


def test_one_multi_gpu_point_gives_a_fit_without_an_error_and_perfect_scaling_gives_zero():
    from dlscale.reporting.amdahl import fit_serial_fraction

    f, se = fit_serial_fraction([1, 2], [1.0, 1.875])
    assert f == pytest.approx(1 / 15, abs=1e-6) and np.isnan(se)  # exact: 1/1.875 = f + (1-f)/2
    assert fit_serial_fraction([2, 4, 8], [2.0, 4.0, 8.0])[0] == pytest.approx(0, abs=1e-9)
    assert np.isnan(fit_serial_fraction([1], [1.0])[0])


def test_gpu_hours_cost_and_time_to_accuracy_from_the_published_study():
    epochs = study_epochs()
    runs = summarize_runs(epochs, 1, target_accuracy=0.4)
    table = scaling(epochs, runs, 1, 0.05, gpu_hour_price=2.5)
    # 1 GPU x 45 s, 2 x 24 s, 4 x 12 s per epoch
    assert list(table["gpu_hours_per_epoch"] * 3600) == pytest.approx([45, 48, 48])
    assert list(table["gpu_hours_per_100_epochs"]) == pytest.approx([1.25, 4 / 3, 4 / 3])
    assert list(table["cost_per_epoch"]) == pytest.approx([0.03125, 1 / 30, 1 / 30])
    # accuracy 0.4164 at epoch 3 of 1 GPU (49 + 45 + 45 s), 0.4180 at epoch 3 of 4 GPUs
    assert table.set_index("gpus").loc[[1, 4], "time_to_target_s"].tolist() == [139, 38]
    unreached = scaling(epochs, summarize_runs(epochs, 1, target_accuracy=0.51), 1, 0.05)
    assert unreached["time_to_target_s"].isna().all()
    assert list(unreached["target_reached"]) == ["0/1"] * 3
    assert scaling(epochs, summarize_runs(epochs, 1), 1, 0.05)["cost_per_epoch"].isna().all()


def test_references_give_pass_fail_or_none_within_their_tolerances():
    from dlscale.reporting.references import judge

    epochs = study_epochs()
    table = scaling(epochs, summarize_runs(epochs, 1), 1, 0.05)
    refs = [{"model": "ResNet50V2", "gpus": 1, "images_per_s": 1200, "lower": -0.1,
             "upper": None},                                   # 1111 >= 1080: pass
            {"model": "ResNet50V2", "gpus": 2, "epoch_time_s": 20, "lower": -0.1,
             "upper": 0.1},                                    # 24 s > 22 s: fail
            {"model": "ResNet152V2", "gpus": 4, "images_per_s": 1, "lower": None,
             "upper": None}]                                   # no such point
    judged, verdicts = judge(table, refs)
    assert list(judged["verdict"]) == ["pass", "fail", "none"]
    assert list(judged["reference_metric"]) == ["images_per_s", "epoch_time_s", ""]
    assert list(verdicts["gpus"]) == [1, 2]
    assert verdicts["reference_low"].tolist() == pytest.approx([1080, 18])
    assert verdicts["reference_high"].tolist()[0] == np.inf


def test_the_subtitle_says_what_the_drawn_runs_used_not_what_the_config_says():
    from dlscale.reporting.plots import describe_runs

    runs = pd.DataFrame([
        {"run": "a", "source": "dlscale", "counted": True, "model": "ResNet50V2", "gpus": 2,
         "global_batch": 512, "epochs_expected": 5, "precision": "float32",
         "strategy": "mirrored", "scaling": "weak"},
        {"run": "b", "source": "dlscale", "counted": True, "model": "ResNet152V2", "gpus": 4,
         "global_batch": 512, "epochs_expected": 3, "precision": "mixed_float16",
         "strategy": "mirrored", "scaling": "weak"},
        {"run": "c", "source": "dlscale", "counted": False, "model": "VGG16", "gpus": 1,
         "global_batch": 64, "epochs_expected": 5, "precision": "float32",
         "strategy": "mirrored", "scaling": "weak"}])
    assert describe_runs(runs) == ("ResNet50V2: 256 per GPU, 5 epochs; ResNet152V2: 128 per "
                                   "GPU, 3 epochs; float32/mixed_float16; mirrored; weak scaling")
    runs["image_size"], runs["resize"] = 128, ["on_device", "on_device", "prepare"]
    assert describe_runs(runs).split("; ")[2] == "128 px (on_device resize)"


def test_points_slower_than_on_synthetic_input_are_flagged_input_bound():
    epochs = study_epochs()
    # as if each run had timed 1111, 2300 and 5000 images/s on synthetic input
    epochs["synthetic_images_per_s"] = epochs["gpus"].map({1: 1111.2, 2: 2300.0, 4: 5000.0})
    table = scaling(epochs, summarize_runs(epochs, 1), 1, 0.05)
    assert list(table["input_ratio"].round(3)) == [1.0, 0.906, 0.833]
    assert list(table["input_bound"]) == [False, False, True]


def test_a_resumed_runs_log_is_checked_by_each_epochs_last_line(tmp_path):
    # attempt 1 asked for 200 epochs and was killed after 2; attempt 2 resumed at 3 of 6
    first = ("Epoch 1/200\n4/4 - 1s - loss: 2.0 - accuracy: 0.2 - 900ms/epoch - 225ms/step\n"
             "Epoch 2/200\n4/4 - 0s - loss: 1.5 - accuracy: 0.4 - 400ms/epoch - 100ms/step\n"
             "Epoch 3/200\n2/4 [=====>....] - ETA: 0s - loss: 1.4\n")
    second = ("dlscale train: resuming from the backup in state/backup\n"
              "Epoch 3/3\n4/4 - 0s - loss: 1.2 - accuracy: 0.5 - 300ms/epoch - 75ms/step\n")
    epochs = EPOCHS + [{"epoch": 3, "seconds": 0.31, "loss": 1.2, "accuracy": 0.5}]
    folder = completed_run(tmp_path / "run", epochs, first + second)
    assert runtable.run_rows(folder, {})[1] == "ok"


def test_sacct_lines_of_real_jobs_become_the_accounted_columns():
    """tests/data/sacct/README.md: MaxRSS is the steps' maximum, energy 0 is not
    measured, a cancelled job's state is its first word."""
    from dlscale.jobs.slurm import parse_accounting as parse

    data = ROOT / "tests" / "data" / "sacct"
    done = parse("3", (data / "job3.txt").read_text())
    assert done == {"sacct_state": "COMPLETED", "sacct_elapsed_s": 23.0,
                    "sacct_cpu_s": pytest.approx(14.409), "sacct_max_rss_mb":
                    pytest.approx(836556 / 1024), "sacct_energy_j": None,
                    "sacct_alloc_tres": "billing=8,cpu=8,mem=4000M,node=1"}
    cancelled = parse("9", (data / "job9.txt").read_text())
    assert cancelled["sacct_state"] == "CANCELLED"
    assert cancelled["sacct_max_rss_mb"] == pytest.approx(795556 / 1024)


def test_no_accounting_leaves_the_columns_empty_with_a_note():
    from dlscale.jobs.slurm import ACCOUNTED as COLUMNS
    from dlscale.jobs.slurm import accounting as job_accounting

    assert job_accounting(None) == (dict.fromkeys(COLUMNS), None)
    columns, note = job_accounting("4242424242")
    assert columns == dict.fromkeys(COLUMNS) and note.startswith("no job accounting")


def test_a_perfect_speedup_has_a_serial_fraction_of_zero():
    """The fit stopped at 4.77e-21 and printed it: to its resolution, it is 0."""
    from dlscale.reporting.amdahl import fit_serial_fraction, karp_flatt

    f, se = fit_serial_fraction([1, 2, 4], [1.0, 2.0, 4.0])
    assert (f, se) == (0.0, 0.0)
    assert list(karp_flatt([3.0, 7.0], [3, 7])) == [0.0, 0.0]


def test_a_run_whose_epochs_all_print_0s_says_why_it_is_not_counted():
    """A command whose epochs print `0s` (Keras 3's whole seconds) and no ms/step was
    'no epoch left after skipping 1': it is counted out with the reason and what to do."""
    epochs = study_epochs()
    epochs.loc[epochs["run"] == "ref2", "seconds"] = 0.0
    runs = summarize_runs(epochs, 1)
    row = runs[runs["run"] == "ref2"].iloc[0]
    assert not row["counted"]
    assert row["problem"].startswith("every epoch's time is 0 s: the output gives whole "
                                     "seconds")


def test_every_declared_run_json_column_reaches_runs_csv(tmp_path):
    """A column declared with a run.json source and carried into runs.csv
    (dlscale.core.columns) needs nothing else: a record holding a value for each, the
    nested ones included (dataset.name, system.*), gives runs.csv a row with each value,
    in the registry's order. (slurm_job_id is left out: it makes the run table ask sacct.)"""
    from dlscale.core import columns
    from dlscale.reporting import runtable

    carried = {name: key for name, key in columns.RECORD_KEYS.items()
               if name in columns.RUNS_CARRIED and name not in ("model", "gpus", "nodes",
                                                                 "global_batch", "status",
                                                                 "slurm_job_id")}
    record = {}
    for name, key in carried.items():
        *parents, leaf = key.split(".")
        holder = record
        for parent in parents:
            holder = holder.setdefault(parent, {})
        holder[leaf] = f"value of {name}"
    folder = completed_run(tmp_path / "run", EPOCHS, LOG)
    stored = json.loads((folder / "run.json").read_text())
    stored.update({k: ({**stored[k], **v} if isinstance(stored.get(k), dict) else v)
                   for k, v in record.items()})
    (folder / "run.json").write_text(json.dumps(stored))
    rows, _ = runtable.run_rows(folder, {"run": "r", "series": "M"})
    runs = summarize_runs(pd.DataFrame(rows), skip_epochs=1)
    assert list(runs.columns) == [c.name for c in columns.RUNS_CSV]
    assert {name: runs[name].iloc[0] for name in carried} == {
        name: f"value of {name}" for name in carried}


def test_an_accuracy_change_of_exactly_the_tolerance_is_not_flagged():
    """0.90 against 0.85 with a tolerance of 0.05: 0.05000000000000004 in binary was
    flagged as beyond it (issue 78, 17); 0.91 is."""
    epochs = pd.DataFrame([{"model": "M", "gpus": g, "epoch": e, "seconds": 1.0, "loss": 1.0,
                            "run": f"M/gpus{g}",
                            "accuracy": acc, "images_per_epoch": 64, "global_batch": 8 * g}
                           for g, acc in ((1, 0.85), (2, 0.90), (4, 0.91)) for e in (1, 2)])
    runs = summarize_runs(epochs, skip_epochs=1)
    table = scaling(epochs, runs, skip_epochs=1, accuracy_tolerance=0.05)
    assert table.set_index("gpus")["accuracy_flag"].to_dict() == {1: False, 2: False, 4: True}
