#!/usr/bin/env python3
"""Data benchmarks: preparation and reading of 60,000 CIFAR-layout images at 128 px,
and the reference study's in-memory loader for comparison.

  python bench/bench_data.py [--work /tmp/dlscale-bench] [--images 60000] [--size 128]

Each measurement runs in its own process, so its peak RSS is its own. Prints a
Markdown table for docs/benchmarks.md. Targets (issue 2): preparation >= 5,000
images/s; reading >= 15,000 images/s from the first epoch with peak RSS <= 1.5 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM, not getrusage's ru_maxrss: on Linux the latter
    carries the parent's high-water mark over fork and exec."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stage_prepare(work: Path, size: int) -> dict:
    import prepare_data

    import tensorflow  # noqa: F401  (imported before timing: start-up is reported apart)

    t0 = time.perf_counter()
    manifest = prepare_data.prepare("cifar10", work / "cifar-10-python.tar.gz",
                                    work / f"data{size}", size, 16)
    seconds = time.perf_counter() - t0
    images = sum(s["count"] for s in manifest["splits"].values())
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds,
            "peak_rss_mb": peak_rss_mb()}


def stage_read(work: Path, size: int, batch: int = 256, epochs: int = 2) -> dict:
    from dlscale.tfrecords import load_manifest, make_dataset

    data = work / f"data{size}"
    count = load_manifest(data)["splits"]["train"]["count"]
    steps = count // batch
    iterator = iter(make_dataset(data, "train", batch, training=True, seed=1))
    rates = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        for _ in range(steps):
            next(iterator)
        rates.append(steps * batch / (time.perf_counter() - t0))
    return {"epoch_images_per_s": rates, "peak_rss_mb": peak_rss_mb()}


def stage_reference(work: Path, size: int, batch: int = 256, epochs: int = 2) -> dict:
    """The study's loader: arrays in memory, tf.image.resize per image in map, cache()."""
    import tensorflow as tf

    from dlscale.sources import read_dataset

    splits = read_dataset("cifar10", work / "cifar-10-python.tar.gz")
    x, y = splits.images["train"], splits.labels["train"]
    ds = (tf.data.Dataset.from_tensor_slices((x, y))
          .map(lambda image, label: (tf.image.resize(image, (size, size)) / 255.0, label))
          .cache().shuffle(10000, seed=1).batch(batch).prefetch(tf.data.AUTOTUNE))
    rates = []
    for _ in range(epochs):
        t0, n = time.perf_counter(), 0
        for images, _ in ds:
            n += int(images.shape[0])
        rates.append(n / (time.perf_counter() - t0))
    return {"epoch_images_per_s": rates, "peak_rss_mb": peak_rss_mb()}


def child(stage: str, work: Path, size: int) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--stage", stage, "--work", str(work),
                           "--size", str(size)], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"stage {stage} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_seconds"] = time.perf_counter() - t0
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench"))
    parser.add_argument("--images", type=int, default=60000, help="train + test images")
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--stage", choices=["prepare", "read", "reference"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage:
        stage = {"prepare": stage_prepare, "read": stage_read, "reference": stage_reference}
        print(json.dumps(stage[args.stage](args.work, args.size)))
        return 0

    import make_synthetic_cifar

    args.work.mkdir(parents=True, exist_ok=True)
    archive = args.work / "cifar-10-python.tar.gz"
    test = args.images // 6
    make_synthetic_cifar.write_archive(archive, "python", args.images - test, test, seed=0)
    prep = child("prepare", args.work, args.size)
    read = child("read", args.work, args.size)
    ref = child("reference", args.work, args.size)
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"archive: {archive.stat().st_size / 1e6:.0f} MB (python layout), "
          f"{args.images} images at {args.size} px\n")
    print("| measurement | result | target |\n|---|---|---|")
    print(f"| preparation (read archive, resize, write 16+16 shards) | {prep['images_per_s']:,.0f} "
          f"images/s ({prep['seconds']:.1f} s; {prep['process_seconds']:.1f} s with Python and "
          f"TensorFlow start-up), peak RSS {prep['peak_rss_mb']:,.0f} MB | >= 5,000 images/s |")
    r = read["epoch_images_per_s"]
    print(f"| TFRecord reader, batch 256, shuffle 4096 | epoch 1: {r[0]:,.0f} images/s, epoch 2: "
          f"{r[1]:,.0f} images/s, peak RSS {read['peak_rss_mb']:,.0f} MB | >= 15,000 images/s "
          f"from epoch 1, <= 1,500 MB |")
    f = ref["epoch_images_per_s"]
    print(f"| reference study's loader (resize in map, cache) | epoch 1: {f[0]:,.0f} images/s, "
          f"epoch 2: {f[1]:,.0f} images/s, peak RSS {ref['peak_rss_mb']:,.0f} MB | (comparison) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
