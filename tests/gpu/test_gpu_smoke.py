"""GPU smoke test: the demo config with device: gpu, for machines that have a GPU.

Skipped, with the reason, where TensorFlow sees no GPU (this project's CI has none), and
without starting TensorFlow where the machine has no NVIDIA driver at all.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_snakemake, write_config

pytestmark = pytest.mark.gpu


def visible_gpus() -> int:
    proc = subprocess.run([sys.executable, "-c", "import tensorflow as tf; "
                           "print(len(tf.config.list_physical_devices('GPU')))"],
                          capture_output=True, text=True)
    return int(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else 0


@pytest.fixture(scope="module")
def gpus():
    if not Path("/proc/driver/nvidia").exists() and not shutil.which("nvidia-smi"):
        # TensorFlow could see no GPU; asking it costs a TensorFlow start (9 s in CI)
        pytest.skip("no NVIDIA driver on this machine")
    count = visible_gpus()
    if count == 0:
        pytest.skip("TensorFlow sees no GPU on this machine")
    return count


def test_demo_config_on_the_gpu(tmp_path, gpus):
    demo = yaml.safe_load((ROOT / "config" / "demo.yaml").read_text())
    demo["training"]["device"] = "gpu"
    demo["sweep"]["gpus"] = [g for g in demo["sweep"]["gpus"] if g <= gpus]
    config = write_config(tmp_path / "gpu.yaml", yaml.safe_dump(demo))
    run_snakemake(tmp_path, "--profile", str(ROOT / "profiles" / "local"),
                  f"--configfile={config}")
    for model in demo["sweep"]["models"]:
        run = json.loads((tmp_path / f"results/runs/{model}/gpus1/rep1/run.json").read_text())
        assert run["status"] == "completed" and run["devices"][0].endswith("GPU:0")


def test_nvml_telemetry_samples_the_visible_gpus(gpus, tmp_path):
    """The NVML code paths of dlscale.train.telemetry, on a machine with a GPU."""
    import time

    from conftest import read_telemetry

    from dlscale.train.telemetry import Sampler, describe_gpus

    described = describe_gpus()
    assert described["gpu_count"] >= 1 and described["gpu_model"], described
    sampler = Sampler(tmp_path / "telemetry.csv", interval=0.2).start()
    time.sleep(1.5)
    sampler.stop()
    rows, count = read_telemetry(tmp_path / "telemetry.csv")
    assert count == described["gpu_count"] and len(rows) >= 3
    assert all(0 <= r["gpu0_util_percent"] <= 100 and r["gpu0_mem_used_mb"] > 0 for r in rows)
    summary = sampler.summary(0, 10, images=100)
    assert summary["gpu_mem_mb_peak"] > 0 and summary["energy_j"] >= 0


def test_a_gpu_points_window_splits_a_real_gpu_trace(tmp_path, gpus, small_data):
    """The step split on a real GPU trace: TensorFlow's GPU planes hold the operations
    (compute on the GPU's op lines and streams), and xprof, where installed, times the
    same steps."""
    from dlscale.train.profwindow import read_trace
    from dlscale.train.stepsplit import kind

    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "train.py"), "--data-dir", str(small_data),
         "--out", str(tmp_path), "--model", "SimpleCNN", "--device", "gpu", "--gpus", "1",
         "--batch-per-gpu", "8", "--epochs", "1", "--breakdown-steps", "3", "--keep-trace"],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    window = json.loads((tmp_path / "breakdown.json").read_text())
    assert window["notes"] == [] and window["summary"]["steps"] == 3
    assert window["summary"]["compute_s"] > 0
    [trace] = (tmp_path / "trace").glob("plugins/profile/*/*.xplane.pb")
    events = read_trace(trace, on_jax=False)
    assert any(e.line.startswith("/device:GPU:0|") and kind(e) == "compute" for e in events)
