"""`dlscale status` on a study folder whose records are damaged in every way a kill, a full
disk or a hand edit can leave them: each point gets its line, no traceback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from dlscale.reporting import status

DLSCALE = Path(sys.executable).with_name("dlscale")
POINTS = ["SimpleCNN/gpus1/rep1", "SimpleCNN/gpus2/rep1", "SimpleCNN/gpus4/rep1",
          "MLP/gpus1/rep1", "MLP/gpus2/rep1", "MLP/gpus4/rep1"]


def study(tmp_path: Path, live: dict[str, bytes], plan=None, holder: int = 1) -> Path:
    (tmp_path / "results").mkdir()
    plan = plan if plan is not None else {
        "written": "2026-11-25T10:00:00+00:00",
        "points": [{"key": k, "epochs": 4, "rules": ["train"]} for k in POINTS]}
    (tmp_path / "results" / "plan.json").write_text(json.dumps(plan))
    for key, content in live.items():
        folder = tmp_path / "results" / "runs" / key
        (folder / "state").mkdir(parents=True)
        (folder / "state" / "epochs.jsonl").write_bytes(content)
        (folder / ".lock").write_text(json.dumps({"host": socket.gethostname(),
                                                  "pid": holder}))
    return tmp_path


def run_status(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(DLSCALE), "status", str(folder), *args], capture_output=True,
                          text=True, timeout=60)


def test_every_point_has_its_line_whatever_its_records_hold(tmp_path):
    live = {  # running points whose live records were damaged
        "SimpleCNN/gpus1/rep1": b'{"epoch": 1, "seconds": 2.0}\n{"seconds": 2.1}\n',
        "SimpleCNN/gpus2/rep1": b'{"epoch": 1, "seconds": "fast"}\n',
        "SimpleCNN/gpus4/rep1": b'[1, 2, 3]\n',
        "MLP/gpus1/rep1": b'{"epoch": "one"}\n',
        "MLP/gpus2/rep1": b'\x00\x01\xff binary\n',
    }
    # a process that is a training as status knows one (its command line names
    # launch.py), holding every point's lock on this host: the points are running
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                "launch.py"])
    try:
        folder = study(tmp_path, live, holder=trainer.pid)
        statuses = {s.key: s for s in status.study_status(folder)}
        shown = run_status(folder)
    finally:
        trainer.kill()
        trainer.wait()
    assert list(statuses) == POINTS
    assert statuses["MLP/gpus4/rep1"].state == "waiting"
    assert statuses["MLP/gpus2/rep1"].detail.startswith("starting")  # nothing readable
    for key in ("SimpleCNN/gpus1/rep1", "SimpleCNN/gpus2/rep1", "SimpleCNN/gpus4/rep1",
                "MLP/gpus1/rep1"):
        assert statuses[key].state == "unreadable", statuses[key]
        assert f"see {folder / 'results/runs' / key}" in statuses[key].detail
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown.stderr
    assert len(shown.stdout.splitlines()) == len(POINTS) + 1
    for key in POINTS:
        assert key in shown.stdout


@pytest.mark.parametrize("plan", [[], {"points": "all"}, {"points": [{"model": "x"}]},
                                  {"written": 1}])
def test_a_plan_of_another_shape_is_one_line(tmp_path, plan):
    shown = run_status(study(tmp_path, {}, plan))
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert shown.stdout.startswith("error: ") and "is not a plan written by dlscale" in \
        shown.stdout and len(shown.stdout.splitlines()) == 1


def test_a_closed_pipe_is_not_an_error(tmp_path):
    # more lines than a pipe holds (64 kB): head has exited before the last is written
    keys = [f"SimpleCNN/gpus{i}/rep1" for i in range(1, 5001)]
    folder = study(tmp_path, {}, {"points": [{"key": k, "epochs": 4} for k in keys]})
    piped = subprocess.run(f"'{DLSCALE}' status '{folder}' | head -1", shell=True,
                           capture_output=True, text=True, timeout=60)
    assert piped.stdout.startswith("SimpleCNN/gpus1/rep1 ")
    assert piped.stderr == ""


@pytest.mark.skipif(not shutil.which("squeue"), reason="needs SLURM's squeue (make sysdeps)")
def test_a_controller_that_does_not_answer_costs_a_note_not_the_listing(tmp_path):
    """squeue against a controller nothing listens for waits 9 s here before it gives up
    (SLURM's own timeout); status asks for 5 s at most and says so."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=gone\nSlurmctldHost=localhost\nSlurmctldPort=1\n"
                    "NodeName=n9 CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=n9\n")
    (tmp_path / "study").mkdir()
    folder = study(tmp_path / "study", {})
    shown = subprocess.run([str(DLSCALE), "status", str(folder)], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "SLURM_CONF": str(conf)})
    assert shown.returncode == 0 and len(shown.stdout.splitlines()) == len(POINTS) + 1
    assert shown.stderr.strip() == (
        "note: squeue did not answer within 5 s (is the SLURM controller reachable?): "
        "SLURM's queued and running jobs are not shown")


def test_the_summary_lists_the_flags_of_the_last_scaling_table(tmp_path):
    """An accuracy change beyond the tolerance is a flag as the others are: dlscale status
    lists it under the summary, from the scaling table the study last wrote."""
    from helpers.studies import study_epochs

    from dlscale.reporting.analysis import scaling, summarize_runs

    epochs = study_epochs()
    epochs.loc[(epochs["run"] == "ref4") & (epochs["epoch"] == 5), "accuracy"] = 0.30
    folder = study(tmp_path, {})
    (folder / "results" / "tables").mkdir()
    table = scaling(epochs, summarize_runs(epochs, 1), 1, 0.05)
    table.to_csv(folder / "results" / "tables" / "scaling.csv", index=False)
    shown = run_status(folder)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[len(POINTS)].startswith(f"{len(POINTS)} point(s): ")
    row = table.iloc[2]
    assert lines[len(POINTS) + 1:] == [
        f"flag: {row['series']}, {row['gpus']} GPU(s): accuracy "
        f"{row['accuracy_delta']:+.3f} against 1 GPU, beyond the tolerance 0.05"]


def test_a_point_whose_lock_another_host_holds_names_the_holder(tmp_path):
    """A training on another host (another study's job on a node) holds the point's lock
    and this host cannot tell whether it still runs: the point waits, the holder named
    (it read `waiting` and nothing more); a holder that ended long ago is not named."""
    folder = study(tmp_path, {})
    run = folder / "results/runs/MLP/gpus2/rep1"
    run.mkdir(parents=True)
    (run / ".lock").write_text(json.dumps({"host": "n9-elsewhere", "pid": 4242,
                                           "since": "2026-11-28T10:00:00+00:00"}))
    statuses = {s.key: s for s in status.study_status(folder)}
    assert statuses["MLP/gpus2/rep1"].state == "waiting"
    assert statuses["MLP/gpus2/rep1"].detail == (
        "lock held by host n9-elsewhere, pid 4242, since 2026-11-28T10:00:00+00:00: whether "
        "it still runs cannot be told from this host")
    (run / ".lock").write_text(json.dumps({"host": socket.gethostname(), "pid": 2 ** 22 + 7,
                                           "since": "2026-11-28T10:00:00+00:00"}))
    statuses = {s.key: s for s in status.study_status(folder)}
    assert (statuses["MLP/gpus2/rep1"].state, statuses["MLP/gpus2/rep1"].detail) == (
        "waiting", "")
