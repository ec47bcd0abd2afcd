"""Your own model, images and training script through `snakemake --profile profiles/local`."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import ROOT, run_snakemake

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]


def test_your_own_model_is_a_series_with_tables_and_an_edit_trains_it_again(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'own-model.yaml'}"
    run_snakemake(tmp_path, *PROFILE, config)
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["series"], runs["gpus"], runs["status"])) == [
        ("SmallResNet", 1, "completed"), ("SmallResNet", 2, "completed")]
    run = json.loads((tmp_path / "results/runs/SmallResNet/gpus2/rep1/run.json").read_text())
    assert (run["model"], run["model_from"], run["replicas"]) == (
        "SmallResNet", "examples/my_model.py:small_resnet", 2)
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(scaling["gpus"]) == [1, 2] and scaling["speedup"].notna().all()
    assert (tmp_path / "results/plots/speedup.png").exists()

    # the model file is an input of its points: an edit plans both again, nothing else
    model = tmp_path / "examples/my_model.py"
    model.write_text(model.read_text().replace("width=16", "width=8"))
    dry = run_snakemake(tmp_path, *PROFILE, config, "-n")
    stats = dry.stdout.split("Job stats:")[1].split("total")[0]
    assert [line.split() for line in stats.splitlines() if line.startswith("train")] == [
        ["train", "2"]]


def test_your_own_script_is_scaled_and_a_failing_command_is_a_failed_row(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'own-command.yaml'}"
    first = run_snakemake(tmp_path, *PROFILE, config, check=False)
    assert first.returncode != 0  # check_points: broken's points failed
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["series"], runs["gpus"], runs["status"])) == [
        ("broken", 1, "failed"), ("broken", 2, "failed"),
        ("my_train", 1, "completed"), ("my_train", 2, "completed")]
    run = json.loads((tmp_path / "results/runs/my_train/gpus2/rep1/run.json").read_text())
    assert (run["strategy"], run["global_batch"], run["images_per_epoch"]) == (
        "command", 32, 256)  # 8 steps printed by Keras x the global batch
    assert "--gpus 2 --batch-size 16 --epochs 2 --lr 0.02" in run["command"]
    epochs = (tmp_path / "results/runs/my_train/gpus2/rep1/epochs.jsonl").read_text()
    assert [json.loads(line)["epoch"] for line in epochs.splitlines()] == [1, 2]
    failed = pd.read_csv(tmp_path / "results/tables/failed.csv")
    for problem in failed.loc[failed["series"] == "broken", "problem"]:
        assert "the command exited with status 3; its last lines:" in problem
        assert "cannot open the data" in problem  # what the command said on stderr
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    mine = scaling[scaling["series"] == "my_train"]
    assert list(mine["gpus"]) == [1, 2] and mine["speedup"].notna().all()

    dry = run_snakemake(tmp_path, *PROFILE, config, "-n")  # only the failed points again
    stats = dry.stdout.split("Job stats:")[1].split("total")[0]
    assert [line.split() for line in stats.splitlines() if line.startswith("train")] == [
        ["train_command", "2"]]
