"""The corpus of real multi-GPU scaling series (bench/corpus, bench/corpus_series.py):
every series read from its stored files, in the shape the prediction benchmark takes."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import corpus_series  # noqa: E402

COLUMNS = ["series", "model", "strategy", "precision", "nodes", "gpus", "global_batch",
           "images_per_s", "epoch_time_s", "epoch_time_ci95", "efficiency", "scaling"]


@pytest.fixture(scope="module")
def series():
    return corpus_series.load()


def test_at_least_thirty_series_with_unique_ids(series):
    ids = [s.id for s in series]
    assert len(ids) >= 30
    assert len(set(ids)) == len(ids)


def test_points_are_counts_that_grow_with_positive_throughput(series):
    for s in series:
        points = s.points
        assert set(COLUMNS) <= set(points.columns), s.id
        assert len(points) >= 2, s.id
        gpus = list(points["gpus"])
        assert gpus == sorted(gpus) and len(set(gpus)) == len(gpus), s.id
        # two points only where the series is over node counts
        if len(points) == 2:
            assert points["nodes"].nunique() == 2, s.id
        assert (points["images_per_s"] > 0).all() and (points["epoch_time_s"] > 0).all()
        assert points["efficiency"].iloc[0] == pytest.approx(1.0)
        assert (points["efficiency"] > 0).all()
        assert points["scaling"].nunique(dropna=False) == 1
        assert points["scaling"].iloc[0] in ("weak", "strong", None)


def test_at_least_three_counts_in_most_series(series):
    assert sum(len(s.points) >= 3 for s in series) >= 15


def test_model_gradient_and_node_from_the_tables_and_systems(series):
    for s in series:
        assert s.model in ("ResNet-50", "BERT-Large", "Mask R-CNN")
        name, parameters, _ = next(m for m in corpus_series.MODELS.values() if m[0] == s.model)
        assert s.gradient_bytes == parameters * corpus_series.GRADIENT_ELEMENT_BYTES
        assert s.gpus_per_node >= (s.points["gpus"] / s.points["nodes"]).max()
        assert s.source.startswith("github.com/mlcommons/training_results_v")
        assert not any(f"_v0.{n}" in s.source for n in (5, 6, 7))


def test_network_levels_in_the_form_dlscale_takes(series):
    levels = {"within_node", "between_nodes"}
    with_network = 0
    for s in series:
        assert set(s.network) <= levels
        for link in s.network.values():
            assert set(link) == {"latency_us", "bus_bandwidth_gbs"}
            assert link["latency_us"] > 0 and link["bus_bandwidth_gbs"] > 0
        assert set(s.network_stated) == set(s.network)
        with_network += bool(s.network)
        largest = json.loads((corpus_series.ROOT / s.points["system"].iloc[-1]).read_text())
        between_stated = (largest.get("host_networking") or "").strip().lower() \
            not in corpus_series.UNSTATED  # Dell's GB200 rack (v5.0) states none
        if between_stated and (s.points["nodes"] > 1).any() and "between_nodes" not in s.network:
            pytest.fail(f"{s.id}: over nodes, a network stated, and no level between nodes")
    assert with_network >= 30


def test_network_rows_from_the_publishers_strings():
    dgx = {"accelerator_interconnect": "NVLINK 3.0, NVSWITCH 2.0 600GB/s",
           "host_networking": "Storage: 2x ConnectX-6 IB HDR 200Gb/sec, Management: 1x "
                              "ConnectX-6 Ethernet 100Gb/Sec, Compute: 8x ConnectX-6 IB HDR "
                              "200Gb/Sec"}
    found = corpus_series.network(dgx)
    assert found["within_node"]["bus_bandwidth_gbs"] == 300.0
    assert found["between_nodes"]["bus_bandwidth_gbs"] == 8 * 25.0
    pcie = {"accelerator_interconnect": "N/A", "accelerator_host_interconnect": "PCIe 4.0x16",
            "host_networking": "1x ConnectX-5 IB EDR 100Gb/Sec"}
    found = corpus_series.network(pcie)
    assert found["within_node"]["bus_bandwidth_gbs"] == 31.5
    assert found["between_nodes"]["bus_bandwidth_gbs"] == 12.5
    assert corpus_series.network({"accelerator_interconnect": "", "host_networking": ""}) == {}


def test_throughput_rules(series):
    rules = {r for s in series for r in s.points["rule"]}
    assert rules <= {"epochs", "blocks", "evaluations", "run-average", "logged"}
    for s in series:
        if s.model == "BERT-Large":
            assert set(s.points["rule"]) == {"evaluations"}, s.id
        if s.model == "Mask R-CNN":
            assert set(s.points["rule"]) == {"logged"}, s.id
            assert set(s.points["reader"]) == {"read"}, s.id
        for row in s.points.itertuples():
            # the rate is the samples of an "epoch" (or interval) over its mean time
            assert row.images_per_s == pytest.approx(row.samples_per_epoch / row.epoch_time_s)
            assert math.isnan(row.epoch_time_ci95) or row.epoch_time_ci95 >= 0


def test_every_indexed_file_is_stored_and_listed_with_its_blob():
    root = corpus_series.ROOT
    index = yaml.safe_load((root / "series.yaml").read_text())
    readme = (root / "README.md").read_text()
    files = {p[k] for e in index["series"] for p in e["points"] for k in ("log", "system")}
    for name in sorted(files):
        blob = subprocess.run(["git", "hash-object", str(root / name)], capture_output=True,
                              text=True, check=True).stdout.strip()
        assert f"`{name.split('/', 1)[1]}` | {name.split('/')[0].split('_')[-1]} | {blob}" \
            in readme, name


def test_unsynchronised_epoch_events_give_way_to_blocks(series):
    # NVIDIA's MXNet at 527 nodes prints epoch events before its GPUs are done: the blocks
    nvidia = next(s for s in series if s.id == "v2.0-nvidia-dgxa100-resnet")
    largest = nvidia.points.iloc[-1]
    assert largest["rule"] == "blocks"
    assert largest["efficiency"] < 1.0
