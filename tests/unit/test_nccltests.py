"""nccl-tests' all_reduce_perf output as the network the prediction uses
(dlscale.logparse.nccltests, analysis.network), on a real output stored unchanged."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from conftest import ROOT

from dlscale.logparse import nccltests
from dlscale.reporting import explain

# tests/data/nccl-tests/README.md says where it comes from: 2 nodes x 8 H100 (A3 Mega)
A3MEGA = ROOT / "tests" / "data" / "nccl-tests" / "a3mega-2x8-h100-all_reduce_perf.markdown"


def test_a_real_two_node_output_is_read_from_a_markdown_note():
    """The output as its user kept it: inside a Markdown note, after the mpirun command,
    rank 0's line without its '#', then a page of prose. 16 ranks on 2 hosts, the
    out-of-place column of 31 sizes from 8 bytes to 8 GiB."""
    result = nccltests.parse(A3MEGA.read_text())
    assert (result.ranks, result.nodes, len(result.bytes)) == (16, 2, 31)
    assert result.hosts[0] == "ztan-mig-235z" and result.hosts[15] == "ztan-mig-gq73"
    assert (result.bytes[-1], result.seconds[-1], result.busbw_gbs[-1]) == (
        8589934592, 0.047535, 338.82)  # out-of-place: in-place took 47743 us
    level, alpha, bandwidth = nccltests.ring_level(result)
    assert level == "between_nodes"
    assert alpha == pytest.approx(123.3e-6 / 30)  # the smallest sizes' median over 30 hops
    assert bandwidth / 1e9 == pytest.approx(339.7, abs=0.1)  # its busbw, latency taken off


def test_another_collective_or_a_table_without_ranks_is_refused_in_one_line():
    """A sendrecv-like table (bus bandwidth = algorithm bandwidth: the real output with
    each row's busbw set to its algbw) is not an all-reduce; a table cut from its rank
    lines cannot say which level it measured."""
    text = A3MEGA.read_text()
    rows = re.compile(r"^( +\d+ +\d+ +float +sum +-1 +[\d.]+ +([\d.]+) +)([\d.]+)", re.M)
    sendrecv = rows.sub(lambda m: m[1] + m[2].rjust(len(m[3])), text)
    with pytest.raises(nccltests.NcclTestsError, match="not an all-reduce"):
        nccltests.parse(sendrecv, "x.out")
    cut = "\n".join(line for line in text.splitlines() if "Rank" not in line)
    with pytest.raises(nccltests.NcclTestsError, match="names no ranks") as info:
        nccltests.parse(cut, "x.out")
    assert "\n" not in str(info.value)
    with pytest.raises(nccltests.NcclTestsError, match="holds no nccl-tests table"):
        nccltests.parse("Epoch 1/2\n", "x.out")


def steps_frame(steps: dict) -> pd.DataFrame:
    rows = [{"series": "MLPerf", "model": "ResNet50", "nodes": nodes, "gpus": n,
             "scaling": "weak", "global_batch": 256 * n, "images_per_s": 256 * n / step}
            for (n, nodes), step in steps.items()]
    frame = pd.DataFrame(rows)
    frame["efficiency"] = frame["images_per_s"] / frame["gpus"] / frame["images_per_s"][0]
    return frame


def test_an_external_series_over_nodes_is_predicted_where_the_network_is_given():
    """An outside series of 1 to 8 GPUs on one node and 16 on two (no window, no timed
    all-reduce): with the link within a node given as numbers and the link between nodes
    from the real nccl-tests output, its 16-GPU point is predicted on that link, and
    prediction.csv says where each came from; without them, it is a note."""
    size = 100 * 2**20
    network = {"within_node": {"latency_us": 5.0, "bus_bandwidth_gbs": 150.0},
               "nccl_tests": [str(A3MEGA)]}
    links = explain.given_links(network)
    inside, between = links["within_node"][0], links["between_nodes"][0]
    compute = 0.1
    steps = {(n, 1): compute + explain.allreduce_time(n, 1, size, inside, None)
             for n in (1, 2, 4, 8)}
    steps[(16, 2)] = compute + explain.allreduce_time(16, 2, size, None, between)
    frame = steps_frame(steps)
    empty = pd.DataFrame(columns=["series", "nodes", "gpus", "communication_share"])
    rows = explain.series_prediction("MLPerf", frame, empty, {}, known_size=size,
                                     gpus_per_node=8, network=links)
    by = {r["gpus"]: r for r in rows}
    assert by[16]["role"] == "held out" and abs(by[16]["error"]) < 1e-9
    assert by[32]["nodes"] == 4 and not math.isnan(by[32]["predicted_step_s"])
    assert by[16]["link_source"] == ("within a node: given; between nodes: nccl-tests "
                                     f"({A3MEGA.name})")
    assert by[16]["bus_bandwidth_inter_gbs"] == pytest.approx(339.7, abs=0.1)
    alone = explain.series_prediction("MLPerf", frame, empty, {}, known_size=size,
                                      gpus_per_node=8)
    assert math.isnan({r["gpus"]: r for r in alone}[16]["predicted_step_s"])
    assert explain.NO_NETWORK in alone[-1]["note"]
