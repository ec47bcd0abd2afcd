"""A dataset prepared for training: read (an archive, Debian's copy, or a folder of
images), limited to a seeded subset if asked, written as TFRecord shards with their
manifest (scripts/prepare_data.py is its command line). Nothing half-written is kept."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from dlscale.core.contract import MANIFEST
from dlscale.core.files import write_json_atomic
from dlscale.core.vocabulary import DEFAULTS
from dlscale.data import imagefolder
from dlscale.data.datasets import FOLDER, DatasetError
from dlscale.data.sources import Splits, read_dataset
from dlscale.data.tfrecords import write_split


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
