"""GPU smoke test: the demo config with device: gpu, for machines that have a GPU.

Skipped, with the reason, where TensorFlow sees no GPU (this project's CI has none).
"""

from __future__ import annotations

import json
import subprocess
import sys

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
    for model in ("SimpleCNN", "ResNet50V2"):
        run = json.loads((tmp_path / f"results/runs/{model}/gpus1/rep1/run.json").read_text())
        assert run["status"] == "completed" and run["devices"][0].endswith("GPU:0")
