#!/usr/bin/env python3
"""Write a generated archive in the exact CIFAR-10 layout (python or binary).

For tests, benchmarks and trying the workflow where the real archive cannot be
downloaded. Images are learnable: each class has its own colour pattern plus noise,
so a model trained on them beats chance. The layout is the official one:

  python: cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta, readme.html}
          (pickled dicts: b'batch_label', b'labels', b'data' N x 3072 uint8, b'filenames')
  binary: cifar-10-batches-bin/{data_batch_1..5.bin, test_batch.bin, batches.meta.txt,
          readme.html} (records of 1 label byte + 3072 channel-major pixel bytes)

Example:
  make_synthetic_cifar.py --layout python --train 500 --test 100 -o /tmp/cifar.tar.gz
"""

from __future__ import annotations

import argparse
import io
import pickle
import struct
import sys
import tarfile
from pathlib import Path

import numpy as np

from dlscale.core.vocabulary import CIFAR10_CLASSES

CLASSES = CIFAR10_CLASSES


def generate(count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """count x 3072 channel-major uint8 rows and their labels (balanced, shuffled)."""
    rng = np.random.default_rng(seed)
    patterns = np.random.default_rng(1234).integers(0, 256, (10, 3, 4, 4)).astype(np.float32)
    labels = rng.permutation(np.arange(count) % 10).astype(np.uint8)
    base = np.repeat(np.repeat(patterns[labels], 8, axis=2), 8, axis=3)  # N x 3 x 32 x 32
    noise = 40 * rng.standard_normal(base.shape, dtype=np.float32)
    rows = np.clip(base + noise, 0, 255).astype(np.uint8).reshape(count, 3072)
    return rows, labels


class Py2Pickler(pickle._Pickler):
    """Protocol 2 as Python 2 wrote it (the official python-layout files): byte strings
    as BINSTRING opcodes, not the `_codecs.encode` calls Python 3 emits."""

    def save_bytes(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[bytes] = save_bytes


def py2_pickle(obj) -> bytes:
    buffer = io.BytesIO()
    Py2Pickler(buffer, protocol=2).dump(obj)
    return buffer.getvalue()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1244000000  # fixed, so the same flags give the same archive bytes
    tar.addfile(info, io.BytesIO(data))


def write_archive(out: Path, layout: str, train: int, test: int, seed: int = 0) -> Path:
    """Write the archive; `train` images are split over the five data batches."""
    rows, labels = generate(train + test, seed)
    edges = np.linspace(0, train, 6).round().astype(int)
    batches = [(f"data_batch_{i + 1}", edges[i], edges[i + 1]) for i in range(5)]
    batches.append(("test_batch", train, train + test))
    out.parent.mkdir(parents=True, exist_ok=True)
    mode = "w:gz" if out.name.endswith(("gz", "tgz")) else "w"
    with tarfile.open(out, mode) as tar:
        if layout == "python":
            folder = "cifar-10-batches-py"
            for i, (name, lo, hi) in enumerate(batches):
                batch = {b"batch_label": f"batch {i + 1} of 6".encode(),
                         b"labels": labels[lo:hi].tolist(),
                         b"data": rows[lo:hi],
                         b"filenames": [f"img_{j:05d}.png".encode() for j in range(lo, hi)]}
                _add(tar, f"{folder}/{name}", py2_pickle(batch))
            meta = {b"num_cases_per_batch": max(1, edges[1]), b"label_names":
                    [c.encode() for c in CLASSES], b"num_vis": 3072}
            _add(tar, f"{folder}/batches.meta", py2_pickle(meta))
        else:
            folder = "cifar-10-batches-bin"
            for name, lo, hi in batches:
                records = np.concatenate([labels[lo:hi, None], rows[lo:hi]], axis=1)
                _add(tar, f"{folder}/{name}.bin", records.tobytes())
            _add(tar, f"{folder}/batches.meta.txt", ("\n".join(CLASSES) + "\n").encode())
        _add(tar, f"{folder}/readme.html", b"<html>generated CIFAR-10 layout</html>\n")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layout", choices=["python", "binary"], default="python")
    parser.add_argument("--train", type=int, default=50000, help="training images (default: 50000)")
    parser.add_argument("--test", type=int, default=10000, help="test images (default: 10000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--out", type=Path, required=True,
                        help="archive path (.tar.gz or .tar)")
    args = parser.parse_args(argv)
    write_archive(args.out, args.layout, args.train, args.test, args.seed)
    print(f"wrote {args.out}: {args.layout} layout, {args.train} train + {args.test} test images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
