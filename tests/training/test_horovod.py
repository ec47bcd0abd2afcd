"""strategy: horovod with the real Horovod (Gloo) from .venv-horovod, ranks on CPUs."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from conftest import (HOROVOD_PYTHON, HOROVOD_READY, IN_CI, ROOT, SCRIPTS, comparison_config,
                      run_snakemake)
pytestmark = pytest.mark.skipif(not HOROVOD_READY and not IN_CI,
                                reason="the Horovod environment is not built (make horovod)")


def test_two_horovod_ranks_train_and_only_rank_0_writes(small_data, tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "launch.py"), "--horovod", "--tasks", "2", "--",
         str(HOROVOD_PYTHON), str(SCRIPTS / "train.py"), "--data-dir", str(small_data),
         "--out", str(tmp_path), "--model", "SimpleCNN", "--device", "cpu", "--gpus", "2",
         "--batch-per-gpu", "8", "--epochs", "3", "--warmup-epochs", "2",
         "--strategy", "horovod"], capture_output=True, text=True, timeout=900)
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


def test_mirrored_and_horovod_points_on_one_chart(tmp_path, cifar_python):
    config = comparison_config(tmp_path / "c.yaml", cifar_python,
                               "strategy: [mirrored, horovod]")
    run_snakemake(tmp_path, "--profile", str(ROOT / "profiles" / "local"),
                  f"--configfile={config}")
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert sorted(table["series"].unique()) == ["SimpleCNN horovod", "SimpleCNN mirrored"]
    assert table.groupby("series")["gpus"].apply(list).to_dict() == {
        "SimpleCNN horovod": [1, 2], "SimpleCNN mirrored": [1, 2]}
    run = json.loads((tmp_path / "results/runs/SimpleCNN/horovod/gpus2/rep1/run.json").read_text())
    assert run["horovod"]["size"] == 2
    assert (tmp_path / "results/plots/speedup.png").exists()
