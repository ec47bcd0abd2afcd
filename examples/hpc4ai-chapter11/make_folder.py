"""Make a tiny image folder in the layout chapter 11's train.py reads (DatasetFolder: ROOT/
train/CLASS/*.jpeg and ROOT/val/CLASS/*.jpeg), random pictures, no download.

Usage: python make_folder.py ROOT [--classes 4] [--train 64] [--val 16] [--size 48]
"""
import argparse
from pathlib import Path

import numpy as np
from PIL import Image


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--train", type=int, default=64, help="images a class")
    parser.add_argument("--val", type=int, default=16, help="images a class")
    parser.add_argument("--size", type=int, default=48)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for split, count in (("train", args.train), ("val", args.val)):
        for c in range(args.classes):
            folder = Path(args.root) / split / f"class{c}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (args.size, args.size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.jpeg")


if __name__ == "__main__":
    main()
