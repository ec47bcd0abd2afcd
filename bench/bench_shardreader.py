#!/usr/bin/env python3
"""dlscale's own shard reader (dlscale.data.shardreader, no TensorFlow) against the TensorFlow
reader with the images held in memory (make_dataset(cache=True)), the same order: the
time to open a split (the reader checks every record's checksums then) and to read one
pass of batches, no model. Random images, 16 shards, batch 256.

  python bench/bench_shardreader.py [--images 10000] [--size 64] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from dlscale.core.contract import MANIFEST  # noqa: E402

BATCH, SHARDS = 256, 16


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-shardreader"))
    args = parser.parse_args()
    import numpy as np

    from dlscale.data import shardreader, tfrecords

    data = args.work / f"{args.images}-{args.size}"
    if not (data / MANIFEST).exists():
        data.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        images = rng.integers(0, 256, (args.images, args.size, args.size, 3), np.uint8)
        labels = rng.integers(0, 10, args.images)
        shards = tfrecords.write_split(images, labels, data, "train", SHARDS, args.size)
        (data / MANIFEST).write_text(json.dumps({
            "image_shape": [args.size, args.size, 3], "num_classes": 10,
            "splits": {"train": {"count": args.images, "shards": shards}}}))
    per_pass = args.images // BATCH
    results = {}
    t0 = time.perf_counter()
    reader = shardreader.Reader(data, "train", BATCH, training=True, seed=1)
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in zip(range(per_pass), reader):
        pass
    results["dlscale (no TensorFlow)"] = (opened, time.perf_counter() - t0)
    t0 = time.perf_counter()
    ds = tfrecords.make_dataset(data, "train", BATCH, training=True, seed=1, cache=True)
    batches = iter(ds.as_numpy_iterator())
    next(batches)  # the first batch reads and decodes the whole split
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in zip(range(per_pass - 1), batches):
        pass
    results["TensorFlow, held in memory"] = (opened, (time.perf_counter() - t0) * per_pass
                                             / (per_pass - 1))
    print(f"{args.images} images of {args.size} px, {SHARDS} shards, batch {BATCH}:")
    for name, (opened, seconds) in results.items():
        print(f"  {name}: open {opened:.2f} s, one pass {seconds:.2f} s "
              f"({args.images / seconds:,.0f} images/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
