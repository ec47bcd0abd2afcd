#!/usr/bin/env python3
"""Preparation of your own images (data.dataset: folder), measured: a folder of
--images JPEG files (10 classes, sizes from 96 to 159 px, written by TensorFlow's
encoder) prepared into 128 px shards as the workflow's rule runs it.

  python bench/bench_folder.py [--work /tmp/dlscale-bench-folder] [--images 10000]
                               [--size 128]

Measured in its own process (so the peak RSS, VmHWM, is the preparation's): the wall
time of the listing, of prepare() (decode, resize, shard, manifest), images/s, and the
peak RSS. Prints a Markdown table row for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def peak_rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def write_images(folder: Path, count: int) -> None:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(3)
    for i in range(count):
        label = i % 10
        size = (96 + (i * 7) % 64, 96 + (i * 13) % 64)
        pixels = np.clip(rng.normal(25 * label, 40, (*size, 3)), 0, 255).astype(np.uint8)
        target = folder / f"class{label}" / f"{i:05d}.jpg"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(tf.io.encode_jpeg(pixels, quality=90).numpy())


def stage(work: Path, size: int) -> None:
    """Child process: list, then prepare, printing the figures."""
    import tensorflow  # noqa: F401  (start-up is not part of the preparation)

    from dlscale.data import preparation
    from dlscale.data.imagefolder import scan

    source = work / "images"
    start = time.perf_counter()
    listing = scan(source, 0.2)
    listed = time.perf_counter() - start
    start = time.perf_counter()
    manifest = preparation.prepare("folder", source, work / "out", size, 16)
    seconds = time.perf_counter() - start
    total = sum(s["count"] for s in manifest["splits"].values())
    assert total == sum(len(v) for v in listing.files.values())
    print(f"RESULT {total} {listed:.2f} {seconds:.1f} {total / seconds:.0f} "
          f"{peak_rss_mb():.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-folder"))
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--stage", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        stage(args.work, args.size)
        return 0
    folder = args.work / "images"
    if not folder.is_dir() or sum(1 for _ in folder.rglob("*.jpg")) != args.images:
        subprocess.run(["rm", "-rf", str(args.work)], check=True)
        write_images(folder, args.images)
    disk = sum(p.stat().st_size for p in folder.rglob("*.jpg")) / 2 ** 20
    proc = subprocess.run([sys.executable, __file__, "--stage", "--work", str(args.work),
                           "--size", str(args.size)], capture_output=True, text=True,
                          check=True)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    total, listed, seconds, rate, rss = line.split()[1:]
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}")
    print("| images | JPEG on disk | listing (planning) | preparation to "
          f"{args.size} px | images/s | peak RSS |")
    print("|---|---|---|---|---|---|")
    print(f"| {total} | {disk:.0f} MB | {listed} s | {seconds} s | {rate} | {rss} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
