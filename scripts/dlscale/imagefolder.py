"""Your own images: data.dataset `folder`, a folder of one sub-folder per class.

The layout of Keras' `image_dataset_from_directory`:

    source/cat/0001.jpg  source/dog/0002.png ...             (split by data.test_fraction)
    source/train/cat/...  source/test/cat/...                 (split as given)

Images are JPEG, PNG, BMP or GIF (by suffix, any case; the first frame of a GIF); other
files are passed over. Classes are the sub-folders' names in sorted order, label = index.
Without train/ and test/, each class keeps its first files in a seeded shuffle for the
test split (round(count x test_fraction), at least one), so the split is the same on
every machine. `scan` only lists files (planning uses it to count images); `read`
decodes them with TensorFlow and resizes each to image_size (bilinear, rounded to
uint8), since the files' sizes differ. A file that does not decode is named in the
error, and nothing is written (prepare_data.py writes its output only when whole).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlscale.sources import DatasetError, Splits

SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
SPLIT_SEED = 20261123  # the test split of a folder without train/ and test/


@dataclass
class Listing:
    classes: tuple[str, ...]
    files: dict[str, list[tuple[Path, int]]]  # split -> (file, label)


def _class_files(folder: Path) -> dict[str, list[Path]]:
    classes = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    return {c.name: sorted(f for f in c.rglob("*")
                           if f.is_file() and f.suffix.lower() in SUFFIXES) for c in classes}


def scan(source: str | Path, test_fraction: float) -> Listing:
    """The classes and the files of each split; DatasetError naming the folder when the
    layout is not one sub-folder per class with images in each."""
    source = Path(source)
    if not source.is_dir():
        raise DatasetError(f"{source} is not a folder: dataset folder expects a folder of "
                           "one sub-folder per class")
    if (source / "train").is_dir() and (source / "test").is_dir():
        split = {name: _class_files(source / name) for name in ("train", "test")}
        if sorted(split["train"]) != sorted(split["test"]):
            raise DatasetError(f"{source}: train/ has classes {sorted(split['train'])} but "
                               f"test/ has {sorted(split['test'])}: expected the same")
        classes = tuple(split["train"])
        files = {name: [(f, i) for i, c in enumerate(classes) for f in split[name][c]]
                 for name in ("train", "test")}
    else:
        per_class = _class_files(source)
        classes = tuple(per_class)
        files = {"train": [], "test": []}
        rng = random.Random(SPLIT_SEED)
        for label, name in enumerate(classes):
            chosen = list(per_class[name])
            rng.shuffle(chosen)
            held = max(1, round(len(chosen) * test_fraction)) if len(chosen) > 1 else 0
            files["test"] += [(f, label) for f in sorted(chosen[:held])]
            files["train"] += [(f, label) for f in sorted(chosen[held:])]
    if len(classes) < 2:
        raise DatasetError(f"{source}: found {len(classes)} class folder(s) "
                           f"{list(classes)}: expected one sub-folder per class, at least two")
    empty = [c for i, c in enumerate(classes)
             if not any(label == i for _, label in files["train"])]
    if empty:
        raise DatasetError(f"{source}: class folder '{empty[0]}' holds no training image "
                           f"({', '.join(SUFFIXES)})")
    if not files["test"]:
        raise DatasetError(f"{source}: no test image: add a test/ folder or raise "
                           "data.test_fraction")
    return Listing(classes, files)


def read(source: str | Path, image_size: int, test_fraction: float,
         limits: dict[str, int | None] | None = None) -> Splits:
    """Decoded and resized images of every split (the first `limits[split]` files)."""
    import tensorflow as tf

    source = Path(source)
    listing = scan(source, test_fraction)
    images, labels, digests = {}, {}, {}
    for split, files in listing.files.items():
        files = files[:(limits or {}).get(split) or len(files)]
        out = np.empty((len(files), image_size, image_size, 3), np.uint8)
        for i, (path, _) in enumerate(files):
            data = path.read_bytes()
            digests[str(path.relative_to(source))] = hashlib.md5(data).hexdigest()
            try:
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
            except (tf.errors.OpError, OSError) as exc:
                message = getattr(exc, "message", None) or str(exc)
                raise DatasetError(f"{path}: cannot be decoded as an image "
                                   f"({message.strip().splitlines()[0][:160]})") from None
            resized = tf.image.resize(image, (image_size, image_size), method="bilinear")
            out[i] = np.clip(np.round(resized.numpy()), 0, 255).astype(np.uint8)
        images[split] = out
        labels[split] = np.array([label for _, label in files], np.int64)
    return Splits(images, labels, listing.classes, digests)
