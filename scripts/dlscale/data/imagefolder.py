"""Your own images: data.dataset `folder`, a folder of one sub-folder per class.

The layout of Keras' `image_dataset_from_directory`:

    source/cat/0001.jpg  source/dog/0002.png ...             (split by data.test_fraction)
    source/train/cat/...  source/test/cat/...                 (split as given)
    source/train/cat/...  source/val/cat/...                  (ImageNet's layout: val/ or
                                                               validation/ is the test split)

Images are JPEG, PNG, BMP or GIF (by suffix, any case; the first frame of a GIF); other
files are passed over. Classes are the sub-folders' names in sorted order, label = index.
Without train/ and test/, each class keeps its first files in a seeded shuffle for the
test split (round(count x test_fraction), at least one), so the split is the same on
every machine. data.limit_train and limit_test take a seeded subset balanced over the
classes (every class keeps at least one image of each split, or planning says which
does not). The training files are listed in a seeded shuffle, so that every shard holds
every class; the test files in class order.

`scan` only lists files (planning uses it to count images and to see whether the folder
changed since it was prepared: `Listing.digest`); `read` decodes them with TensorFlow and
resizes each to image_size (bilinear, rounded to uint8), since the files' sizes differ. A
file that does not decode is named in the error, and nothing is written (prepare_data.py
writes its output only when whole).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlscale.data.datasets import DatasetError
from dlscale.data.sources import Splits

SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
SPLIT_SEED = 20261123  # the test split of a folder without train/ and test/
SUBSET_SEED = 20261125  # data.limit_*: which images a balanced subset keeps
TEST_FOLDERS = ("test", "val", "validation")  # beside train/: the test split, first found


@dataclass
class Listing:
    classes: tuple[str, ...]
    files: dict[str, list[tuple[str, int]]]  # split -> (file path, label), limits applied
    available: dict[str, int]  # split -> images before data.limit_*
    digest: str  # of every image's path, size and modification time: changes with an edit
    notes: list[str] = field(default_factory=list)  # one line each, for planning to show
    stats: dict[str, tuple[int, int]] = field(default_factory=dict)  # path: size, mtime_ns


def _images(folder: Path) -> list[tuple[str, int, int]]:
    """(path below `folder`, size, mtime_ns) of every image at any depth, sorted; hidden
    files and folders are passed over. One stat per file (os.scandir). A folder linked
    in (a symbolic link) is followed once; a link back to a folder already listed (a loop),
    or one that leads nowhere, is a DatasetError naming it."""
    found, pending = [], [(folder, "")]
    seen = {_identity(os.stat(folder))}
    while pending:
        path, prefix = pending.pop()
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_symlink() and not os.path.exists(entry.path):  # loop or missing
                    raise DatasetError(
                        f"{entry.path} is a symbolic link that leads nowhere (to "
                        f"{os.readlink(entry.path)}: a loop of links, or a missing target): "
                        "expected an image or a folder of them")
                if entry.is_dir():
                    if entry.is_symlink():
                        here = _identity(entry.stat())
                        if here in seen:
                            raise DatasetError(
                                f"{entry.path} is a symbolic link to "
                                f"{os.path.realpath(entry.path)}, a folder listed already (a "
                                "loop, or a second link to it): expected each folder once")
                        seen.add(here)
                    pending.append((Path(entry.path), f"{prefix}{entry.name}/"))
                elif os.path.splitext(entry.name)[1].lower() in SUFFIXES and entry.is_file():
                    stat = entry.stat()
                    found.append((prefix + entry.name, stat.st_size, stat.st_mtime_ns))
    return sorted(found)


def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_dev, stat.st_ino


def _folders(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))


def _classes(root: Path, where: str) -> dict[str, list[tuple[str, int, int]]]:
    """Class name -> its images (paths below `root`), refusing a level of split or group
    folders where the classes are expected."""
    per_class = {}
    for name in _folders(root):  # keyed by the NFC form: macOS writes names in NFD
        per_class[unicodedata.normalize("NFC", name)] = [
            (f"{name}/{rel}", size, mtime) for rel, size, mtime in _images(root / name)]
    depth = {name: [rel.count("/") for rel, _, _ in files] for name, files in per_class.items()}
    nested = {name: {rel.split("/")[1] for (rel, _, _), d in zip(files, depth[name]) if d > 1}
              for name, files in per_class.items()}
    direct = {name for name in per_class if 1 in depth[name]}
    inner = [sub for sub in nested.values() if sub]
    if len(per_class) > 1 and not direct and len(inner) == len(per_class) and all(
            len(sub) > 1 and sub == inner[0] for sub in inner):
        names = sorted(inner[0])
        raise DatasetError(
            f"{where}: the class folders {', '.join(sorted(per_class))} each hold the same "
            f"folders ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''}) rather "
            "than images: expected one sub-folder per class; point data.source at the folder "
            "whose sub-folders are the classes")
    return per_class


def shown(names) -> str:
    """Class names as a list where each is told apart: escaped (ascii) beyond ASCII."""
    return "[" + ", ".join(ascii(n) for n in sorted(names)) + "]"


def _split_folders(source: Path) -> tuple[str, str] | None:
    """(train folder, test folder) names when `source` holds the split as folders."""
    top = set(_folders(source))
    test = next((name for name in TEST_FOLDERS if name in top), None)
    if "train" in top and test:
        return "train", test
    if "train" in top or test:
        given = "train" if "train" in top else test
        raise DatasetError(
            f"{source} holds {given}/ but no "
            f"{'test/, val/ or validation/' if given == 'train' else 'train/'} beside it: "
            f"add it, or point data.source at {source / given} (its test images are then "
            "taken from each class by data.test_fraction)")
    return None


def _subset(files: list[tuple[str, int]], n: int, classes: tuple[str, ...], role: str,
            ) -> list[tuple[str, int]]:
    """`n` of `files`, as many of each class as it can give (a seeded choice)."""
    rng = random.Random(SUBSET_SEED)
    pools = [[f for f in files if f[1] == label] for label in range(len(classes))]
    for pool in pools:
        rng.shuffle(pool)
    if n < len(classes):
        raise DatasetError(f"data.limit_{role} is {n}, which leaves class '{classes[n]}' "
                           f"without a {'training' if role == 'train' else 'test'} image: "
                           f"expected at least {len(classes)} (one per class)")
    chosen, depth = [], 0
    while len(chosen) < n:
        for pool in pools:
            if depth < len(pool) and len(chosen) < n:
                chosen.append(pool[depth])
        depth += 1
    return sorted(chosen, key=lambda f: (f[1], f[0]))


def _enough(classes: tuple[str, ...], source: Path) -> tuple[str, ...]:
    if len(classes) < 2:
        raise DatasetError(f"{source}: found {len(classes)} class folder(s) "
                           f"{list(classes)}: expected one sub-folder per class, at least two")
    return classes


def scan(source: str | Path, test_fraction: float,
         limits: dict[str, int | None] | None = None) -> Listing:
    """The classes and the files of each split; DatasetError naming the folder (or the
    class, or the limit) when the layout is not one sub-folder per class with images of
    both splits in each."""
    source = Path(source)
    if not source.is_dir():
        raise DatasetError(f"{source} is not a folder: dataset folder expects a folder of "
                           "one sub-folder per class")
    notes, digest, stats = [], hashlib.sha256(), {}
    split_folders = _split_folders(source)
    for folder in [source, *(source / name for name in split_folders or ())]:
        loose = sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")
                       and p.suffix.lower() in SUFFIXES and p.is_file())
        if loose:  # a class is a folder: these have none
            notes.append(f"data.source: {len(loose)} image(s) directly in {folder} (e.g. "
                         f"{loose[0]}) are in no class folder and are left out")
    if split_folders:
        train, test = split_folders
        split = {name: _classes(source / name, f"{source / name}") for name in split_folders}
        if sorted(split[train]) != sorted(split[test]):
            raise DatasetError(f"{source}: {train}/ has classes {shown(split[train])} but "
                               f"{test}/ has {shown(split[test])}: expected the same")
        if test != "test":
            notes.append(f"data.source {source}: {train}/ is the training split and {test}/ "
                         "the test split")
        classes = _enough(tuple(split[train]), source)
        files = {"train": [], "test": []}
        for role, name in (("train", train), ("test", test)):
            for label, c in enumerate(classes):
                for rel, size, mtime in split[name][c]:
                    files[role].append((f"{name}/{rel}", label))
                    digest.update(f"{name}/{rel}\t{size}\t{mtime}\n".encode())
                    stats[f"{name}/{rel}"] = (size, mtime)
    else:
        per_class = _classes(source, str(source))
        classes = _enough(tuple(per_class), source)
        files = {"train": [], "test": []}
        rng = random.Random(SPLIT_SEED)
        for label, name in enumerate(classes):
            for rel, size, mtime in per_class[name]:
                digest.update(f"{rel}\t{size}\t{mtime}\n".encode())
                stats[rel] = (size, mtime)
            chosen = [rel for rel, _, _ in per_class[name]]
            if len(chosen) == 1:
                raise DatasetError(f"{source}: class folder '{name}' holds 1 image: expected "
                                   "at least 2, one to train on and one to test on")
            rng.shuffle(chosen)
            held = max(1, round(len(chosen) * test_fraction)) if len(chosen) > 1 else 0
            files["test"] += [(f, label) for f in sorted(chosen[:held])]
            files["train"] += [(f, label) for f in sorted(chosen[held:])]
    for role in ("train", "test"):
        have = {label for _, label in files[role]}
        if missing := [c for i, c in enumerate(classes) if i not in have]:
            raise DatasetError(f"{source}: class folder '{missing[0]}' holds no "
                               f"{'training' if role == 'train' else 'test'} image "
                               f"({', '.join(SUFFIXES)})")
    available = {role: len(files[role]) for role in files}
    for role, n in (limits or {}).items():
        if n is None:
            continue
        if n > available[role]:
            raise DatasetError(f"data.limit_{role} is {n} but the folder has "
                               f"{available[role]} {role} images")
        files[role] = _subset(files[role], n, classes, role)
    # the training images in a seeded shuffle: consecutive records, hence every shard,
    # hold every class (the reader shuffles within its buffer only)
    random.Random(SPLIT_SEED).shuffle(files["train"])
    root = str(source)
    listed = {role: [(os.path.join(root, rel), label) for rel, label in files[role]]
              for role in files}
    return Listing(classes, listed, available, digest.hexdigest(), notes, stats)


def content_digest(source: Path, stats: dict[str, tuple[int, int]],
                   cache: Path) -> tuple[str, dict[str, list[str]]]:
    """A digest of every image's path and bytes (md5), and what changed since `cache` was
    written: {added, removed, edited}. Only the images whose size or modification time
    differ from the cache's record are read, so a folder listed before costs its stats; a
    touched image, or a copy without times, whose bytes are the same changes nothing."""
    try:
        known = json.loads(cache.read_text())["files"]
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError, KeyError, TypeError):
        known = {}
    files, changes = {}, {"added": [], "removed": sorted(set(known) - set(stats)),
                          "edited": []}
    for rel, (size, mtime) in sorted(stats.items()):
        old = known.get(rel)
        if isinstance(old, list) and len(old) == 3 and old[:2] == [size, mtime]:
            files[rel] = old
            continue
        md5 = hashlib.md5((source / rel).read_bytes()).hexdigest()
        files[rel] = [size, mtime, md5]
        if not isinstance(old, list) or len(old) != 3:
            changes["added"].append(rel)
        elif old[2] != md5:
            changes["edited"].append(rel)
    if files != known:
        from dlscale.core.files import write_json_atomic

        cache.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(cache, {"source": str(source), "files": files})
    digest = hashlib.sha256("".join(f"{rel}\t{v[2]}\n" for rel, v in files.items()).encode())
    return digest.hexdigest(), changes


def decode_reason(exc: BaseException) -> str:
    """The image decoder's own reason, without TensorFlow's wrapping ('{{function_node
    __wrapped__DecodeImage_device_/job:localhost/...}} ... [Op:DecodeImage]')."""
    message = (getattr(exc, "message", None) or str(exc)).strip()
    message = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", message)
    message = re.sub(r"\s*\[Op:\w+\]\s*$", "", message.splitlines()[0] if message else "")
    return message or type(exc).__name__


def read(source: str | Path, image_size: int, test_fraction: float,
         limits: dict[str, int | None] | None = None) -> Splits:
    """Decoded and resized images of every split (`limits` as in `scan`)."""
    import tensorflow as tf

    source = Path(source)
    listing = scan(source, test_fraction, limits)
    images, labels, digests = {}, {}, {}
    for split, files in listing.files.items():
        out = np.empty((len(files), image_size, image_size, 3), np.uint8)
        for i, (name, _) in enumerate(files):
            path = Path(name)
            data = path.read_bytes()
            digests[str(path.relative_to(source))] = hashlib.md5(data).hexdigest()
            try:
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
            except (tf.errors.OpError, OSError) as exc:
                raise DatasetError(f"{path}: cannot be decoded as an image "
                                   f"({decode_reason(exc)})") from None
            resized = tf.image.resize(image, (image_size, image_size), method="bilinear")
            out[i] = np.clip(np.round(resized.numpy()), 0, 255).astype(np.uint8)
        images[split] = out
        labels[split] = np.array([label for _, label in files], np.int64)
    return Splits(images, labels, listing.classes, digests)
