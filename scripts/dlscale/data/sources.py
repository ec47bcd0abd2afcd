"""Dataset sources: where the study's datasets come from and how to read them safely (what
each dataset is, its files and classes: dlscale.data.datasets).

Every reader returns plain numpy arrays (images as N x H x W x 3 uint8, labels as
int64) and never extracts anything to disk: archives are read member by member after
their member list has been checked, and pickled CIFAR batches go through an
unpickler that admits only what those batches contain.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import math
import os
import pickle
import struct
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlscale.data.datasets import DATASETS, DatasetError, DatasetSpec


@dataclass
class Splits:
    """Decoded dataset: per split, images (N, H, W, 3) uint8 and labels (N,) int64."""

    images: dict[str, np.ndarray]
    labels: dict[str, np.ndarray]
    classes: tuple[str, ...]
    source_files: dict[str, str]  # file name -> md5, for the manifest


_MD5S: dict[tuple, str] = {}  # (path, size, mtime) -> md5: checked once, recorded after


def md5sum(path: str | Path, chunk: int = 1 << 20) -> str:
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    if key not in _MD5S:
        digest = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as handle:
            while block := handle.read(chunk):
                digest.update(block)
        _MD5S[key] = digest.hexdigest()
    return _MD5S[key]


def verify_md5(path: str | Path, expected: str) -> str:
    """Return the file's md5; raise DatasetError naming both sums if it is not `expected`."""
    actual = md5sum(path)
    if actual != expected.lower():
        raise DatasetError(
            f"checksum mismatch for {path}: md5 is {actual}, expected {expected.lower()} "
            "(a corrupt or incomplete download, or the wrong file)")
    return actual


# --- CIFAR-10 -----------------------------------------------------------------------

class _CifarUnpickler(pickle.Unpickler):
    """Admits only the globals a CIFAR-10 python batch needs (a dict of bytes, lists and
    one uint8 ndarray); anything else, e.g. os.system, is refused before it can run."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),  # how Python 3 protocol-2 pickles spell bytes
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed")
        return super().find_class(module, name)


def load_cifar_pickle(data: bytes, member: str) -> dict:
    try:
        batch = _CifarUnpickler(io.BytesIO(data), encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise DatasetError(
            f"refusing to load CIFAR-10 batch '{member}': {exc}; a python-layout batch "
            "holds only a dict of labels, file names and a uint8 array") from exc
    if not isinstance(batch, dict):
        raise DatasetError(f"CIFAR-10 batch '{member}' is a {type(batch).__name__}, "
                           "expected a dict")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in batch.items()}


def _cifar_python_batch(data: bytes, member: str) -> tuple[np.ndarray, np.ndarray]:
    batch = load_cifar_pickle(data, member)
    pixels, labels = batch.get("data"), batch.get("labels")
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8 or pixels.ndim != 2 \
            or pixels.shape[1] != 3072 or labels is None or len(labels) != len(pixels):
        raise DatasetError(
            f"CIFAR-10 batch '{member}' does not hold 'data' as N x 3072 uint8 with N 'labels'")
    return _cifar_images(pixels), _cifar_labels(labels, member)


def _cifar_binary_batch(data: bytes, member: str) -> tuple[np.ndarray, np.ndarray]:
    if len(data) % 3073:
        raise DatasetError(
            f"CIFAR-10 binary batch '{member}' is {len(data)} bytes, expected a multiple of "
            "3073 (1 label byte + 3072 pixel bytes per image)")
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3073)
    return _cifar_images(records[:, 1:]), _cifar_labels(records[:, 0], member)


def _cifar_images(rows: np.ndarray) -> np.ndarray:
    # channel-major rows (R plane, G plane, B plane) -> N x 32 x 32 x 3
    return np.ascontiguousarray(rows.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def _cifar_labels(labels, member: str) -> np.ndarray:
    return check_labels(labels, 10, f"CIFAR-10 batch '{member}'")


def check_labels(labels, classes: int, where: str) -> np.ndarray:
    """Labels as int64 if every one is an integer in 0..classes-1; DatasetError naming the
    first offending value otherwise (no silent conversion of floats, bytes or bools)."""
    values = labels.tolist() if isinstance(labels, np.ndarray) else list(labels)
    array = labels if isinstance(labels, np.ndarray) else np.asarray(values)
    bad = next((v for v in values
                if isinstance(v, bool) or not isinstance(v, (int, np.integer))), None)
    if array.dtype.kind not in "iu" or bad is not None:
        raise DatasetError(f"{where} has label {bad!r} ({type(bad).__name__}): expected "
                           f"integers 0..{classes - 1}")
    array = array.astype(np.int64)
    outside = np.flatnonzero((array < 0) | (array >= classes))
    if outside.size:
        i = int(outside[0])
        raise DatasetError(f"{where} has label {int(array[i])} at index {i}: expected integers "
                           f"0..{classes - 1}")
    return array


CIFAR_LAYOUTS = {
    # layout: (folder inside the archive, train members, test member, batch decoder)
    "python": ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)],
               "test_batch", _cifar_python_batch),
    "binary": ("cifar-10-batches-bin", [f"data_batch_{i}.bin" for i in range(1, 6)],
               "test_batch.bin", _cifar_binary_batch),
}


def check_tar_member(member: tarfile.TarInfo, path: Path) -> None:
    """Refuse archives with members that would land outside the extraction folder
    (absolute paths, '..', links) or that are devices: even though nothing is
    extracted, such an archive is not a dataset and must not be trusted."""
    name = member.name
    parts = Path(name).parts
    if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
        raise DatasetError(
            f"archive {path} is unsafe: member '{name}' would land outside the "
            "extraction folder")
    if member.issym() or member.islnk():
        raise DatasetError(
            f"archive {path} is unsafe: member '{name}' is a link to '{member.linkname}'")
    if not (member.isfile() or member.isdir()):
        raise DatasetError(f"archive {path} is unsafe: member '{name}' is not a regular file")


def _cifar_tar_members(path: Path):
    """Yield (layout, member base name, bytes) for the CIFAR batch files of an archive, in
    one sequential pass (a gzip stream cannot seek back cheaply: listing the members
    first and reading them after decompressed the archive twice). Every member is
    checked, read or not."""
    wanted = {f"{folder}/{m}": (layout, m) for layout, (folder, train, test, _)
              in CIFAR_LAYOUTS.items() for m in [*train, test]}
    try:
        with tarfile.open(path, "r|*") as tar:
            for member in tar:
                check_tar_member(member, path)
                if member.name in wanted and member.isfile():
                    yield *wanted[member.name], tar.extractfile(member).read()
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DatasetError(f"archive {path} is truncated or corrupt: {exc}") from exc


def _cifar_folder_members(path: Path):
    """The same for an unpacked CIFAR-10 folder (either layout)."""
    for layout, (folder, train, test, _) in CIFAR_LAYOUTS.items():
        root = path if (path / test).is_file() else path / folder
        if (root / test).is_file():
            missing = [m for m in train + [test] if not (root / m).is_file()]
            if missing:
                raise DatasetError(f"CIFAR-10 folder {root} lacks {', '.join(missing)}")
            for m in train + [test]:
                yield layout, m, (root / m).read_bytes()
            return
    raise DatasetError(
        f"{path} is not a CIFAR-10 folder: expected 'cifar-10-batches-py' (python layout) "
        "or 'cifar-10-batches-bin' (binary layout) files in it")


def read_cifar10(path: Path) -> Splits:
    """Each batch file is decoded as it is read, so that the archive's bytes are never
    all held at once (the process would keep that memory after: docs/benchmarks.md,
    "Data preparation")."""
    members = _cifar_folder_members(path) if path.is_dir() else _cifar_tar_members(path)
    decoded: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    for layout, member, data in members:
        decoded[layout, member] = CIFAR_LAYOUTS[layout][3](data, member)
        del data
    for layout, (folder, train_members, test_member, _) in CIFAR_LAYOUTS.items():
        if (layout, test_member) in decoded:
            missing = [m for m in train_members if (layout, m) not in decoded]
            if missing:
                raise DatasetError(f"archive {path} lacks {folder}/{', '.join(missing)}")
            train = [decoded.pop((layout, m)) for m in train_members]
            test_images, test_labels = decoded[layout, test_member]
            return Splits(
                images={"train": np.concatenate([t[0] for t in train]), "test": test_images},
                labels={"train": np.concatenate([t[1] for t in train]), "test": test_labels},
                classes=DATASETS["cifar10"].classes,
                source_files=_source_md5s(path),
            )
    raise DatasetError(
        f"archive {path} is not CIFAR-10: it has neither cifar-10-batches-py/test_batch "
        "(python layout) nor cifar-10-batches-bin/test_batch.bin (binary layout)")


# --- MNIST / Fashion-MNIST ----------------------------------------------------------

def parse_idx(data: bytes, name: str) -> np.ndarray:
    """Decode an IDX file (uint8 payload, as MNIST ships) into an ndarray."""
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise DatasetError(f"{name} is not an IDX file of unsigned bytes")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetError(f"{name} is truncated (header cut)")
    shape = struct.unpack(f">{ndim}I", data[4:header])
    size = math.prod(shape)  # Python integers: a corrupt header cannot overflow
    if len(data) != header + size:
        raise DatasetError(
            f"{name} is truncated or corrupt: {len(data) - header} payload bytes, "
            f"expected {size} for shape {shape}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def _read_maybe_gz(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    except (OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"{path} is truncated or corrupt: {exc}") from exc


def read_idx_dataset(path: Path, spec: DatasetSpec) -> Splits:
    if path.is_file() and path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in ("x_train", "y_train", "x_test", "y_test")}
        except (KeyError, ValueError, OSError) as exc:
            raise DatasetError(f"{path} is not a Keras MNIST .npz "
                               f"(x_train, y_train, x_test, y_test): {exc}") from exc
        images = {"train": arrays["x_train"], "test": arrays["x_test"]}
        labels = {"train": arrays["y_train"], "test": arrays["y_test"]}
    elif path.is_dir():
        found = {}
        for split, prefix in (("train", "train"), ("test", "t10k")):
            for kind, tag in (("images", "idx3"), ("labels", "idx1")):
                stem = f"{prefix}-{kind}-{tag}-ubyte"
                for candidate in (path / f"{stem}.gz", path / stem):
                    if candidate.is_file():
                        found[(split, kind)] = parse_idx(_read_maybe_gz(candidate), candidate.name)
                        break
                else:
                    raise DatasetError(f"{path} has no {stem}.gz (nor {stem}): "
                                       f"expected the four {spec.name} IDX files")
        images = {s: found[(s, "images")] for s in ("train", "test")}
        labels = {s: found[(s, "labels")] for s in ("train", "test")}
    else:
        raise DatasetError(f"{path} is neither a folder of IDX files nor a .npz file")
    for split in images:
        if images[split].ndim != 3 or len(images[split]) != len(labels[split]):
            raise DatasetError(f"{path}: {split} images {images[split].shape} do not match "
                               f"labels {labels[split].shape}")
        # gray -> 3 channels, so every model and the reader see one image layout
        images[split] = np.repeat(images[split][..., None], 3, axis=-1)
        labels[split] = check_labels(labels[split], len(spec.classes), f"{path} ({split} labels)")
    return Splits(images, labels, spec.classes, _source_md5s(path))


def _source_md5s(path: Path) -> dict[str, str]:
    if path.is_file():
        return {path.name: md5sum(path)}
    return {str(p.relative_to(path)): md5sum(p) for p in sorted(path.rglob("*")) if p.is_file()}


def read_dataset(dataset: str, path: str | Path, md5: str | None = None) -> Splits:
    """Read a local dataset source (archive, folder or .npz), checking `md5` first if given."""
    if dataset not in DATASETS:
        raise DatasetError(f"unknown dataset '{dataset}': expected one of {sorted(DATASETS)}")
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"dataset source {path} does not exist")
    if md5:
        if not path.is_file():
            raise DatasetError(f"md5 {md5} was given but {path} is a folder: "
                               "a checksum applies to an archive file")
        verify_md5(path, md5)
    if dataset == "cifar10":
        return read_cifar10(path)
    return read_idx_dataset(path, DATASETS[dataset])
