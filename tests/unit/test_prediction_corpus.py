"""The prediction on real series of other centres (bench/corpus: MLPerf Training results
stored byte for byte, each with its network as its publisher states it;
bench/prediction_corpus.py measures the whole corpus): what the model must do on each
kind of real series, whatever its accuracy elsewhere."""

from __future__ import annotations

import sys

import pandas as pd
import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import corpus_series  # noqa: E402
import prediction_corpus  # noqa: E402

from dlscale.reporting.prediction.series import series_prediction  # noqa: E402

EMPTY = pd.DataFrame(columns=["series", "gpus", "nodes", "communication_share"])


def predicted(series_id: str) -> tuple[corpus_series.Series, pd.DataFrame]:
    [series] = corpus_series.load(ids=[series_id])
    points = series.points.sort_values(["gpus", "nodes"]).reset_index(drop=True)
    rows = series_prediction(series.id, points, EMPTY, {}, known_size=series.gradient_bytes,
                             gpus_per_node=series.gpus_per_node,
                             network=prediction_corpus.network_links(series.network))
    return series, pd.DataFrame(rows)


def held_out_inside_band(series_id: str, gpus: int, nodes: int) -> tuple[pd.DataFrame, pd.Series]:
    """The series' rows and its held-out row, checked to be at (gpus, nodes) with its
    measured step inside the predicted band."""
    _, rows = predicted(series_id)
    held = rows[rows["role"] == "held out"].iloc[0]
    assert (held["gpus"], held["nodes"]) == (gpus, nodes)
    assert held["predicted_step_low_s"] <= held["measured_step_s"] <= held[
        "predicted_step_high_s"], held
    return rows, held


def test_a_series_whose_efficiency_falls_at_each_count_is_carried_no_higher():
    """DGX A100 ResNet-50 on 8, 64, 1024 and 4320 GPUs (efficiency 1, 0.79, 0.68, 0.39): the
    all-reduce is a small part of its step, and a model that carries only communication
    extrapolated it well above its last measured efficiency. The next doublings are fitted
    on every measured point and stay at or below 0.39."""
    series, rows = predicted("v1.1-nvidia-dgxa100-resnet")
    last = series.points["efficiency"].iloc[-1]
    ahead = rows[rows["role"] == "extrapolated"]
    assert len(ahead) == 2 and ahead["predicted_efficiency"].notna().all()
    assert (ahead["predicted_efficiency"] <= last + 1e-9).all(), ahead
    assert (ahead["nodes"] == ahead["gpus"] // series.gpus_per_node).all()


def test_a_strong_scaling_pair_of_one_and_two_nodes_is_predicted_inside_its_band():
    """XE9680 (8 A100 SXM a node) ResNet-50 on 1 and 2 nodes, one global batch: one fit
    point, half the batch per GPU at the held-out point. Taken as constant compute, it was
    predicted at the 1-node step; the compute's split takes the corpus' prior, and the
    band spans both ends."""
    rows, held = held_out_inside_band("v3.0-dell-xe9680-a100sxm80-resnet", 16, 2)
    assert held["predicted_step_s"] < 0.75 * rows["measured_step_s"].iloc[0]  # the batch split


def test_a_fourfold_smaller_batch_per_gpu_with_no_line_is_inside_the_band():
    """NVIDIA's GB200 NVL72 BERT (MLPerf v5.0, added after the priors were set): 96 and 72
    sequences a GPU on 8 and 64 GPUs, too close for a line, then 16 on 512. The prior
    split's prediction misses by half; the band's end where more of the compute is fixed
    (the most a fitted line shows on the corpus) holds the measured step, as the band of a
    split left unknown must."""
    held_out_inside_band("v5.0-nvidia-gb200-nvl72-bert", 512, 128)


@pytest.mark.parametrize("series_id, gpus, nodes", [
    ("v1.1-nvidia-dgxa100-maskrcnn", 32, 4), ("v3.0-nvidia-dgxh100-maskrcnn", 64, 8)])
def test_a_few_images_a_gpu_cost_a_floor_the_prior_share_leaves_out(series_id, gpus, nodes):
    """NVIDIA's Mask R-CNN: 12 images a GPU on 8 GPUs, then 4 or 2 a GPU: one fit point,
    so the compute's split is the prior. A fixed 2 % of the step predicted the held-out
    point 9 to 18 % too fast; a GPU given a couple of images does not run them at full
    occupancy, and a step costing what one image more would (model.FLOOR_SAMPLES) predicts
    each within 10 %."""
    _, held = held_out_inside_band(series_id, gpus, nodes)
    assert abs(held["error"]) <= 0.10, held
    # (v2.0's, 12 images a GPU on 8 GPUs to 2 on 64 from that one count, spans 4.5 times:
    # not predictable from its points, test_prediction_band.py)


@pytest.mark.parametrize("series_id", ["v3.1-fujitsu-cdi-a100pcie-resnet",
                                       "v2.0-dell-xe8545-a100sxm40-resnet"])
def test_every_fit_point_reproduces_its_own_step(series_id):
    """The compute fitted as a line over the fit points' batch per GPU left each point off
    its own measurement (the issue's 1-GPU point +14 % and +170 %): each fit point's growth
    is its own, so the model gives back every measured step it was fitted on."""
    _, rows = predicted(series_id)
    fit = rows[rows["role"] == "fit"]
    assert len(fit) >= 2
    assert fit["error"].abs().max() < 1e-9, fit[["gpus", "measured_step_s", "predicted_step_s"]]


def test_the_next_doublings_go_on_at_the_largest_points_batch_per_gpu():
    """Dell XE8545 BERT ran 64 sequences per GPU on 4 GPUs and 24 on 128: the next
    doublings were predicted at the first point's 64 (a step of 0.41 s at 256 GPUs beside
    the 0.15 s measured at 128, and a cap whose note said no larger batch per GPU was
    held); they go on at the 24 the largest point ran."""
    series, rows = predicted("v2.0-dell-xe8545-a100sxm40-bert")
    largest = rows[rows["role"] == "held out"].iloc[0]
    ahead = rows[rows["role"] == "extrapolated"]
    assert list(ahead["gpus"]) == [256, 512]
    # the same work per GPU, more of them: no faster than the largest point, nor 1.5 x it
    assert (ahead["predicted_step_s"] >= largest["measured_step_s"]).all(), ahead
    assert (ahead["predicted_step_s"] < 1.5 * largest["measured_step_s"]).all(), ahead


def test_a_point_with_fewer_images_a_step_than_gpus_is_not_predicted_as_data_parallel():
    """NVIDIA's Mask R-CNN trained 272 images a step on 408 GPUs: not data-parallel alone
    (each replica on its share of the batch has less than one image). It was predicted as
    if it were (+22 %); it is a measured row whose note says why, and the series is held
    out and carried on from its data-parallel points."""
    _, rows = predicted("v1.1-nvidia-dgxa100-maskrcnn")
    split = rows[rows["gpus"] == 408].iloc[0]
    assert split["role"] == "measured" and pd.isna(split.get("predicted_step_s"))
    assert "272 images a step on 408 GPUs" in split["note"], split["note"]
    assert "not data-parallel alone" in split["note"]
    held = rows[rows["role"] == "held out"].iloc[0]
    assert held["gpus"] == 32 and pd.notna(held["predicted_step_s"])


def test_the_cross_validation_chooses_each_folds_priors_on_the_other_series_alone():
    """bench/prediction_crossval.py: the priors a fold takes are those that do best on the
    other series; the series left out, which would favour the other combination, has no
    say. A tie goes to the combination that changes fewer of the shipped values, and the
    band's margin is the smallest holding 90 % of the others."""
    import prediction_crossval as cv

    shipped = tuple(cv.SHIPPED.values())
    other = (0.1, *shipped[1:])

    def table(errors):
        return pd.DataFrame({"series": list("abc"), "error": errors,
                             "low": [0.9] * 3, "high": [1.1] * 3, "measured": [1.0] * 3})

    # the shipped values: b and c within 10 %, a at 30 %; the other: only a within
    runs = {shipped: table([0.3, 0.05, 0.02]), other: table([0.01, 0.2, 0.2])}
    assert cv.choose(runs, ["b", "c"]) == shipped
    assert cv.choose({shipped: table([0.3, 0.2, 0.05]), other: table([0.01, 0.05, 0.2])},
                     ["b", "c"]) == shipped  # one within each, one median: the tie's rule
    assert cv.choose({shipped: table([0.3, 0.2, 0.2]), other: table([0.01, 0.05, 0.2])},
                     ["b", "c"]) == other
    # a band of 0.9 to 1.1 at the shipped margin holds a point 20 % off only when widened
    off = pd.DataFrame({"low": [0.9] * 10, "high": [1.1] * 10, "error": [0.0] * 10,
                        "measured": [1.0] * 8 + [1.2, 1.3]})
    assert cv.inside(off, cv.model.BAND_MARGIN).sum() == 8
    margin = cv.smallest_margin(off)
    assert cv.inside(off, margin).mean() >= 0.9 > cv.inside(off, margin - 0.01).mean()
