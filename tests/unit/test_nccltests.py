"""nccl-tests' all_reduce_perf output as the network the prediction uses
(dlscale.logparse.nccltests, analysis.network), on a real output stored unchanged."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from conftest import ROOT

from dlscale.logparse import nccltests
from dlscale.reporting.prediction import links as netlinks
from dlscale.reporting.prediction import series as predict

# tests/data/nccl-tests/README.md says where it comes from: 2 nodes x 8 H100 (A3 Mega)
DATA = ROOT / "tests" / "data" / "nccl-tests"
A3MEGA = DATA / "a3mega-2x8-h100-all_reduce_perf.markdown"
# 2 ranks on one host (RTX 5090, sockets only): six all_gather_perf outputs, five
# broadcast_perf outputs (root 0), each in a Markdown note
ALLGATHER = DATA / "rtx5090-2rank-all_gather_perf.md"
BROADCAST = DATA / "rtx5090-2rank-broadcast_perf.md"


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
    with pytest.raises(nccltests.NcclTestsError, match="not an all-reduce") as info:
        nccltests.parse(sendrecv, "x.out")
    assert "broadcast, reduce or sendrecv's factor" in str(info.value)
    cut = "\n".join(line for line in text.splitlines() if "Rank" not in line)
    with pytest.raises(nccltests.NcclTestsError, match="names no ranks") as info:
        nccltests.parse(cut, "x.out")
    assert "\n" not in str(info.value)
    with pytest.raises(nccltests.NcclTestsError, match="holds no nccl-tests table"):
        nccltests.parse("Epoch 1/2\n", "x.out")


def test_other_collectives_are_refused_by_name():
    """Real all_gather_perf and broadcast_perf outputs over 2 ranks (an all-reduce's
    2(n-1)/n is 1 there, a broadcast's factor too): refused by their starting line, and
    without it by their columns (redop 'none', root 0) and by the bus bandwidth of every
    row, slow ones included (each algbw under 1 GB/s)."""
    for path, name in ((ALLGATHER, "all_gather_perf's"), (BROADCAST, "broadcast_perf's")):
        with pytest.raises(nccltests.NcclTestsError, match="not an all-reduce") as info:
            nccltests.parse(path.read_text(), "x.out")
        assert name in str(info.value) and "\n" not in str(info.value)
    # the broadcast's first output, without its starting line: its columns say it
    text = BROADCAST.read_text()
    first = text[text.index("# nccl-tests version"):text.index("# Avg bus bandwidth") + 40]
    unnamed = first.replace("# Collective test starting: broadcast_perf_mpi\n", "")
    with pytest.raises(nccltests.NcclTestsError, match="redop 'none' and root 0: a broadcast"):
        nccltests.parse(unnamed, "x.out")
    # the all_gather's first output, unnamed, its rows under 1 GB/s only, redop as an
    # all-reduce's: the bus bandwidth of each row still says it
    text = ALLGATHER.read_text()
    first = text[text.index("# nccl-tests version"):text.index("# Out of bounds")]
    lines = [line for line in first.splitlines(keepends=True) if "starting" not in line
             and not re.match(r" +\d+ +\d+ +float +none +-1 +[\d.]+ +[1-9]", line)]
    slow = "".join(lines).replace("float    none", "float     sum") + "# Avg bus bandwidth : 0.4\n"
    assert len(re.findall(r"float +sum", slow)) == 2  # 0.48 and 0.96 GB/s
    with pytest.raises(nccltests.NcclTestsError, match="0.5 times its algorithm bandwidth "
                       r"\(0.48 / 0.96 GB/s\) \(all_gather, reduce_scatter or alltoall's"):
        nccltests.parse(slow, "x.out")


def test_two_outputs_or_a_cut_one_are_named_so():
    """Two outputs concatenated (a job that ran it twice) are two; an output cut inside
    its table (no closing '# Avg bus bandwidth') is cut, whatever its rank count."""
    text = A3MEGA.read_text()
    with pytest.raises(nccltests.NcclTestsError, match="holds 2 nccl-tests outputs "
                       r"\(their tables at lines 31, \d+\)"):
        nccltests.parse(text + text, "x.out")
    cut = text[:text.index("      256            64")]
    with pytest.raises(nccltests.NcclTestsError, match="x.out ends inside its nccl-tests "
                       "table, after the 128-byte row .* cut short"):
        nccltests.parse(cut, "x.out")


@pytest.mark.parametrize("junk", ["Rank 1 ", "#  Rank  1 Group  0 Pid 7 on host ",
                                  "Rank" + " " * 64, "  8  2  float  sum  -1 "])
def test_a_long_line_is_read_in_linear_time(junk):
    """A 5 MB line of rank-like or row-like words (a 0.5 MB one took 108 s before) beside
    a real output: read at once (bench/nccltests_lines.py times it)."""
    line = junk * (5_000_000 // len(junk)) + "device"
    text = A3MEGA.read_text()
    # before the header, and after it among the rows (in the units' line's place)
    text = text.replace("#       size", line + "\n#       size").replace("#        (B)", line)
    result = nccltests.parse(text, "x.out")
    assert (result.ranks, len(result.bytes)) == (16, 31)
    assert nccltests.rank_of(line) == (None if "on host" not in junk else (1, "host"))


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
    links = netlinks.given_links(network)
    inside, between = links["within_node"][0], links["between_nodes"][0]
    compute = 0.1
    steps = {(n, 1): compute + netlinks.allreduce_time(n, 1, size, inside, None)
             for n in (1, 2, 4, 8)}
    steps[(16, 2)] = compute + netlinks.allreduce_time(16, 2, size, None, between)
    frame = steps_frame(steps)
    empty = pd.DataFrame(columns=["series", "nodes", "gpus", "communication_share"])
    rows = predict.series_prediction("MLPerf", frame, empty, {}, known_size=size,
                                     gpus_per_node=8, network=links)
    by = {r["gpus"]: r for r in rows}
    assert by[16]["role"] == "held out" and abs(by[16]["error"]) < 1e-9
    assert by[32]["nodes"] == 4 and not math.isnan(by[32]["predicted_step_s"])
    assert by[16]["link_source"] == ("within a node: given; between nodes: nccl-tests "
                                     f"({A3MEGA.name})")
    assert by[16]["bus_bandwidth_inter_gbs"] == pytest.approx(339.7, abs=0.1)
    alone = predict.series_prediction("MLPerf", frame, empty, {}, known_size=size,
                                      gpus_per_node=8)
    assert math.isnan({r["gpus"]: r for r in alone}[16]["predicted_step_s"])
    assert netlinks.NO_NETWORK in alone[-1]["note"]
