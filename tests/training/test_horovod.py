"""strategy: horovod with the real Horovod (Gloo) from .venv-horovod, ranks on CPUs. Horovod
points beside mirrored ones in one chart, and across nodes: tests/cluster/test_slurm.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import HOROVOD_PYTHON, HOROVOD_READY, IN_CI, SCRIPTS

pytestmark = pytest.mark.skipif(not HOROVOD_READY and not IN_CI,
                                reason="the Horovod environment is not built (make horovod)")


def test_two_horovod_ranks_train_and_only_rank_0_writes(small_data, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "launch.py"), "--plan", '{"tasks": 2, "horovod": true}',
         "--",
         str(HOROVOD_PYTHON), str(SCRIPTS / "train.py"), "--data-dir", str(small_data),
         "--out", str(tmp_path), "--model", "SimpleCNN", "--device", "cpu", "--gpus", "2",
         "--batch-per-gpu", "8", "--epochs", "3", "--warmup-epochs", "2",
         "--strategy", "horovod", "--breakdown-steps", "3"], capture_output=True, text=True,
        timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["strategy"], run["replicas"], run["workers"]) == ("horovod", 2, 2)
    assert run["horovod"]["size"] == 2 and run["horovod"]["gloo"] is True
    assert run["global_batch"] == 16 and run["lr"] == pytest.approx(0.02)
    assert run["versions"]["tensorflow"].startswith("2.15")
    records = [json.loads(x) for x in (tmp_path / "epochs.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [1, 2, 3]  # rank 0 only: no duplicates
    assert records[0]["lr"] < 0.02 and records[-1]["lr"] == pytest.approx(0.02)  # warm-up
    assert (tmp_path / "train.log").read_text().count("Epoch 1/3") == 1
    assert 0.0 <= run["test_accuracy"] <= 1.0
    # rank 0's window: Horovod's collectives run in its own threads, outside TensorFlow's
    # trace; its timeline, recorded beside the trace, puts them in the steps
    window = json.loads((tmp_path / "breakdown.json").read_text())
    assert window["communication"] == "separable" and window["summary"]["steps"] == 3
    # on two busy cores an operation of the last step can run a millisecond after its
    # marker (a CI run: 1.1 ms, 6 % of these tiny steps' compute, over the 5 % at which
    # stepsplit.trailing_note speaks): that note is the machine's load, any other a fault
    notes = [n for n in window["notes"] if "after the last traced step ended" not in n]
    assert window["method"].endswith("and Horovod's timeline") and notes == []
    summary = window["summary"]
    # the timeline's collectives are in the steps (their total above 0); how much of them
    # the operations cover depends on the machine's load: on three busy workers of two
    # cores every one was covered once (exposed 0.0), so exposed is held to its bounds only
    assert 0 < summary["comm_total_s"] < summary["wall_s"]
    assert 0 <= summary["comm_exposed_s"] <= summary["comm_total_s"]
    assert run["breakdown"] == {"file": "breakdown.json", "notes": window["notes"]}
    assert len(window["collective"]["seconds"]) > 1  # hvd.allreduce timed on both ranks


def test_ranks_that_horovod_sees_alone_stop_before_writing_the_runs_state(small_data, tmp_path):
    """A rank that its launcher started as one of two but whose Horovod sees only itself
    (a Gloo-only Horovod under mpirun trains each rank alone, every one the chief): exit
    status 3 with the reason, and no rank writes the run's state. Here the real Horovod,
    told by OpenMPI's variable that it is one of two ranks, initialises alone."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run(
        [str(HOROVOD_PYTHON), str(SCRIPTS / "train.py"), "--data-dir", str(small_data),
         "--out", str(tmp_path), "--model", "SimpleCNN", "--device", "cpu", "--gpus", "2",
         "--batch-per-gpu", "8", "--epochs", "1", "--strategy", "horovod"],
        capture_output=True, text=True, timeout=600, env={**env, "OMPI_COMM_WORLD_SIZE": "2"})
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert ("the launcher started 2 ranks (OMPI_COMM_WORLD_SIZE) but Horovod sees 1"
            in proc.stderr), proc.stderr[-3000:]
    assert not (tmp_path / "state" / "settings.json").exists()
