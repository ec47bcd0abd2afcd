#!/usr/bin/env python3
"""The shard reader's time per pass over the training images, no model: 20,000 random
64 px images in 16 shards, batch 64, shuffle buffer 4096, three passes after the first
batch, two rounds; with --against, the same for an older dlscale/data/tfrecords.py (e.g.
`git show 05fc054:scripts/dlscale/data/tfrecords.py > /tmp/old.py`), taking turns.

  python bench/bench_reader_passes.py [--work /tmp/dlscale-bench-passes] [--against FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from dlscale.core.contract import MANIFEST  # noqa: E402

IMAGES, SIZE, BATCH = 20_000, 64, 64


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-passes"))
    parser.add_argument("--against", type=Path, help="an older tfrecords.py to compare")
    args = parser.parse_args()
    import numpy as np

    from dlscale.data import tfrecords

    readers = {"this": tfrecords}
    if args.against:
        spec = importlib.util.spec_from_file_location("older", args.against)
        readers["older"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(readers["older"])
    if not (args.work / MANIFEST).exists():
        args.work.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        images = rng.integers(0, 255, (IMAGES, SIZE, SIZE, 3), dtype=np.uint8)
        labels = rng.integers(0, 10, IMAGES)
        splits = {"train": (images, labels), "test": (images[:100], labels[:100])}
        json.dump({"image_shape": [SIZE, SIZE, 3], "splits": {
            s: {"count": len(y), "shards": tfrecords.write_split(x, y, args.work, s, 16, SIZE)}
            for s, (x, y) in splits.items()}}, open(args.work / MANIFEST, "w"))
    steps = IMAGES // BATCH
    for round_ in (1, 2):
        for name, module in readers.items():
            batches = iter(module.make_dataset(args.work, "train", BATCH, training=True,
                                               seed=1, shuffle_buffer=4096))
            next(batches)
            began = time.perf_counter()
            for _ in range(3 * steps):
                next(batches)
            print(f"round {round_}, {name}: {(time.perf_counter() - began) / 3:.2f} s per "
                  f"pass of {IMAGES} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
