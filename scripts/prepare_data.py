#!/usr/bin/env python3
"""Turn a dataset source (CIFAR-10 archive or folder, MNIST/Fashion-MNIST IDX files, or a
folder of your own images with one sub-folder per class) into resized, sharded TFRecords
plus manifest.json.

Example:
  prepare_data.py --dataset cifar10 --source cifar-10-python.tar.gz \\
      --md5 c58f30108f718f92721af3b95e74349a --image-size 128 --shards 16 \\
      --out results/data/cifar10-128px

The output folder gets {split}-NNNNN-of-NNNNN.tfrecord shards (raw uint8 pixels and an
int64 label per record) and manifest.json, written last: a run that fails leaves no
manifest. The same source and flags give byte-identical shards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from dlscale import imagefolder
from dlscale.cli import fail, quiet_tensorflow
from dlscale.files import write_json_atomic
from dlscale.sources import DATASETS, FOLDER, DatasetError, Splits, read_dataset
from dlscale.tfrecords import MANIFEST, write_split
from dlscale.vocabulary import DEFAULTS


def limit(splits: Splits, limit_train: int | None, limit_test: int | None) -> Splits:
    """Keep the first N images of each split (quick runs); N larger than the split is an error."""
    for split, n in (("train", limit_train), ("test", limit_test)):
        if n is None:
            continue
        available = len(splits.labels[split])
        if n > available:
            raise DatasetError(f"limit_{split}={n} but the {split} split has only {available} "
                               "images")
        splits.images[split] = splits.images[split][:n]
        splits.labels[split] = splits.labels[split][:n]
    return splits


def build_manifest(dataset: str, splits: Splits, size: int, source: Path, md5: str | None,
                   shards: dict[str, list[dict]]) -> dict:
    native = splits.images["train"].shape[1:]
    return {
        "dataset": dataset,
        "image_shape": [size, size, 3],
        "native_shape": list(native),
        "dtype": "uint8",
        "resize": ("none: the dataset's own size" if native[:2] == (size, size)
                   else f"bilinear to {size}x{size}, rounded to uint8"),
        "record_format": {"image": "bytes: raw uint8 pixels, height x width x 3",
                          "label": "int64"},
        "classes": list(splits.classes),
        "num_classes": len(splits.classes),
        "source": {"path": str(source.resolve()), "md5_verified": md5 is not None,
                   "files_md5": splits.source_files},
        "splits": {
            split: {
                "count": int(len(splits.labels[split])),
                "per_class": np.bincount(splits.labels[split],
                                         minlength=len(splits.classes)).tolist(),
                "shards": shards[split],
            }
            for split in ("train", "test")
        },
    }


def prepare(dataset: str, source: Path, out_dir: Path, image_size: int, shards: int,
            md5: str | None = None, limit_train: int | None = None,
            limit_test: int | None = None,
            test_fraction: float = DEFAULTS["data"]["test_fraction"]) -> dict:
    """Read, check, resize and shard; the manifest is moved into place last."""
    if dataset == FOLDER:  # decoded and resized as read: only the files kept
        splits = imagefolder.read(source, image_size, test_fraction,
                                  {"train": limit_train, "test": limit_test})
    else:
        splits = limit(read_dataset(dataset, source, md5), limit_train, limit_test)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.parent / f".{out_dir.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        written = {split: write_split(splits.images[split], splits.labels[split], staging,
                                      split, shards, image_size)
                   for split in ("train", "test")}
        manifest = build_manifest(dataset, splits, image_size, source, md5, written)
        out_dir.mkdir(exist_ok=True)
        (out_dir / MANIFEST).unlink(missing_ok=True)
        for old in out_dir.glob("*.tfrecord"):
            old.unlink()
        for split_shards in written.values():
            for shard in split_shards:
                os.replace(staging / shard["file"], out_dir / shard["file"])
        write_json_atomic(out_dir / MANIFEST, manifest)
        return manifest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, choices=sorted(DATASETS))
    parser.add_argument("--source", required=True, type=Path,
                        help="archive, folder or .npz holding the dataset")
    parser.add_argument("--md5", help="expected md5 of the source archive (checked first)")
    parser.add_argument("--image-size", type=int, default=DEFAULTS["data"]["image_size"],
                        help="output height and width in pixels (default: %(default)s)")
    parser.add_argument("--shards", type=int, default=DEFAULTS["data"]["shards"],
                        help="TFRecord files per split; small splits get fewer "
                             "(default: %(default)s)")
    parser.add_argument("--limit-train", type=int, help="keep only the first N training images")
    parser.add_argument("--limit-test", type=int, help="keep only the first N test images")
    parser.add_argument("--test-fraction", type=float,
                        default=DEFAULTS["data"]["test_fraction"],
                        help="folder without train/ and test/: the share of each class's "
                             "images kept for testing (default: %(default)s)")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    args = parser.parse_args(argv)
    for name in ("image_size", "shards", "limit_train", "limit_test"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    quiet_tensorflow()
    try:
        manifest = prepare(args.dataset, args.source, args.out, args.image_size, args.shards,
                           args.md5, args.limit_train, args.limit_test, args.test_fraction)
    except DatasetError as exc:
        fail(str(exc))
    except OSError as exc:  # disk full, no permission ...: nothing half-written is left
        fail(f"cannot write {args.out}: {exc.strerror or exc}; nothing was kept")
    except Exception as exc:  # TFRecordWriter reports a full disk as its own error type
        import tensorflow as tf

        if not isinstance(exc, tf.errors.OpError):
            raise
        fail(f"cannot write {args.out}: {exc.message.strip().splitlines()[0]}; "
             "nothing was kept")
    counts = {s: v["count"] for s, v in manifest["splits"].items()}
    print(f"wrote {args.out}/{MANIFEST}: {manifest['dataset']} "
          f"{'x'.join(map(str, manifest['image_shape']))}, {counts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
