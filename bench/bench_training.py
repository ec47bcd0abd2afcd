#!/usr/bin/env python3
"""Training throughput: steady-state images/s of the study's models, float32 and
bf16+XLA, real input versus synthetic input (is the input pipeline ever the limit?).

  python bench/bench_training.py                       # on a GPU: the issue-6 benchmark
  python bench/bench_training.py --device cpu --size 32 --models SimpleCNN ResNet50V2 \\
      --images 2048 --batch 32                          # the same measurements on CPUs

Per model and setting: the batch per GPU (given, or found with find_batch_size.py on a
GPU), then train.py for --epochs epochs on real TFRecords and on synthetic input;
images/s is the mean over the epochs after the first. Prints a Markdown table for
docs/benchmarks.md. On a GPU the targets (one H100) are ResNet50V2 float32 >= 3,000
images/s and bf16+XLA >= 7,000 images/s; real input should be within 5% of synthetic.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
from dlscale.core.contract import MANIFEST  # noqa: E402

SETTINGS = {"float32": ["--precision", "float32", "--no-xla"],
            "bf16+xla": ["--precision", "mixed_auto", "--xla"]}


def gpu_name() -> str | None:
    proc = subprocess.run([sys.executable, "-c",
                           "import tensorflow as tf; g = tf.config.list_physical_devices('GPU'); "
                           "print(tf.config.experimental.get_device_details(g[0])"
                           ".get('device_name') if g else '')"],
                          capture_output=True, text=True, env=dict(os.environ,
                                                                   TF_CPP_MIN_LOG_LEVEL="3"))
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else None


def steady_rate(run_dir: Path) -> float:
    records = [json.loads(x) for x in (run_dir / "epochs.jsonl").read_text().splitlines()]
    timed = records[1:] or records
    return sum(r["images"] for r in timed) / sum(r["seconds"] for r in timed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--models", nargs="+", default=["ResNet50V2", "ResNet152V2"])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--images", type=int, default=20000, help="training images")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, help="batch per GPU (default: found on the GPU)")
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "dlscale-bench-train")
    args = parser.parse_args(argv)
    name = gpu_name() if args.device == "gpu" else f"CPU ({os.cpu_count()} cores)"
    if args.device == "gpu" and not name:
        print("error: no GPU visible to TensorFlow; run with --device cpu for the CPU "
              "figures, or on a GPU node", file=sys.stderr)
        return 5
    import make_synthetic_cifar

    from dlscale.data import preparation

    data = args.work / f"data{args.size}"
    if not (data / MANIFEST).exists():
        archive = make_synthetic_cifar.write_archive(args.work / "cifar.tar.gz", "python",
                                                     args.images, 1000, seed=0)
        preparation.prepare("cifar10", archive, data, args.size, 16)
    print(f"machine: {platform.node()}, {name}, TensorFlow via {sys.executable}")
    print(f"{args.images} images at {args.size} px, {args.epochs} epochs, first left out\n")
    print("| model | setting | batch/GPU | real input [images/s] | synthetic [images/s] | "
          "real / synthetic |\n|---|---|---|---|---|---|")
    for model in args.models:
        for setting, flags in SETTINGS.items():
            batch = args.batch
            if batch is None:
                out = args.work / f"batch-{model}-{setting}.json"
                subprocess.run([sys.executable, str(SCRIPTS / "find_batch_size.py"), "--model",
                                model, "--data-dir", str(data), "--out", str(out), *flags],
                               check=True)
                batch = json.loads(out.read_text())["batch_per_gpu"]
            rates = {}
            for kind in ("real", "synthetic"):
                run = args.work / f"run-{model}-{setting}-{kind}"
                subprocess.run([sys.executable, str(SCRIPTS / "train.py"), "--data-dir", str(data),
                                "--out", str(run), "--model", model, "--device", args.device,
                                "--epochs", str(args.epochs), "--batch-per-gpu", str(batch),
                                *flags, *(["--synthetic"] if kind == "synthetic" else [])],
                               check=True, capture_output=True, text=True)
                rates[kind] = steady_rate(run)
            print(f"| {model} | {setting} | {batch} | {rates['real']:,.0f} | "
                  f"{rates['synthetic']:,.0f} | {rates['real'] / rates['synthetic']:.2f} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
