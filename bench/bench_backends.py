#!/usr/bin/env python3
"""Keras 2 and Keras 3 on TensorFlow, JAX and PyTorch side by side (training.keras,
training.backend):
steady-state images/s of train.py on 1 and 2 replicas, and how long a point takes from
start to record.

  python bench/bench_backends.py                          # SimpleCNN on CPUs
  python bench/bench_backends.py --models MLP ResNet50V2
  python bench/bench_backends.py --device gpu --size 128 --images 20000 --batch 256

Per model, framework and replica count: train.py for --epochs epochs on the same
TFRecords (float32; XLA as each backend does it: off on TensorFlow and PyTorch, always on
JAX; PyTorch's points with .venv-torch's python, one process per replica started by
launch.py as the train rule starts them);
images/s is the mean over the epochs after the first; `point [s]` is the process's wall
time, start-up, compiling and evaluation included. Prints a Markdown table for
docs/benchmarks.md. On CPUs the replicas are logical CPU devices (TensorFlow), XLA host
devices (JAX) or processes (PyTorch) sharing the same cores: the figures compare the
frameworks' overheads on this machine and say nothing about GPUs.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
from bench_training import steady_rate  # noqa: E402 (bench/ is the script's folder)

from dlscale.core.contract import MANIFEST  # noqa: E402

FRAMEWORKS = {"Keras 2 (tf-keras), TensorFlow": ["--keras", "2"],
              "Keras 3, TensorFlow": ["--keras", "3", "--backend", "tensorflow"],
              "Keras 3, JAX": ["--keras", "3", "--backend", "jax"],
              "Keras 3, PyTorch": ["--keras", "3", "--backend", "torch"]}
TORCH_PYTHON = ROOT / ".venv-torch" / "bin" / "python"  # make setup-torch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["gpu", "cpu"], default="cpu")
    parser.add_argument("--models", nargs="+", default=["SimpleCNN"])
    parser.add_argument("--gpus", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--images", type=int, default=2048, help="training images")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32, help="batch per replica")
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "dlscale-bench-backends")
    args = parser.parse_args(argv)
    import make_synthetic_cifar

    from dlscale.data import preparation

    data = args.work / f"data{args.size}-{args.images}"
    if not (data / MANIFEST).exists():
        archive = make_synthetic_cifar.write_archive(args.work / "cifar.tar.gz", "python",
                                                     args.images, 1000, seed=0)
        preparation.prepare("cifar10", archive, data, args.size, 16)
    print(f"machine: {platform.node()}, {os.cpu_count()} logical CPUs, {platform.processor()}"
          f", {args.device}; {args.images} images at {args.size} px, batch {args.batch} per "
          f"replica, {args.epochs} epochs, the first left out\n")
    print("| model | framework | replicas | images/s | point [s] |\n|---|---|---|---|---|")
    for model in args.models:
        for name, flags in FRAMEWORKS.items():
            for gpus in args.gpus:
                run = args.work / f"run-{model}-{'-'.join(flags)}-{gpus}"
                torch = "torch" in flags
                launch = ([sys.executable, str(SCRIPTS / "launch.py"), "--plan",
                           f'{{"tasks": {gpus}}}', "--", str(TORCH_PYTHON)] if torch
                          else [sys.executable])
                start = time.perf_counter()
                subprocess.run([*launch, str(SCRIPTS / "train.py"), "--data-dir",
                                str(data), "--out", str(run), "--model", model, "--device",
                                args.device, "--gpus", str(gpus), "--epochs", str(args.epochs),
                                "--batch-per-gpu", str(args.batch), *flags],
                               check=True, capture_output=True, text=True)
                wall = time.perf_counter() - start
                print(f"| {model} | {name} | {gpus} | {steady_rate(run):,.0f} | {wall:.1f} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
