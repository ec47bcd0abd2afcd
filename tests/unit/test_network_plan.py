"""analysis.network and the prediction's settings at planning: figures out of any link's
range refused by their key, links that contradict each other said before any job runs,
and what the prediction is handed (analysis.gpus_per_node)."""

from __future__ import annotations

import copy

import pytest

from dlscale.core.schema import validate
from dlscale.plan.study import PlanError, Study

SWEEP = {"models": ["SimpleCNN"], "gpus": [1]}


def study(tmp_path, **sections) -> Study:
    config = copy.deepcopy(sections)
    validate(config)
    return Study(config, tmp_path)


@pytest.mark.parametrize(("link", "key"), [
    ({"latency_us": 1e300, "bus_bandwidth_gbs": 25}, "latency_us"),
    ({"latency_us": 5, "bus_bandwidth_gbs": 1e300}, "bus_bandwidth_gbs"),
])
def test_a_links_figures_beyond_any_link_are_refused_by_their_key(tmp_path, link, key):
    """latency_us: 1e300 passed planning (and gave a prediction of 1e294 s)."""
    with pytest.raises(PlanError) as info:
        study(tmp_path, sweep=SWEEP, analysis={"network": {"within_node": link}})
    message = str(info.value)
    assert key in message and "\n" not in message.strip(), message


def test_a_link_within_a_node_slower_than_between_nodes_is_said_at_planning(tmp_path):
    plan = study(tmp_path, sweep=SWEEP, analysis={"network": {
        "within_node": {"latency_us": 5, "bus_bandwidth_gbs": 2},
        "between_nodes": {"latency_us": 5, "bus_bandwidth_gbs": 20}}})
    said = [w for w in plan.warnings if "analysis.network.within_node" in w]
    assert len(said) == 1 and "below between_nodes' 20" in said[0], plan.warnings
    fine = study(tmp_path, sweep=SWEEP, analysis={"network": {
        "within_node": {"latency_us": 5, "bus_bandwidth_gbs": 200},
        "between_nodes": {"latency_us": 5, "bus_bandwidth_gbs": 20}}})
    assert not [w for w in fine.warnings if "analysis.network" in w]


def test_the_gpus_a_node_holds_reach_the_prediction(tmp_path):
    assert study(tmp_path, sweep=SWEEP, analysis={"gpus_per_node": 8}
                 ).analysis.prediction_flags() == "--gpus-per-node 8"
    assert study(tmp_path, sweep=SWEEP).analysis.prediction_flags() == ""
    with pytest.raises(PlanError, match="gpus_per_node"):
        study(tmp_path, sweep=SWEEP, analysis={"gpus_per_node": 0})
