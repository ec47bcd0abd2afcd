"""A folder of images in the layout of Keras' image_dataset_from_directory, written by
the real encoders (TensorFlow's PNG and JPEG; BMP by its published header layout), with
a different size for each image, as photos come."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np


def bmp(pixels: np.ndarray) -> bytes:
    """A 24-bit BMP (BITMAPINFOHEADER, rows bottom-up in BGR, padded to 4 bytes)."""
    height, width, _ = pixels.shape
    row = (width * 3 + 3) // 4 * 4
    body = b"".join(pixels[y, :, ::-1].tobytes().ljust(row, b"\0")
                    for y in range(height - 1, -1, -1))
    header = struct.pack("<2sIHHI", b"BM", 54 + len(body), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(body), 2835, 2835,
                       0, 0)
    return header + info + body


def write_folder(root: Path, classes=("cat", "dog", "frog"), per_class: int = 20,
                 split: bool = False) -> Path:
    """`per_class` images per class (PNG, JPEG, BMP in turn); with `split`, under train/
    and test/ (a quarter for testing). Each class has its own mean colour."""
    import tensorflow as tf

    rng = np.random.default_rng(7)
    for label, name in enumerate(classes):
        for i in range(per_class):
            part = ("test" if i % 4 == 0 else "train") if split else ""
            folder = root / part / name
            folder.mkdir(parents=True, exist_ok=True)
            size = (16 + (i * 7) % 24, 20 + (i * 5) % 20)
            base = np.array([80 * label, 255 - 80 * label, 128]) % 256
            pixels = np.clip(base + rng.normal(0, 30, (*size, 3)), 0, 255).astype(np.uint8)
            kind = ("png", "jpg", "bmp")[i % 3]
            data = (bmp(pixels) if kind == "bmp" else
                    tf.io.encode_png(pixels).numpy() if kind == "png" else
                    tf.io.encode_jpeg(pixels).numpy())
            (folder / f"{name}_{i:04d}.{kind.upper() if i % 2 else kind}").write_bytes(data)
    (root / "README.txt").write_text("not an image: passed over\n")
    return root
