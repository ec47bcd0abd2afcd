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
from helpers.prediction import (
    ALPHA,
    BANDWIDTH,
    BATCH,
    COMPUTE,
    GRADIENT,
    SIZES,
    breakdown_of,
    records,
    series,
)

from dlscale.core.contract import BREAKDOWN
from dlscale.reporting import explain, gradients
from dlscale.reporting.prediction import links as netlinks
from dlscale.reporting.prediction import series as predict


def allreduce(n, size=GRADIENT):
    return netlinks.allreduce_s(n, size, ALPHA, BANDWIDTH)


def study(tmp_path, gpus=(1, 2, 4), slower_at=None, separable=True, traced_slower=1.0):
    """scaling.csv and runs.csv of a weak-scaling series whose steps take COMPUTE plus the
    whole all-reduce (nothing hidden), each point's breakdown.json beside its records;
    `traced_slower`: its traced steps took that many times the epochs' steps, with the
    same communication in them."""
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
                  "summary": {"steps": 5, "step_s": step * traced_slower,
                              "wall_s": 5 * step * traced_slower,
                              "comm_total_s": 5 * comm, "comm_exposed_s": 5 * comm,
                              "compute_s": 5 * (step * traced_slower - comm), "input_s": 0.0,
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
        alpha, bandwidth = netlinks.alpha_beta(
            {"bytes": SIZES, "seconds": [allreduce(n, s) for s in SIZES]}, n)
        assert alpha == pytest.approx(ALPHA) and bandwidth == pytest.approx(BANDWIDTH)
    assert netlinks.alpha_beta(None, 2) is None and netlinks.alpha_beta({"error": "x"}, 2) is None


def test_a_series_the_model_explains_is_predicted_on_its_held_out_point(tmp_path):
    scaling, runs = study(tmp_path)
    breakdown, prediction = explain.tables(scaling, runs, tmp_path, gpus_per_node=16)
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
    _, prediction = explain.tables(scaling, runs, tmp_path, gpus_per_node=16)
    held = prediction[prediction["gpus"] == 4].iloc[0]
    assert held["error"] == pytest.approx(-(0.5 * COMPUTE) / (1.5 * COMPUTE + allreduce(4)))
    assert held["verdict"].startswith("not explained")


def test_communication_the_trace_cannot_separate_is_empty_never_zero(tmp_path):
    scaling, runs = study(tmp_path, separable=False)
    breakdown, _ = explain.tables(scaling, runs, tmp_path, gpus_per_node=16)
    two = breakdown[breakdown["gpus"] == 2].iloc[0]
    assert two["communication"] == "not separable"
    assert math.isnan(two["communication_share"]) and two["dominant"] == "compute"


def test_a_series_without_records_is_listed_with_the_reason(tmp_path):
    scaling, runs = study(tmp_path, gpus=(1, 2))
    for run in runs["run"]:
        (tmp_path / run / BREAKDOWN).unlink()
    breakdown, prediction = explain.tables(scaling, runs, tmp_path, gpus_per_node=16)
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
        breakdown, prediction = explain.tables(scaling, runs, folder, gpus_per_node=16)
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
        "explained", f"not explained: the held-out error is over {predict.EXPLAINED_ERROR:.0%}"}


def test_an_external_series_is_fitted_on_its_step_times_with_a_known_gradient():
    """No breakdown.json (a log dlscale did not write): the 1-GPU step is compute, the
    2-GPU step's extra time the all-reduce of the model's gradient; 4 GPUs is predicted."""
    steps = {1: 0.20, 2: 0.25, 4: 0.30}
    points = pd.DataFrame({"gpus": [1, 2, 4], "global_batch": [32, 64, 128],
                           "scaling": "weak", "efficiency": [1.0, 0.8, 2 / 3]})
    points["images_per_s"] = points["global_batch"] / points["gpus"].map(steps)
    empty = pd.DataFrame(columns=["series", "gpus", "communication_share"])
    rows = predict.series_prediction("Net", points, empty, {}, known_size=GRADIENT)
    by = {r["gpus"]: r for r in rows}
    # the extra time is a residual: no latency or bandwidth is printed for it
    assert math.isnan(by[2]["bus_bandwidth_gbs"]) and math.isnan(by[2]["latency_us"])
    assert by[2]["link_source"] == netlinks.FITTED and by[2]["comm_s"] == pytest.approx(0.05)
    assert by[2]["predicted_step_s"] == pytest.approx(0.25)
    assert by[4]["role"] == "held out"
    assert by[4]["predicted_step_s"] == pytest.approx(0.20 + 1.5 * 0.05)
    assert by[4]["error"] == pytest.approx((0.275 - 0.30) / 0.30)
    assert netlinks.FROM_STEP_TIMES in by[4]["note"] and by[4]["verdict"] == "explained"
    # no gradient size: a note on every row, nothing predicted
    rows = predict.series_prediction("Net", points, empty, {}, known_size=None)
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


def test_strong_scaling_compute_falls_as_one_over_n_and_never_below_zero():
    """Strong scaling: C(1) = 0.2 s and C(2) = 0.1 s made the straight line of the compute
    negative at 4 GPUs (0.2 - 0.1 x 3 = -0.1 s, printed on the first page). Its form is a
    fixed part and a part that falls as 1/n: 0.05 s at 4 GPUs, 0.025 s at 8."""
    one = lambda n, nodes, s: netlinks.allreduce_s(n, s, ALPHA, BANDWIDTH)  # noqa: E731
    steps = {(1, 1): 0.2, (2, 1): 0.1 + one(2, 1, GRADIENT), (4, 1): 0.05 + one(4, 1, GRADIENT)}
    frame = series(steps, scaling="strong", batch=256)
    exposed = {k: one(k[0], 1, GRADIENT) if k[0] > 1 else 0.0 for k in steps}
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed),
                                     records(steps, one), gpus_per_node=16)
    by = {r["gpus"]: r for r in rows}
    assert by[4]["role"] == "held out" and abs(by[4]["error"]) < 1e-9
    assert by[8]["predicted_step_s"] == pytest.approx(0.025 + one(8, 1, GRADIENT))
    assert all(r["predicted_step_s"] > 0 and r["predicted_efficiency"] <= 1 + 1e-12
               for r in rows)


def test_weak_scaling_noise_is_not_extrapolated_into_a_gain():
    """5 % of noise at 2 GPUs made the compute line grow 75 % by 16 GPUs, and an efficiency
    over 1 could follow. On GPUs each replica's work is the same at any count: C is one
    number, and no predicted weak-scaling efficiency is above 1."""
    one = lambda n, nodes, s: netlinks.allreduce_s(n, s, ALPHA, BANDWIDTH)  # noqa: E731
    steps = {(1, 1): COMPUTE, (2, 1): 0.95 * COMPUTE + one(2, 1, GRADIENT),
             (4, 1): COMPUTE + one(4, 1, GRADIENT)}
    frame = series(steps)
    exposed = {k: one(k[0], 1, GRADIENT) if k[0] > 1 else 0.0 for k in steps}
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed),
                                     records(steps, one), gpus_per_node=16)
    by = {r["gpus"]: r for r in rows}
    assert by[16]["predicted_step_s"] - one(16, 1, GRADIENT) == pytest.approx(COMPUTE)
    assert max(r["predicted_efficiency"] for r in rows) <= 1 + 1e-12
    assert by[16]["predicted_step_low_s"] < by[16]["predicted_step_s"] \
        < by[16]["predicted_step_high_s"]  # the band: the fit points' spread


def test_communication_the_trace_shows_beyond_the_timed_all_reduce_stays_in_the_step():
    """On logical CPU devices the trace's communication held more than the all-reduce
    timed alone (the framework's own cost of each collective, a wait for the slower
    replica): taken from the step as communication, it left the test bed's 2-replica fit
    point no compute at all (its own prediction 60 % short), the held-out point 10 %
    short.
    What the link does not explain recurs at every multi-replica count: the fit points
    reproduce themselves and the held-out point is predicted."""
    one = lambda n, nodes, s: netlinks.allreduce_s(n, s, ALPHA, BANDWIDTH)  # noqa: E731
    extra = 0.05  # seconds a step spends in collectives beyond moving the bytes
    steps = {(1, 1): COMPUTE, (2, 1): COMPUTE + extra + one(2, 1, GRADIENT),
             (4, 1): COMPUTE + extra + one(4, 1, GRADIENT)}
    frame = series(steps)
    exposed = {k: extra + one(k[0], 1, GRADIENT) if k[0] > 1 else 0.0 for k in steps}
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed),
                                     records(steps, one), gpus_per_node=16)
    by = {(r["gpus"], r["role"]): r for r in rows}
    assert abs(by[(2, "fit")]["error"]) < 1e-9, by[(2, "fit")]
    assert abs(by[(4, "held out")]["error"]) < 1e-9, by[(4, "held out")]


def test_a_spread_wider_than_the_step_keeps_the_band_above_zero():
    """Three epochs, the first skipped: two timed epochs give a 95 % interval wider than
    the step itself (t of 1 degree of freedom is 12.7), and the band's low end read
    -0.9 s for a 0.69 s prediction in the slowed-link test bed. The band is a factor
    either way: the step over and times 1 + the spread."""
    one = lambda n, nodes, s: netlinks.allreduce_s(n, s, ALPHA, BANDWIDTH)  # noqa: E731
    steps = {(1, 1): COMPUTE, (2, 1): COMPUTE + one(2, 1, GRADIENT),
             (4, 1): COMPUTE + one(4, 1, GRADIENT)}
    frame = series(steps, epoch_time_s=10.0, epoch_time_ci95=23.0)  # a spread of 2.3
    exposed = {k: one(k[0], 1, GRADIENT) if k[0] > 1 else 0.0 for k in steps}
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed),
                                     records(steps, one), gpus_per_node=16)
    for row in rows:
        assert 0 < row["predicted_step_low_s"] < row["predicted_step_s"] \
            < row["predicted_step_high_s"], row
        assert row["predicted_step_high_s"] / row["predicted_step_s"] == pytest.approx(
            row["predicted_step_s"] / row["predicted_step_low_s"])
    # past the fit points the band is wide from the spread alone, and says so (issue 100:
    # the fits agree; the points' timing does not make them unpredictable)
    assert all(r["note"].startswith("the band is ") and "timing spread" in r["note"]
               for r in rows if r["role"] != "fit")


@pytest.mark.parametrize("case", ["not separable", "failed window"])
def test_communication_no_trace_separates_counts_as_wholly_exposed(tmp_path, case):
    """Where the trace cannot separate communication (or the window failed), the
    exposed communication counted as 0 and the prediction was the compute alone. The
    all-reduce then counts in full (nothing hidden), as docs/analysis.md says."""
    scaling, runs = study(tmp_path, separable=case == "separable")
    if case == "failed window":
        for run in runs["run"]:
            path = tmp_path / run / BREAKDOWN
            record = json.loads(path.read_text())
            record.pop("summary")
            path.write_text(json.dumps(record))
    _, prediction = explain.tables(scaling, runs, tmp_path, gpus_per_node=16)
    assert prediction["predicted_step_s"].tolist() == pytest.approx(
        [COMPUTE + allreduce(n) for n in prediction["gpus"]])
    assert (prediction["hideable"] == 0).all()
    assert prediction.loc[prediction["gpus"] == 4, "verdict"].iloc[0] == "explained"


def test_a_series_over_node_counts_is_one_series_and_crosses_nodes_on_the_link_between():
    """A sweep over 1 and 2 nodes is one series: within a node the ring of the one-node
    points, past it the ring the two-node point timed (at the network's pace, 20x slower
    here); 4 GPUs on 2 nodes is predicted from them, and the doublings take as many nodes
    as hold them (2 GPUs a node)."""
    inter = netlinks.Link(50e-6, BANDWIDTH / 20)
    intra = netlinks.Link(ALPHA, BANDWIDTH)

    def ring(n, nodes, size):
        return netlinks.allreduce_time(n, nodes, size, intra, inter)

    points = [(1, 1), (2, 1), (2, 2), (4, 2)]
    steps = {k: COMPUTE + ring(*k, GRADIENT) for k in points}
    frame = series(steps)
    exposed = {k: steps[k] - COMPUTE for k in points}
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed),
                                     records(points, ring), gpus_per_node=2)
    assert [(r["gpus"], r["nodes"], r["role"]) for r in rows] == [
        (1, 1, "fit"), (2, 1, "fit"), (2, 2, "fit"), (4, 2, "held out"),
        (8, 4, "extrapolated"), (16, 8, "extrapolated")]
    by = {(r["gpus"], r["nodes"]): r for r in rows}
    assert abs(by[(4, 2)]["error"]) < 1e-9 and by[(4, 2)]["verdict"] == "explained"
    assert by[(2, 2)]["bus_bandwidth_inter_gbs"] == pytest.approx(BANDWIDTH / 20 / 1e9)
    assert by[(2, 2)]["latency_inter_us"] == pytest.approx(50)
    assert by[(2, 1)]["bus_bandwidth_gbs"] == pytest.approx(BANDWIDTH / 1e9)
    assert by[(16, 8)]["predicted_step_s"] == pytest.approx(COMPUTE + ring(16, 8, GRADIENT))
    assert by[(16, 8)]["predicted_step_s"] > COMPUTE + netlinks.allreduce_s(
        16, GRADIENT, ALPHA, BANDWIDTH)  # not the link inside a node
    assert {r["link_source"] for r in rows} == {netlinks.MEASURED}


def test_a_doubling_past_the_node_without_a_link_between_nodes_is_a_note():
    """One-node points only, on 4-GPU nodes: 8 GPUs need two nodes and nothing measured
    the link between them, so nothing is predicted there (the bandwidth inside a node
    was used whatever node count a doubling needed)."""
    one = lambda n, nodes, s: netlinks.allreduce_s(n, s, ALPHA, BANDWIDTH)  # noqa: E731
    steps = {(1, 1): COMPUTE, (2, 1): COMPUTE + one(2, 1, GRADIENT),
             (4, 1): COMPUTE + one(4, 1, GRADIENT)}
    frame = series(steps)
    exposed = {k: steps[k] - COMPUTE for k in steps}
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed),
                                     records(steps, one), gpus_per_node=4)
    by = {r["gpus"]: r for r in rows}
    assert by[4]["verdict"] == "explained" and (by[8]["nodes"], by[16]["nodes"]) == (2, 4)
    assert math.isnan(by[8]["predicted_step_s"]) and netlinks.NO_NETWORK in by[8]["note"]


def test_replicas_sharing_one_machines_cores_share_its_work():
    """Logical CPU devices share the machine's cores: the compute of a weak-scaling step
    grows with the global batch, measured as such, not as a line through the points."""
    steps = {(1, 1): 0.1, (2, 1): 0.2 + allreduce(2), (4, 1): 0.4 + allreduce(4)}
    frame = series(steps)
    exposed = {k: steps[k] - 0.1 * k[0] for k in steps}
    one = lambda n, nodes, s: netlinks.allreduce_s(n, s, ALPHA, BANDWIDTH)  # noqa: E731
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed),
                                     records(steps, one), shared_cores=True)
    by = {r["gpus"]: r for r in rows}
    assert abs(by[4]["error"]) < 1e-9 and by[16]["nodes"] == 1
    assert by[16]["predicted_step_s"] == pytest.approx(1.6 + allreduce(16))


def test_the_traced_steps_shares_are_taken_of_the_traced_steps_time(tmp_path):
    """Traced steps ran 2.3 times as long as the epochs' (one at a time, profiled; an H200
    point did), with the same all-reduce in them: its share of the traced step, taken of
    the epochs' step, made the exposed communication 2.3 times too small. Taken of what it
    measured, nothing of the all-reduce is hidden (as the trace says: all of it exposed),
    where the share of the epochs' step read 57 % of it as hidden behind compute."""
    scaling, runs = study(tmp_path, traced_slower=2.3)
    breakdown, prediction = explain.tables(scaling, runs, tmp_path, gpus_per_node=16)
    assert (prediction["hideable"] == 0).all()
    held = prediction[prediction["role"] == "held out"].iloc[0]
    assert abs(held["error"]) < 1e-6 and held["verdict"] == "explained"
    assert breakdown.loc[breakdown["gpus"] == 4, "notes"].iloc[0].startswith(
        "the traced steps took")


def test_a_series_without_a_window_is_sized_from_the_models_table_and_said_in_words(tmp_path):
    """analysis.breakdown: 0 left dlscale's own SimpleCNN without a gradient size ("no
    known model", issue 78, 15), and explain_scaling.py printed 'nan' for a series
    without a verdict (16)."""
    from conftest import run_script

    from dlscale.core.files import write_table

    scaling, runs = study(tmp_path, gpus=(1, 2))
    scaling["model"] = "SimpleCNN"
    assert explain.gradient_sizes(scaling, runs, lambda m: None) == {
        "SimpleCNN": gradients.known()["SimpleCNN"]}
    for run in runs["run"]:
        (tmp_path / run / BREAKDOWN).unlink()
    write_table(scaling, tmp_path / "scaling.csv")
    write_table(runs, tmp_path / "runs.csv")
    proc = run_script("explain_scaling.py", str(tmp_path / "scaling.csv"), "--runs",
                      str(tmp_path / "runs.csv"), "--runs-dir", str(tmp_path), "--breakdown",
                      str(tmp_path / "b.csv"), "--prediction", str(tmp_path / "p.csv"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "nan" not in proc.stdout and proc.stdout.startswith("Net: no timed all-reduce")


def test_an_outside_series_with_one_global_batch_is_predicted_as_strong_scaling():
    """Outside logs say no scaling, and were all taken as weak: a series whose global batch
    is the same at every count is strong scaling, its doublings keep that batch."""
    steps = {1: 0.40, 2: 0.22, 4: 0.13}
    points = pd.DataFrame({"gpus": [1, 2, 4], "global_batch": [256, 256, 256],
                           "efficiency": [1.0, 0.91, 0.77]})
    points["images_per_s"] = 256 / points["gpus"].map(steps)
    empty = pd.DataFrame(columns=["series", "gpus", "communication_share"])
    rows = predict.series_prediction("Net", points, empty, {}, known_size=GRADIENT,
                                     gpus_per_node=16)
    by = {r["gpus"]: r for r in rows}
    assert by[8]["predicted_step_s"] < by[4]["predicted_step_s"]  # the batch is split
    assert by[8]["predicted_efficiency"] < by[4]["predicted_efficiency"] <= 1


def test_breakdown_csv_tells_waiting_for_the_slowest_replica_from_the_transfer(tmp_path):
    """The union over all devices hid one replica's wait for the slowest under another's
    compute: breakdown.csv has both parts per replica, and names the device the others
    waited for where the wait is the larger."""
    scaling, runs = study(tmp_path)
    path = tmp_path / "Net/gpus4/rep1" / BREAKDOWN
    record = json.loads(path.read_text())
    record["summary"].update(comm_wait_s=0.030, comm_transfer_s=0.010, slowest="/device:GPU:3")
    path.write_text(json.dumps(record))
    breakdown, _ = explain.tables(scaling, runs, tmp_path, gpus_per_node=16)
    four = breakdown[breakdown["gpus"] == 4].iloc[0]
    wall = record["summary"]["wall_s"]
    assert (four["wait_share"], four["transfer_share"]) == (
        pytest.approx(0.030 / wall), pytest.approx(0.010 / wall))
    assert four["slowest_replica"] == "/device:GPU:3"
    assert "the replicas waited for the slowest (/device:GPU:3) longer than the collectives " \
           "moved data" in four["notes"]
    two = breakdown[breakdown["gpus"] == 2].iloc[0]  # a record of before: empty, not 0
    assert math.isnan(two["wait_share"]) and "waited" not in two["notes"]


def test_a_series_without_a_1_gpu_point_predicts_efficiency_over_its_base_point():
    """Measured efficiency is over the series' fewest GPUs; the prediction's was over a
    modelled 1-GPU point, so a fit point disagreed with itself (1.0 against 0.98; issue
    78, 7). Both are over the base point now."""
    one = lambda n, nodes, s: netlinks.allreduce_s(n, s, ALPHA, BANDWIDTH)  # noqa: E731
    steps = {(n, 1): COMPUTE + one(n, 1, GRADIENT) for n in (2, 4, 8)}
    frame = series(steps)
    exposed = {k: steps[k] - COMPUTE for k in steps}
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed),
                                     records(steps, one), gpus_per_node=8)
    for row in rows[:3]:
        assert row["predicted_efficiency"] == pytest.approx(row["measured_efficiency"])
    assert rows[0]["predicted_efficiency"] == pytest.approx(1.0)


def test_writing_the_models_table_keeps_its_comments_once_and_torchvisions_sizes(tmp_path,
                                                                               monkeypatch):
    """gradients --write rewrites models.csv: its own "written by" line replaced (not kept
    beside the new one), the other comments kept once, torchvision's rows (which Keras
    cannot build) with their kept sizes. Building is stubbed: the table's bookkeeping is
    what is tested."""
    pytest.importorskip("tf_keras")
    from dlscale.core import models

    table = tmp_path / "models.csv"
    table.write_text(models.TABLE.read_text())
    monkeypatch.setattr(models, "TABLE", table)
    monkeypatch.setattr(gradients, "applications", lambda: [])
    monkeypatch.setattr(gradients, "built", lambda name: 1)
    models.table.cache_clear()
    try:
        before = table.read_text()
        for _ in range(2):
            gradients.write()
        after = table.read_text()
        assert after.count("gradient_bytes written by") == 1
        comments = [x for x in before.splitlines() if x.startswith("#")]
        assert [x for x in after.splitlines() if x.startswith("#")][:-1] == comments[:-1]
        assert "resnet50,torchvision.models,32,94114088" in after
        assert "SimpleCNN,simple_cnn,8,1\n" in after
    finally:
        models.table.cache_clear()


def test_writing_one_rows_size_builds_that_model_alone(tmp_path, monkeypatch):
    """gradients --write --model NAME: a new row's size without building the table's
    eighty others (docs/development.md, 'A built-in model'); a name that is no row is
    refused in one line."""
    pytest.importorskip("tf_keras")
    from dlscale.core import models

    table = tmp_path / "models.csv"
    table.write_text(models.TABLE.read_text())
    monkeypatch.setattr(models, "TABLE", table)
    asked = []
    monkeypatch.setattr(gradients, "built", lambda name: asked.append(name) or 7)
    models.table.cache_clear()
    try:
        before = {r.name: r.gradient_bytes for r in models.table().values()}
        gradients.main(["--write", "--model", "MLP"])
        models.table.cache_clear()
        after = {r.name: r.gradient_bytes for r in models.table().values()}
        assert asked == ["MLP"] and after == {**before, "MLP": 7}
        with pytest.raises(SystemExit, match="--model NoSuchModel: not a row of"):
            gradients.main(["--write", "--model", "NoSuchModel"])
    finally:
        models.table.cache_clear()


def test_a_given_link_that_leaves_the_fit_points_no_compute_is_set_aside_not_a_crash():
    """within_node 0.1 GB/s on a 1/2/4/8 series: every multi-GPU point's all-reduce alone
    is longer than its step. explain_scaling died with ZeroDivisionError (no prediction, no
    first page), and a link contradicting the step times was printed 'explained'; then the
    verdict named the link and the prediction still used it (issue 100). The link is set
    aside, named in every row's note, the series predicted from its steps: the held-out
    point within 10 %, no growth below 0 and no efficiency above 1."""
    steps = {(1, 1): 0.20, (2, 1): 0.21, (4, 1): 0.22, (8, 1): 0.23}
    frame = series(steps)
    empty = pd.DataFrame(columns=["series", "gpus", "nodes", "communication_share"])
    slow = {"within_node": (netlinks.Link(5e-6, 0.1e9), netlinks.GIVEN)}
    rows = predict.series_prediction("Net", frame, empty, {}, known_size=GRADIENT,
                                     gpus_per_node=16, network=slow)
    assert all(r["note"].startswith("the link within a node (given) cannot carry the "
                                    "steps: its all-reduce alone at the 2-GPU point")
               for r in rows)
    assert rows[0]["verdict"] == "explained" and {r["link_source"] for r in rows} == {
        "set aside (given)"}
    assert all(not r["predicted_efficiency"] > 1 for r in rows)  # NaN or at most 1
    assert all(not r["growth_s"] < -1e-12 for r in rows)


def test_no_efficiency_above_one_from_links_given_the_wrong_way_round():
    """No 1-GPU point (2, 4 on one node; 8 on two), the link within a node given slower than
    the one between nodes: the 8-GPU point was predicted at efficiency 1.19 and 'explained'.
    No predicted efficiency is above the largest measured one past the measured points."""
    steps = {(2, 1): 0.30, (4, 1): 0.34, (8, 2): 0.33}
    frame = series(steps)
    empty = pd.DataFrame(columns=["series", "gpus", "nodes", "communication_share"])
    given = {"within_node": (netlinks.Link(5e-6, 2e9), netlinks.GIVEN),
             "between_nodes": (netlinks.Link(5e-6, 20e9), netlinks.GIVEN)}
    rows = predict.series_prediction("Net", frame, empty, {}, known_size=GRADIENT,
                                     gpus_per_node=4, network=given)
    largest = frame["efficiency"].iloc[-1]
    assert all(r["predicted_efficiency"] <= 1 for r in rows)
    assert all(r["predicted_efficiency"] <= largest + 1e-9
               for r in rows if r["role"] == "extrapolated")


def test_what_grows_beyond_the_link_is_carried_forward_and_named_by_its_cause():
    """Weak scaling, the all-reduce a few ms of the step, and the input pipeline growing
    with the replicas (input wait 0, 20 ms, 40 ms at 1, 2, 4): the model carried only the
    communication, so every doubling came out near efficiency 1. The growth is carried on
    per doubling, named by the breakdown's cause, and the extrapolated efficiency stays at
    or below the largest measured one."""
    one = lambda n, nodes, s: netlinks.allreduce_s(n, s, ALPHA, BANDWIDTH / 100)  # noqa: E731
    wait = {1: 0.0, 2: 0.02, 4: 0.04}
    steps = {(n, 1): COMPUTE + wait[n] + one(n, 1, GRADIENT / 100) for n in (1, 2, 4)}
    frame = series(steps)
    exposed = {k: one(k[0], 1, GRADIENT / 100) for k in steps}
    breakdown = breakdown_of(frame, exposed)
    breakdown["input_share"] = [wait[n] / steps[(n, 1)] for n in (1, 2, 4)]
    breakdown["wait_share"] = 0.0
    breakdown["other_share"] = 0.0
    small = {k: [{**r, "gradient_bytes": GRADIENT / 100} for r in v]
             for k, v in records(steps, lambda n, nodes, s: one(n, nodes, s)).items()}
    rows = predict.series_prediction("Net", frame, breakdown, small, gpus_per_node=16)
    by = {r["gpus"]: r for r in rows}
    assert abs(by[1]["error"]) < 1e-9 and abs(by[2]["error"]) < 1e-9  # fit points: own steps
    assert by[4]["growth_s"] > 0.03  # the held-out point: growth carried from 2 GPUs
    assert abs(by[4]["error"]) < 0.10, by[4]
    for n in (8, 16):
        assert by[n]["growth_s"] > by[4]["growth_s"]
        assert by[n]["growth_cause"] == "input pipeline"
        assert by[n]["predicted_efficiency"] <= frame["efficiency"].iloc[-1] + 1e-9
    assert by[16]["predicted_efficiency"] < by[8]["predicted_efficiency"] < 0.9
