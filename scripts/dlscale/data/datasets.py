"""The datasets dlscale knows: their names, classes and shapes, their official files and
where a copy may already be. What planning needs of a dataset, with nothing imported
that reading one needs (numpy: dlscale.data.sources reads them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dlscale.core.vocabulary import CIFAR10_CLASSES


class DatasetError(Exception):
    """A dataset source is missing, corrupt or hostile; the message says which and why."""


@dataclass(frozen=True)
class RemoteFile:
    name: str
    url: str
    md5: str


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    classes: tuple[str, ...]
    native_shape: tuple[int, int, int]
    files: tuple[RemoteFile, ...]  # the official download, one or more files
    train_images: int  # in the official files: what planning checks batches against
    cache_candidates: tuple[str, ...] = field(default=())  # checked by `source: auto`


DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")  # dataset-fashion-mnist
_FASHION_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_MNIST_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_IDX_NAMES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)

DATASETS: dict[str, DatasetSpec] = {
    "cifar10": DatasetSpec(
        name="cifar10",
        classes=CIFAR10_CLASSES,
        native_shape=(32, 32, 3),
        train_images=50000,
        files=(RemoteFile("cifar-10-python.tar.gz",
                          "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                          "c58f30108f718f92721af3b95e74349a"),),
        cache_candidates=("~/.keras/datasets/cifar-10-batches-py",
                          "~/.keras/datasets/cifar-10-batches-py.tar.gz",
                          "~/.keras/datasets/cifar-10-python.tar.gz"),
    ),
    "fashion_mnist": DatasetSpec(
        name="fashion_mnist",
        classes=("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                 "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"),
        native_shape=(28, 28, 3),
        train_images=60000,
        files=tuple(RemoteFile(n, _FASHION_URL + n, m) for n, m in zip(_IDX_NAMES, (
            "8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
            "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310"))),
        cache_candidates=("~/.keras/datasets/fashion-mnist", str(DEBIAN_FASHION_MNIST)),
    ),
    "mnist": DatasetSpec(
        name="mnist",
        classes=tuple(str(d) for d in range(10)),
        native_shape=(28, 28, 3),
        train_images=60000,
        files=tuple(RemoteFile(n, _MNIST_URL + n, m) for n, m in zip(_IDX_NAMES, (
            "f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
            "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c"))),
        cache_candidates=("~/.keras/datasets/mnist.npz",),
    ),
    # your own images (dlscale.data.imagefolder): classes, size and count come from the folder
    "folder": DatasetSpec(name="folder", classes=(), native_shape=(0, 0, 3), files=(),
                          train_images=0),
}
FOLDER = "folder"


def find_cached(spec: DatasetSpec) -> Path | None:
    """The first already-present copy of a dataset (Keras cache, Debian package), if any."""
    for candidate in spec.cache_candidates:
        path = Path(candidate).expanduser()
        if path.is_file() or (path.is_dir() and any(path.iterdir())):
            return path
    return None
