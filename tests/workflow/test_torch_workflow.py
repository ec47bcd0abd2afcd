"""PyTorch as the study's backend through `snakemake --profile profiles/local` (issue 77):
a series per model, dlscale's own, torchvision's and the seed study's chapter 12 ViT
(issue 98), on 1 and 2 processes over gloo, from
the records to the tables and the why-it-scales table. The same Keras 3 model on the three
backends in one study: tests/workflow/test_keras3_workflow.py."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import ROOT, TABLES, needs_fashion, needs_torch, run_snakemake

from dlscale.core.vocabulary import THREADS_ENV

pytestmark = [pytest.mark.workflow, needs_torch, needs_fashion]
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]


def test_a_torch_study_of_dlscales_model_and_torchvisions_gives_their_series(tmp_path):
    """SimpleCNN and resnet18 on 1 and 2 ranks: every run completes under
    DistributedDataParallel with its printed lines agreeing with its records, scaling.csv
    has both series with a speedup, and the 2-rank windows show gloo's all-reduce as
    communication."""
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'torch.yaml'}"
    shutil.copytree(ROOT / "examples" / "hpc4ai-chapter12", tmp_path / "examples" /
                    "hpc4ai-chapter12")  # the ViT's module, beside the study as a user's
    run_snakemake(tmp_path, *PROFILE, config, TABLES, "results/tables/breakdown.csv")
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["series"], runs["gpus"], runs["status"])) == [
        (model, gpus, "completed") for model in ("SimpleCNN", "resnet18", "vit_tiny")
        for gpus in (1, 2)]
    assert (runs["backend"] == "torch").all() and (runs["strategy"] == "ddp").all()
    assert (runs["log_check"] == "ok").all()
    run = json.loads((tmp_path / "results/runs/resnet18/gpus2/rep1/run.json").read_text())
    assert (run["workers"], run["replicas"], run["communication"]) == (2, 2, "gloo")
    assert run["test_images"] == 32 and 0.0 <= run["test_accuracy"] <= 1.0
    # each point claimed its tasks' cores (cpus_per_gpu 1 x processes), so none ran beside
    # another, and each rank trained on its share of what Snakemake granted
    for gpus in (1, 2):
        done = json.loads((tmp_path / f"results/runs/resnet18/gpus{gpus}/rep1/run.json")
                          .read_text())
        assert done["env"][THREADS_ENV] == "1", done["env"]
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert sorted(zip(scaling["series"], scaling["gpus"])) == [
        (model, gpus) for model in ("SimpleCNN", "resnet18", "vit_tiny") for gpus in (1, 2)]
    assert scaling["speedup"].notna().all() and scaling["images_per_s"].gt(0).all()
    breakdown = pd.read_csv(tmp_path / "results/tables/breakdown.csv")
    two = breakdown[breakdown["gpus"] == 2]
    assert len(two) == 3 and (two["communication"] == "separable").all()
    assert two["comm_total_share"].gt(0).all() and two["allreduce_s"].gt(0).all()
    # the gradient the all-reduce is timed up to: torchvision's weights seen through
    # Keras' wrapper, as models.csv keeps them
    assert two.set_index("model").loc["resnet18", "gradient_bytes"] == 44726568


def test_dlscales_torch_points_over_workers_and_compile_give_a_series_per_knob_value(
        tmp_path):
    """sweep.knobs num_workers x compile on dlscale's own torch points (issue 98 item 1):
    every point ran with its knobs (its record says the DataLoader's workers and
    torch.compile), each combination a series with its columns, the memory of each point
    its process's peak (a CPU point, said so), and the knobs plot a row per knob."""
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'torch-knobs.yaml'}"
    run_snakemake(tmp_path, *PROFILE, config, TABLES, "results/plots/knobs.png")
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["num_workers"], runs["compile"], runs["status"])) == [
        (w, c, "completed") for w in (0, 2) for c in (False, True)]
    for row in runs.itertuples():
        run = json.loads((tmp_path / "results/runs" / row.run / "run.json").read_text())
        assert run["input_workers"] == row.num_workers
        assert run["torch_compile"] == ("inductor" if row.compile else None)
    assert runs["memory_gib"].gt(0).all()
    assert runs["memory_from"].str.startswith("the process's peak resident memory").all()
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert sorted(scaling["series"]) == sorted(
        f"SimpleCNN num_workers={w} compile={c}" for w in (0, 2) for c in ("false", "true"))
    assert list(scaling.columns[1:3]) == ["num_workers", "compile"]
    assert scaling["memory_gib"].gt(0).all() and scaling["images_per_s"].gt(0).all()
    import matplotlib.image

    height, width = matplotlib.image.imread(tmp_path / "results/plots/knobs.png").shape[:2]
    assert height > 0.55 * width  # two knobs: two rows (one row is about 0.35 as high)
