"""Keras 3 on TensorFlow, JAX and PyTorch through `snakemake --profile profiles/local`
(issues 44 and 77): one study, a series per model and backend, from the records to the
tables."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import ROOT, needs_torch, run_snakemake, write_config

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]


@needs_torch
def test_a_backend_sweep_of_keras3_gives_a_series_per_backend_to_the_tables(tmp_path):
    """A model of your own written with `import keras`, on 1 and 2 replicas, on
    TensorFlow (MirroredStrategy), JAX (DataParallel) and PyTorch (DistributedDataParallel,
    a process per replica, in .venv-torch): every run completes, names Keras 3 and its
    backend, and scaling.csv, breakdown.csv and prediction.csv have a series per backend."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'keras3.yaml'}"
    run_snakemake(tmp_path, *PROFILE, config)
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["series"], runs["gpus"], runs["status"], runs["backend"])) == [
        (f"Mixer {backend}", gpus, "completed", backend)
        for backend in ("jax", "tensorflow", "torch") for gpus in (1, 2)]
    assert runs["system_keras"].str.startswith("keras 3.").all()
    assert (runs["log_check"] == "ok").all()  # Keras 3's printed lines agree with the records
    for backend, distribution in (("tensorflow", "tf.distribute.MirroredStrategy"),
                                  ("jax", "keras.distribution.DataParallel"),
                                  ("torch", "torch.nn.parallel.DistributedDataParallel")):
        run = json.loads((tmp_path / f"results/runs/Mixer/{backend}/gpus2/rep1/run.json"
                          ).read_text())
        assert run["keras"].startswith("3.") and run["backend"] == backend
        assert (run["distribution"], run["replicas"], run["test_images"]) == (
            distribution, 2, 33)
        assert 0.0 <= run["test_accuracy"] <= 1.0
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert sorted(zip(scaling["series"], scaling["gpus"])) == [
        (f"Mixer {backend}", gpus) for backend in ("jax", "tensorflow", "torch")
        for gpus in (1, 2)]
    assert scaling["speedup"].notna().all() and scaling["images_per_s"].gt(0).all()
    assert "Mixer jax" in (tmp_path / "results/report/first-page.rst").read_text()
    # every backend's points explain their steps: a collective in every 2-replica window
    # (torch's: torch.profiler's, gloo's all-reduce), the all-reduce timed alone
    breakdown = pd.read_csv(tmp_path / "results/tables/breakdown.csv")
    assert len(breakdown) == 6 and breakdown["compute_share"].notna().all()
    two = breakdown[breakdown["gpus"] == 2]
    assert (two["communication"] == "separable").all() and two["comm_total_share"].gt(0).all()
    assert two["allreduce_s"].gt(0).all() and set(two["strategy"]) == {
        "mirrored", "dataparallel", "ddp"}
    prediction = pd.read_csv(tmp_path / "results/tables/prediction.csv")
    assert prediction["series"].nunique() == 3


def test_keras3_across_nodes_is_refused_before_any_job_with_the_reason(tmp_path):
    config = write_config(tmp_path / "c.yaml", """
data: {dataset: fashion_mnist, source: auto, image_size: 16, limit_train: 64, limit_test: 16}
sweep: {models: [SimpleCNN], gpus: [8]}
training: {keras: 3, epochs: 1, batch_per_gpu: 4, device: cpu}
""")
    proc = run_snakemake(tmp_path, *PROFILE, "-n", f"--configfile={config}", check=False)
    assert proc.returncode != 0
    assert ("invalid sweep: no point of the sweep can run: Keras 3 on TensorFlow trains under "
            "MirroredStrategy on one node: its fit fails under MultiWorkerMirroredStrategy "
            "(keras-team/keras#20585)") in proc.stdout
    assert not (tmp_path / "results").exists()
