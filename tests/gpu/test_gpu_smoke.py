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
    from dlscale.measure.profwindow import read_trace
    from dlscale.measure.stepsplit import kind

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


def test_a_torch_point_trains_on_the_gpu_with_nccl_and_traces_its_kernels(small_data,
                                                                          tmp_path):
    """backend torch on CUDA: one process per GPU (2 where the machine has them: NCCL),
    its window's kernels on the GPU counted as compute, NCCL's as communication."""
    from conftest import SCRIPTS, TORCH_PYTHON, TORCH_READY

    if not Path("/proc/driver/nvidia").exists() and not shutil.which("nvidia-smi"):
        pytest.skip("no NVIDIA driver on this machine")
    if not TORCH_READY:
        pytest.skip("the PyTorch environment is not built (make setup-torch)")
    count = subprocess.run([str(TORCH_PYTHON), "-c", "import torch; "
                            "print(torch.cuda.device_count())"],
                           capture_output=True, text=True).stdout.strip()
    if not count.isdigit() or int(count) == 0:
        pytest.skip("PyTorch sees no GPU on this machine")
    ranks = min(int(count), 2)
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "launch.py"), "--plan", json.dumps({"tasks": ranks}),
         "--", str(TORCH_PYTHON), str(SCRIPTS / "train.py"), "--data-dir", str(small_data),
         "--out", str(tmp_path), "--model", "SimpleCNN", "--device", "gpu", "--gpus",
         str(ranks), "--keras", "3", "--backend", "torch", "--batch-per-gpu", "16",
         "--epochs", "2", "--breakdown-steps", "3"], capture_output=True, text=True,
        timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["status"] == "completed" and run["devices"] == ["cuda:0"]
    assert run["communication"] == "nccl" and run["replicas"] == ranks
    window = json.loads((tmp_path / "breakdown.json").read_text())
    assert [s["step"] for s in window["steps"]] == [2, 3, 4], window["notes"]
    assert all(s["compute_s"] > 0 for s in window["steps"])
    if ranks > 1:
        assert all(s["comm_total_s"] > 0 for s in window["steps"])
