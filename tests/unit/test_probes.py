"""The network's probe: planned once per strategy and node count over one node, timed
up to a size that the link makes long enough, and used by the prediction as the link
between nodes (measured), ahead of a network the user gives."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT
from helpers.prediction import (
    ALPHA,
    BANDWIDTH,
    COMPUTE,
    GRADIENT,
    SIZES,
    breakdown_of,
    records,
    series,
)
from helpers.studies import study

from dlscale.core.contract import NETWORK
from dlscale.plan import probes
from dlscale.reporting.prediction import links as netlinks
from dlscale.reporting.prediction import series as predict
from dlscale.train.probe import probe_sizes, record_ended, record_failure

SWEEP = {"models": ["SimpleCNN", "MLP"], "gpus": [1, 2, 4], "nodes": [1, 2],
         "strategy": ["multiworker"]}


def test_one_probe_per_strategy_and_node_count_on_its_largest_point(tmp_path):
    plan = study(tmp_path, sweep=SWEEP, training={"device": "cpu"})
    found = probes.plan(plan.points, plan.config)
    assert list(found) == ["multiworker/nodes2"]
    p = found["multiworker/nodes2"]
    assert (p.gpus, p.nodes, p.tasks, p.tasks_per_node) == (4, 2, 4, 2)
    assert probes.probe_file("multiworker/nodes2") == f"{NETWORK}/multiworker/nodes2.json"
    # the worker: probe_network.py with the point's flags, a fixed batch, the largest
    # gradient of the study's models (MLP's, from the models table)
    words = shlex.split(probes.worker_command(plan, p, "results/network/x.json"))
    assert words[1].endswith("scripts/probe_network.py")
    assert words[words.index("--largest-bytes") + 1] == "100685864"
    assert words[words.index("--batch-per-gpu") + 1] == "1"
    assert words[words.index("--nodes") + 1] == "2" and "--" in words
    # one node only, or no breakdown: nothing to probe
    one = study(tmp_path, sweep={**SWEEP, "nodes": [1]})
    assert probes.plan(one.points, one.config) == {}
    off = study(tmp_path, sweep=SWEEP, analysis={"breakdown": 0})
    assert probes.plan(off.points, off.config) == {}


def test_the_probe_times_sizes_four_times_apart_up_to_the_gradient():
    assert probe_sizes(100) == [4096]
    assert probe_sizes(70000) == [4096, 16384, 65536, 70000]
    assert probe_sizes(65536) == [4096, 16384, 65536]


def test_the_probes_job_takes_its_nodes_whole_and_its_retry_asks_for_the_sites_flags():
    """The probe times the link alone: its job asks for its nodes whole (sbatch
    --exclusive), beside the site's slurm_extra; the retry that records only does not."""
    site = {"slurm_extra": lambda wildcards: "--account=x", "runtime": lambda w: 10}
    resources = probes.job_resources(site)
    assert resources["runtime"] is site["runtime"]
    assert resources["slurm_extra"]({}, 1) == "--account=x --exclusive"
    assert resources["slurm_extra"]({}, 2) == "--account=x"
    alone = probes.job_resources({"slurm_extra": lambda wildcards: None})
    assert (alone["slurm_extra"]({}, 1), alone["slurm_extra"]({}, 2)) == ("--exclusive", None)


def write_probe(path, nodes, ranks, link: netlinks.Link, strategy="multiworker"):
    path.write_text(json.dumps({
        "strategy": strategy, "nodes": nodes, "gpus": ranks, "hosts": ["n1", "n2"],
        "collective": {"bytes": SIZES, "seconds": [link.ring_s(ranks, s) for s in SIZES]}}))
    return path


def test_a_probe_predicts_the_first_point_past_a_node_from_one_node_points(tmp_path):
    """No fit point crossed a node: the probe's link between nodes is what the held-out
    2-node point is predicted with, marked measured, its latency and bandwidth given back;
    a link the user gives for that level loses to the measured one."""
    intra = netlinks.Link(ALPHA, BANDWIDTH)
    inter = netlinks.Link(80e-6, BANDWIDTH / 50)
    probe = write_probe(tmp_path / "nodes2.json", 2, 2, inter)
    links = netlinks.probe_links([probe])
    assert list(links) == ["multiworker"]
    (link, source), = links["multiworker"].values()
    assert link.alpha == pytest.approx(80e-6) and link.bandwidth == pytest.approx(BANDWIDTH / 50)
    assert source.startswith(netlinks.MEASURED) and "probe: 2 nodes" in source

    def ring(n, nodes, size):
        return netlinks.allreduce_time(n, nodes, size, intra, inter)

    points = [(1, 1), (2, 1), (2, 2)]
    steps = {k: COMPUTE + ring(*k, GRADIENT) for k in points}
    frame = series(steps)
    exposed = {k: steps[k] - COMPUTE for k in points}
    fit = records(points[:2], ring)
    given = {"between_nodes": (netlinks.Link(1e-6, BANDWIDTH), netlinks.GIVEN)}
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed), fit,
                                     gpus_per_node=2, network={**given, **links["multiworker"]})
    held = next(r for r in rows if r["role"] == "held out")
    assert (held["gpus"], held["nodes"]) == (2, 2)
    assert abs(held["error"]) < 1e-9 and held["verdict"] == "explained"
    assert held["bus_bandwidth_inter_gbs"] == pytest.approx(BANDWIDTH / 50 / 1e9)
    assert "between nodes: measured (probe: 2 nodes)" in held["link_source"]
    # a slower link probed: a proportionally slower communication predicted there
    slower = netlinks.probe_links([write_probe(tmp_path / "slow.json", 2, 2,
                                              netlinks.Link(80e-6, BANDWIDTH / 100))])
    again = predict.series_prediction("Net", frame, breakdown_of(frame, exposed), fit,
                                      gpus_per_node=2, network=slower["multiworker"])
    held_slow = next(r for r in again if r["role"] == "held out")
    assert held_slow["comm_s"] == pytest.approx(
        netlinks.Link(80e-6, BANDWIDTH / 100).ring_s(2, GRADIENT))
    assert held_slow["comm_s"] > 1.9 * held["comm_s"] - 4 * 80e-6


def test_each_row_names_the_link_its_prediction_used(tmp_path):
    """The held-out 2-node point is predicted with the probe's link; the doublings past it
    with every point's, its own timed all-reduce included. Each row's latency, bandwidth
    and link_source are those of the links that predicted it: the held-out row named the
    probe but gave the bandwidth its own all-reduce timed (on the test bed, 94 Mbit/s
    beside a probe of 69 whose link had predicted it)."""
    intra = netlinks.Link(ALPHA, BANDWIDTH)
    probed, timed = netlinks.Link(80e-6, BANDWIDTH / 50), netlinks.Link(80e-6, BANDWIDTH / 40)
    links = netlinks.probe_links([write_probe(tmp_path / "nodes2.json", 2, 2, probed)])
    points = [(1, 1), (2, 1), (2, 2)]
    steps = {k: COMPUTE + netlinks.allreduce_time(*k, GRADIENT, intra, timed) for k in points}
    frame = series(steps)
    found = records(points, lambda n, nodes, size: netlinks.allreduce_time(
        n, nodes, size, intra, timed))
    exposed = {k: steps[k] - COMPUTE for k in points}
    rows = predict.series_prediction("Net", frame, breakdown_of(frame, exposed), found,
                                     gpus_per_node=2, network=links["multiworker"])
    held = next(r for r in rows if r["role"] == "held out")
    assert (held["gpus"], held["nodes"]) == (2, 2)
    assert held["comm_s"] == pytest.approx(probed.ring_s(2, GRADIENT))
    assert held["bus_bandwidth_inter_gbs"] == pytest.approx(probed.bandwidth / 1e9)
    assert "between nodes: measured (probe: 2 nodes)" in held["link_source"]
    beyond = [r for r in rows if r["role"] == "extrapolated"]
    assert beyond and all(r["bus_bandwidth_inter_gbs"] == pytest.approx(timed.bandwidth / 1e9)
                          and "probe" not in r["link_source"] for r in beyond)


def test_the_probe_over_the_most_nodes_of_a_strategy_is_taken(tmp_path):
    two = write_probe(tmp_path / "a.json", 2, 2, netlinks.Link(1e-5, 1e9))
    four = write_probe(tmp_path / "b.json", 4, 4, netlinks.Link(2e-5, 5e8))
    other = write_probe(tmp_path / "c.json", 2, 2, netlinks.Link(1e-5, 2e9), strategy="horovod")
    links = netlinks.probe_links([four, two, other])
    assert links["multiworker"]["between_nodes"][0].bandwidth == pytest.approx(5e8)
    assert links["horovod"]["between_nodes"][0].bandwidth == pytest.approx(2e9)


def test_a_failed_probe_says_why_and_the_prediction_goes_without_it(tmp_path):
    """The rule's fallback (probe_network.py --failed LOG) writes the log's last line as
    the probe's record and succeeds, so that the study's tables are still made; the
    prediction takes no link from it."""
    log = tmp_path / "nodes2.log"
    log.write_text("starting\nRuntimeError: Collective ops timed out after 60 s\n\n")
    out = tmp_path / "nodes2.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "probe_network.py"),
                           "--probe-out", str(out), "--failed", str(log)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert record == {"error": "the probe failed (RuntimeError: Collective ops timed out "
                               f"after 60 s); see {log}"}
    good = write_probe(tmp_path / "good.json", 2, 2, netlinks.Link(1e-5, 1e9),
                       strategy="horovod")
    assert list(netlinks.probe_links([out, good])) == ["horovod"]


def test_the_probes_record_gives_the_workers_error_not_a_warning_printed_after_it(tmp_path):
    """A probe whose workers failed was recorded with the log's last line: a TensorFlow
    warning printed on the way out, not why it failed."""
    log = tmp_path / "nodes2.log"
    log.write_text("probe: starting\n"
                   "tensorflow.python.framework.errors_impl.UnavailableError: Collective ops "
                   "is aborted by: failed to connect to all addresses\n"
                   "W0000 00:00:1733100000.123456  4242 init.cc:232] grpc_wait_for_shutdown_"
                   "with_timeout() timed out.\n")
    out = tmp_path / "nodes2.json"
    assert record_failure(out, log) == 0
    error = json.loads(out.read_text())["error"]
    assert "UnavailableError: Collective ops is aborted" in error and "W0000" not in error


def test_a_probe_whose_job_slurm_ended_records_that_jobs_state(tmp_path, monkeypatch):
    """scancel, a time limit or a node's failure end the probe's job before its workers or
    the fallback write anything: the rule's retry records the job's state (sacct's), and
    the prediction's note names the failed probe."""
    from dlscale.jobs import slurm

    job = tmp_path / "nodes2.job"
    job.write_text("4242\n")
    monkeypatch.setattr(slurm, "job_state", lambda j: "CANCELLED" if j == "4242" else None)
    folder = tmp_path / "multiworker"
    folder.mkdir()
    out = folder / "nodes2.json"
    assert record_ended(out, job, tmp_path / "nodes2.log") == 0
    error = json.loads(out.read_text())["error"]
    assert "its SLURM job 4242 ended CANCELLED before the probe wrote its record" in error
    job.write_text("")  # outside SLURM, or the id never written: no state to give
    assert record_ended(out, job, tmp_path / "nodes2.log") == 0
    assert "(its job ended before" in json.loads(out.read_text())["error"]
    notes = netlinks.failed_probes([out])
    assert list(notes) == ["multiworker"]
    assert notes["multiworker"][0].startswith("the network's probe over 2 nodes failed: ")
