"""Dataset sources: both CIFAR-10 layouts, IDX files, and every broken or hostile input."""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import tarfile
from pathlib import Path

import make_synthetic_cifar
import numpy as np
import pytest

from dlscale.data.datasets import DatasetError
from dlscale.data.sources import md5sum, parse_idx, read_dataset


def expected_images(train: int, test: int, seed: int):
    rows, labels = make_synthetic_cifar.generate(train + test, seed)
    images = rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return images, labels.astype(np.int64)


@pytest.mark.parametrize("layout", ["cifar_python", "cifar_binary"])
def test_both_cifar_layouts_decode_to_the_generated_pixels(layout, request):
    splits = read_dataset("cifar10", request.getfixturevalue(layout))
    images, labels = expected_images(100, 40, seed=1)
    assert splits.images["train"].shape == (100, 32, 32, 3)
    assert splits.images["test"].shape == (40, 32, 32, 3)
    np.testing.assert_array_equal(splits.images["train"], images[:100])
    np.testing.assert_array_equal(splits.labels["test"], labels[100:])
    assert splits.classes[0] == "airplane" and len(splits.classes) == 10


def test_unpacked_python_folder_like_a_prestaged_cluster_copy(cifar_python, tmp_path):
    with tarfile.open(cifar_python) as tar:
        tar.extractall(tmp_path, filter="data")
    from_folder = read_dataset("cifar10", tmp_path / "cifar-10-batches-py")
    from_parent = read_dataset("cifar10", tmp_path)
    from_archive = read_dataset("cifar10", cifar_python)
    np.testing.assert_array_equal(from_folder.images["train"], from_archive.images["train"])
    np.testing.assert_array_equal(from_parent.labels["train"], from_archive.labels["train"])


def test_md5_is_checked_before_reading(cifar_python):
    good = md5sum(cifar_python)
    assert read_dataset("cifar10", cifar_python, md5=good).labels["train"].size == 100
    with pytest.raises(DatasetError,
                       match=r"checksum mismatch .* md5 is [0-9a-f]{32}, expected 0{32}"):
        read_dataset("cifar10", cifar_python, md5="0" * 32)


def test_truncated_archive_is_reported_as_such(cifar_python, tmp_path):
    cut = tmp_path / "cut.tar.gz"
    data = cifar_python.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="truncated or corrupt"):
        read_dataset("cifar10", cut)


def _tar_with(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    return path


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/evil", "cifar-10-batches-py/../../x"])
def test_member_outside_the_extraction_folder_is_refused(name, tmp_path):
    archive = _tar_with(tmp_path / "evil.tar.gz", [(name, b"owned")])
    with pytest.raises(DatasetError, match=f"member '{name}' would land outside"):
        read_dataset("cifar10", archive)
    assert not (tmp_path.parent / "escape.txt").exists()


def test_link_members_are_refused(tmp_path):
    link = tarfile.TarInfo("cifar-10-batches-py/test_batch")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    archive = _tar_with(tmp_path / "link.tar.gz", [link])
    with pytest.raises(DatasetError, match="is a link to '/etc/passwd'"):
        read_dataset("cifar10", archive)


class _Exploit:
    """Pickles to a call of os.system that would create a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


def test_pickle_that_would_execute_code_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({b"data": _Exploit(marker), b"labels": []}, protocol=2)
    members = [(f"cifar-10-batches-py/{n}", payload)
               for n in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]]
    archive = _tar_with(tmp_path / "exploit.tar.gz", members)
    with pytest.raises(DatasetError, match=r"global '(posix|os)\.system' is not allowed"):
        read_dataset("cifar10", archive)
    assert not marker.exists()
    # The same payload does run with a plain pickle.loads: the test would catch a regression.
    pickle.loads(payload)
    assert marker.exists()


def test_archive_that_is_not_cifar_names_both_layouts(tmp_path):
    archive = _tar_with(tmp_path / "other.tar.gz", [("photos/cat.jpg", b"x")])
    with pytest.raises(DatasetError, match="neither cifar-10-batches-py/test_batch"):
        read_dataset("cifar10", archive)


def test_binary_batch_of_wrong_size(tmp_path):
    members = [(f"cifar-10-batches-bin/{n}", b"\x01" * 3072)
               for n in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]]
    archive = _tar_with(tmp_path / "bin.tar.gz", members)
    with pytest.raises(DatasetError, match="3072 bytes, expected a multiple of 3073"):
        read_dataset("cifar10", archive)


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def test_idx_folder_becomes_three_channel_images(tmp_path):
    rng = np.random.default_rng(0)
    x_train, y_train = rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 10, 12)
    x_test, y_test = rng.integers(0, 256, (5, 28, 28)), rng.integers(0, 10, 5)
    for name, array in [("train-images-idx3-ubyte", x_train), ("train-labels-idx1-ubyte", y_train),
                        ("t10k-images-idx3-ubyte", x_test), ("t10k-labels-idx1-ubyte", y_test)]:
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress(_idx(array)))
    splits = read_dataset("fashion_mnist", tmp_path)
    assert splits.images["train"].shape == (12, 28, 28, 3)
    np.testing.assert_array_equal(splits.images["test"][..., 2], x_test)
    np.testing.assert_array_equal(splits.labels["train"], y_train)


def test_truncated_idx_file():
    data = _idx(np.zeros((3, 28, 28)))
    with pytest.raises(DatasetError, match="truncated or corrupt"):
        parse_idx(data[:-10], "train-images-idx3-ubyte")


def test_unknown_dataset_and_missing_source(tmp_path):
    with pytest.raises(DatasetError, match="unknown dataset 'imagenet'"):
        read_dataset("imagenet", tmp_path)
    with pytest.raises(DatasetError, match="does not exist"):
        read_dataset("cifar10", tmp_path / "nope.tar.gz")
