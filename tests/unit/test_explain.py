"""What more GPUs would give (dlscale.reporting.explain): the all-reduce's alpha-beta fit, the
prediction checked on the held-out point, and breakdown.csv from breakdown.json files.
The series are made here from the model's own formula, so every expected figure follows
from the parameters below, not from a run."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas as pd
import pytest
from conftest import NO_TENSORFLOW, SCRIPTS

from dlscale.core.contract import BREAKDOWN
from dlscale.reporting import explain, gradients

ALPHA, BANDWIDTH, GRADIENT = 20e-6, 5e9, 100 * 2**20  # s, bytes/s (bus), bytes
COMPUTE, BATCH = 0.2, 32  # seconds of a step no communication explains; images per GPU
SIZES = [4096, 65536, 2**20, 16 * 2**20, GRADIENT]


def allreduce(n, size=GRADIENT):
    return explain.allreduce_s(n, size, ALPHA, BANDWIDTH)


def study(tmp_path, gpus=(1, 2, 4), slower_at=None, separable=True):
    """scaling.csv and runs.csv of a weak-scaling series whose steps take COMPUTE plus the
    whole all-reduce (nothing hidden), each point's breakdown.json beside its records."""
    scaling, runs = [], []
    for n in gpus:
        step = COMPUTE + allreduce(n) + (0.5 * COMPUTE if n == slower_at else 0)
        scaling.append({"series": "Net", "model": "Net", "strategy": "dataparallel",
                        "precision": "float32", "nodes": 1, "gpus": n, "scaling": "weak",
                        "global_batch": BATCH * n, "images_per_s": BATCH * n / step})
        run = f"Net/gpus{n}/rep1"
        runs.append({"run": run, "source": "dlscale", "counted": True, "series": "Net",
                     "gpus": n, "nodes": 1})
        comm = allreduce(n) if separable else 0.0
        record = {"method": "own trace", "replicas": n, "gradient_bytes": GRADIENT,
                  "notes": [], "communication": "separable" if n > 1 and separable else
                  "none (one replica)" if n == 1 else "not separable",
                  "summary": {"steps": 5, "step_s": step, "wall_s": 5 * step,
                              "comm_total_s": 5 * comm, "comm_exposed_s": 5 * comm,
                              "compute_s": 5 * (step - comm), "input_s": 0.0,
                              "other_s": 0.0},
                  "collective": None if n == 1 else {
                      "bytes": SIZES, "seconds": [allreduce(n, s) for s in SIZES]}}
        (tmp_path / run).mkdir(parents=True)
        (tmp_path / run / BREAKDOWN).write_text(json.dumps(record))
    frame = pd.DataFrame(scaling)
    frame["efficiency"] = (frame["images_per_s"] / frame["gpus"]
                           / frame["images_per_s"].iloc[0])
    return frame, pd.DataFrame(runs)


def test_a_points_timings_give_back_the_latency_and_bus_bandwidth():
    for n in (2, 4, 8):
        alpha, bandwidth = explain.alpha_beta(
            {"bytes": SIZES, "seconds": [allreduce(n, s) for s in SIZES]}, n)
        assert alpha == pytest.approx(ALPHA) and bandwidth == pytest.approx(BANDWIDTH)
    assert explain.alpha_beta(None, 2) is None and explain.alpha_beta({"error": "x"}, 2) is None


def test_a_series_the_model_explains_is_predicted_on_its_held_out_point(tmp_path):
    scaling, runs = study(tmp_path)
    breakdown, prediction = explain.tables(scaling, runs, tmp_path)
    assert prediction["gpus"].tolist() == [1, 2, 4, 8, 16]
    assert prediction["role"].tolist() == ["fit", "fit", "held out", "extrapolated",
                                           "extrapolated"]
    held = prediction[prediction["gpus"] == 4].iloc[0]
    assert abs(held["error"]) < 1e-6 and held["verdict"] == "explained"
    for _, row in prediction.iterrows():  # weak scaling: efficiency = T(1) / T(n)
        n = row["gpus"]
        assert row["predicted_step_s"] == pytest.approx(COMPUTE + allreduce(n))
        assert row["predicted_efficiency"] == pytest.approx(COMPUTE / (COMPUTE + allreduce(n)))
    assert prediction["latency_us"].iloc[0] == pytest.approx(ALPHA * 1e6)
    assert prediction["bus_bandwidth_gbs"].iloc[0] == pytest.approx(BANDWIDTH / 1e9)
    assert breakdown["communication_share"].tolist()[0] == 0
    four = breakdown[breakdown["gpus"] == 4].iloc[0]
    assert four["communication_share"] == pytest.approx(
        allreduce(4) / (COMPUTE + allreduce(4)))
    assert four["bus_bandwidth_gbs"] == pytest.approx(
        GRADIENT / allreduce(4) * 2 * 3 / 4 / 1e9)


def test_a_held_out_point_slower_than_the_model_says_is_not_explained(tmp_path):
    scaling, runs = study(tmp_path, slower_at=4)
    _, prediction = explain.tables(scaling, runs, tmp_path)
    held = prediction[prediction["gpus"] == 4].iloc[0]
    assert held["error"] == pytest.approx(-(0.5 * COMPUTE) / (1.5 * COMPUTE + allreduce(4)))
    assert held["verdict"].startswith("not explained")


def test_communication_the_trace_cannot_separate_is_empty_never_zero(tmp_path):
    scaling, runs = study(tmp_path, separable=False)
    breakdown, _ = explain.tables(scaling, runs, tmp_path)
    two = breakdown[breakdown["gpus"] == 2].iloc[0]
    assert two["communication"] == "not separable"
    assert math.isnan(two["communication_share"]) and two["dominant"] == "compute"


def test_a_series_without_records_is_listed_with_the_reason(tmp_path):
    scaling, runs = study(tmp_path, gpus=(1, 2))
    for run in runs["run"]:
        (tmp_path / run / BREAKDOWN).unlink()
    breakdown, prediction = explain.tables(scaling, runs, tmp_path)
    assert breakdown["notes"].str.startswith("no breakdown.json").all()
    assert prediction["note"].str.contains("not predicted").all()
    assert prediction["predicted_step_s"].isna().all()


def test_compare_shows_where_the_time_goes_and_the_prediction_of_both_studies(tmp_path):
    from dlscale.core.files import write_table
    from dlscale.reporting.compare import main as compare

    paths = []
    for name, slower in (("this", None), ("last-year", 4)):
        folder = tmp_path / name
        scaling, runs = study(folder, slower_at=slower)
        scaling = scaling.assign(epoch_time_s=1.0, speedup=1.0, final_accuracy=0.5)
        breakdown, prediction = explain.tables(scaling, runs, folder)
        for table, frame in (("scaling", scaling), ("breakdown", breakdown),
                             ("prediction", prediction)):
            write_table(frame, folder / "tables" / f"{table}.csv")
        paths.append(folder / "tables" / "scaling.csv")
    out = tmp_path / "compared.csv"
    assert compare([str(paths[0]), "--compare", f"2025={paths[1]}", "-o", str(out)]) == 0
    compared = pd.read_csv(out)
    assert list(zip(compared["study"], compared["role"], compared["gpus"], strict=True)) == [
        (study_, role, gpus) for study_ in ("this study", "2025")
        for role, gpus in (("measured", 1), ("measured", 2), ("measured", 4),
                           ("extrapolated", 8), ("extrapolated", 16))]
    measured = compared[compared["role"] == "measured"]
    assert measured["dominant"].eq("compute").all() and measured["compute_share"].gt(0).all()
    assert compared["predicted_efficiency"].notna().all()
    assert set(compared.groupby("study")["verdict"].first()) == {
        "explained", f"not explained: the held-out error is over {explain.EXPLAINED_ERROR:.0%}"}


def test_an_external_series_is_fitted_on_its_step_times_with_a_known_gradient():
    """No breakdown.json (a log dlscale did not write): the 1-GPU step is compute, the
    2-GPU step's extra time the all-reduce of the model's gradient; 4 GPUs is predicted."""
    steps = {1: 0.20, 2: 0.25, 4: 0.30}
    points = pd.DataFrame({"gpus": [1, 2, 4], "global_batch": [32, 64, 128],
                           "scaling": "weak", "efficiency": [1.0, 0.8, 2 / 3]})
    points["images_per_s"] = points["global_batch"] / points["gpus"].map(steps)
    empty = pd.DataFrame(columns=["series", "gpus", "communication_share"])
    rows = explain.series_prediction("Net", points, empty, {}, known_size=GRADIENT)
    by = {r["gpus"]: r for r in rows}
    bandwidth = GRADIENT / 0.05  # 2(n-1)/n = 1 at n = 2
    assert by[2]["bus_bandwidth_gbs"] == pytest.approx(bandwidth / 1e9)
    assert by[2]["latency_us"] == 0 and by[2]["predicted_step_s"] == pytest.approx(0.25)
    assert by[4]["role"] == "held out"
    assert by[4]["predicted_step_s"] == pytest.approx(0.20 + 1.5 * 0.05)
    assert by[4]["error"] == pytest.approx((0.275 - 0.30) / 0.30)
    assert by[4]["note"] == explain.FROM_STEP_TIMES and by[4]["verdict"] == "explained"
    # no gradient size: a note on every row, nothing predicted
    rows = explain.series_prediction("Net", points, empty, {}, known_size=None)
    assert all(r["note"].startswith("no breakdown.json and no known model") for r in rows)


def test_an_external_logs_keras_application_is_sized_without_tensorflow():
    """The published study's models (and every keras.applications one) come from
    the models table: explain_scaling.py starts no TensorFlow for them, and runs where there
    is none. Before, each such study built the model (TensorFlow's start and the build), and
    failed where TensorFlow is not installed."""
    code = NO_TENSORFLOW + f"""
sys.path.insert(0, {str(SCRIPTS)!r})
from dlscale.reporting.gradients import model_gradient_bytes
print(model_gradient_bytes("ResNet50V2"), model_gradient_bytes("ResNet152V2"))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kept = gradients.known()
    assert proc.stdout.split() == [str(kept["ResNet50V2"]), str(kept["ResNet152V2"])]


def test_the_kept_gradient_sizes_are_what_keras_builds():
    """The models table names every keras.applications model of the installed Keras and holds
    what building it gives: checked here on three (a residual network, an inverted-residual
    one, and VGG16, whose flattened head depends on the image size)."""
    pytest.importorskip("tf_keras")
    kept = gradients.known()
    assert set(gradients.applications()) <= set(kept)
    for name in ("ResNet50V2", "MobileNetV2", "VGG16"):
        assert kept[name] == gradients.built(name), name
    assert gradients.model_gradient_bytes("SimpleCNN") == gradients.built("SimpleCNN") > 0
    assert gradients.model_gradient_bytes("NoSuchNet") is None


def test_traced_steps_slower_than_the_epochs_steps_are_a_note(tmp_path):
    """The window waits for each traced step's result, so the host's preparation of the next
    batch, which the epochs overlap with the device's work, counts as input or other in the
    traced steps: where they are much slower than the epochs' steps, the row says so."""
    scaling, runs = study(tmp_path)
    slow = tmp_path / "Net/gpus2/rep1" / BREAKDOWN
    record = json.loads(slow.read_text())
    step = record["summary"]["step_s"]
    record["summary"]["step_s"] = 2 * step
    slow.write_text(json.dumps(record))
    rows = explain.point_rows(scaling, runs, explain.read_breakdowns(runs, tmp_path))
    notes = dict(zip(rows["gpus"], rows["notes"], strict=True))
    assert notes[1] == notes[4] == ""
    assert notes[2] == (f"the traced steps took {2 * step * 1e3:.1f} ms, the epochs' "
                        f"{step * 1e3:.1f} ms: the window runs each step to its end before "
                        "the next (what the epochs overlap with the device's work, the next "
                        "batch's preparation, is input or other there) and the profiler adds "
                        "its own cost")
