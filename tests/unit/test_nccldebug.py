"""Why two nodes are slower than one: which network NCCL's collectives used, from real
NCCL_DEBUG=INFO output (tests/data/nccl-debug, each file's source in its README), into
runs.csv and scaling.csv, flagged on the first page where sockets replaced InfiniBand."""

from __future__ import annotations

import shlex
import shutil

import pandas as pd
import pytest
from conftest import ROOT

from dlscale.core.contract import NCCL_DEBUG_FILE
from dlscale.launch.launcher import read_plan
from dlscale.launch.workers import nccl_debug_env
from dlscale.logparse import nccldebug
from dlscale.reporting import analysis, runtable

DATA = ROOT / "tests" / "data" / "nccl-debug"


@pytest.mark.parametrize("files, network, fell_back", [
    (["nccl-952-ibnet-bootstrap.log", "nccl-952-ibnet-socket.log"], "Socket", True),
    (["nccl-tests-185-roce-ib.log"], "IB", False),
    (["detectron2-4730-socket.log"], "Socket", False)])
def test_the_network_nccl_used_and_whether_it_was_a_fallback(files, network, fell_back):
    """NVIDIA/nccl#952: IP over InfiniBand for the bootstrap and the IB plugin, the
    channels over NET/Socket: a fallback. nccl-tests#185: RoCE through NET/IB.
    detectron2#4730: sockets on nodes that show no InfiniBand (no libibverbs): slow, but
    nothing says IB was there to use."""
    found = nccldebug.transport("\n".join((DATA / f).read_text() for f in files))
    assert (found["network"], found["fell_back"]) == (network, fell_back)
    assert nccldebug.transport("Epoch 1/2\n") is None


def test_a_fallback_reaches_runs_csv_scaling_csv_and_the_flags(tmp_path):
    """A point's run folder with its NCCL_DEBUG files (as the launcher has NCCL write
    them): runs.csv and scaling.csv name the network, and the point's flags say sockets
    replaced InfiniBand and what to check."""
    from helpers.studies import EPOCHS, LOG, completed_run

    folder = completed_run(tmp_path / "run", EPOCHS, LOG)
    for name in ("nccl-952-ibnet-bootstrap.log", "nccl-952-ibnet-socket.log"):
        shutil.copy(DATA / name, folder / NCCL_DEBUG_FILE.replace("%h.%p", name[:-4]))
    rows, _ = runtable.run_rows(folder, {"run": "r", "series": "M"})
    runs = analysis.summarize_runs(pd.DataFrame(rows), skip_epochs=1)
    assert runs["nccl_network"].tolist() == ["Socket"]
    table = analysis.scaling(pd.DataFrame(rows), runs, 1, 0.05)
    assert table["nccl_network"].tolist() == ["Socket"]
    assert "NCCL's collectives went over sockets (NET/Socket) though the nodes have " \
           "InfiniBand (an IP over InfiniBand interface (ibp12s0)" in table["flags"].iloc[0]


def test_gpu_points_over_nodes_run_with_nccls_lines_in_their_run_folder(tmp_path):
    """Planning asks for NCCL's lines on GPU points over several nodes only; the launcher
    sends them to the run folder, and leaves a NCCL_DEBUG the user set alone."""
    from helpers.studies import study

    s = study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [4, 8], "nodes": [1, 2]},
              resources={"max_gpus_per_node": 4}, training={"device": "gpu"})
    planned = {k: read_plan(shlex.split(s.launch_plan(p))[1]).nccl_debug
               for k, p in s.points.items()}
    assert planned and {k for k, on in planned.items() if on} == {
        k for k, p in s.points.items() if p.nodes > 1}
    env = nccl_debug_env(tmp_path, {})
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"] == str(
        tmp_path.resolve() / "nccl.%h.%p.log")
    assert nccl_debug_env(tmp_path, {"NCCL_DEBUG": "WARN"}) == {}
