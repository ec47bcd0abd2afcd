"""TFRecord writing (format, determinism, atomicity) and the tf.data reader."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import prepare_data
import pytest

from dlscale.data import preparation
from dlscale.data.datasets import DatasetError
from dlscale.data.tfrecords import ExampleEncoder, make_dataset, shard_bounds, tfrecord_frames


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported by the tests that compare with it, not at collection (every
    pytest worker collects every file)."""
    return pytest.importorskip("tensorflow")


@pytest.mark.parametrize("label", [0, 9, 1000])
def test_hand_encoded_example_is_what_tensorflow_writes(tf, label):
    image = np.random.default_rng(label).integers(0, 256, 12 * 12 * 3, dtype=np.uint8).tobytes()
    ours = ExampleEncoder(len(image)).encode(image, label)
    theirs = tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    })).SerializeToString(deterministic=True)
    assert ours == theirs


def test_own_framing_is_what_tensorflows_writer_writes(tf, tmp_path):
    """Records framed by dlscale (length, CRC-32C, bytes, CRC-32C), of several lengths
    (labels whose varints differ) and of none, are TFRecordWriter's bytes, and tf.data
    reads them back."""
    rng = np.random.default_rng(7)
    encoder = ExampleEncoder(8 * 8 * 3)
    records = [encoder.encode(rng.integers(0, 256, 192, dtype=np.uint8).tobytes(), label)
               for label in (0, 5, 127, 128, 70000, 3)] + [b""]
    path = tmp_path / "theirs.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    assert tfrecord_frames(records) == path.read_bytes()
    (tmp_path / "ours.tfrecord").write_bytes(tfrecord_frames(records))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "ours.tfrecord"))] == records


@pytest.mark.parametrize("size", [128, 33, 20])
def test_long_records_checksums_are_tensorflows(tf, tmp_path, size):
    """Records longer than two checksum segments (tfrecords.SEGMENT) are checked in
    segments combined, four bytes a column: 128 and 33 px images (lengths that four does
    not divide, then one it does, with the label's varint), framed as TensorFlow frames
    them."""
    rng = np.random.default_rng(size)
    encoder = ExampleEncoder(size * size * 3)
    records = [encoder.encode(rng.integers(0, 256, size * size * 3, dtype=np.uint8).tobytes(),
                              label) for label in (1, 200, 70000)]
    path = tmp_path / "theirs.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    assert tfrecord_frames(records) == path.read_bytes()
    assert len({len(r) % 4 for r in records}) > 1


def test_preparing_at_the_datasets_own_size_imports_no_tensorflow(cifar_python, tmp_path):
    """Nothing to resize: the shards are framed by dlscale, TensorFlow is never imported
    (3 to 4 s of CPU, most of a small preparation), and they are the bytes TensorFlow's
    writer wrote (the same preparation in this process, where it is imported)."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    code = ("import sys; from pathlib import Path; from dlscale.data import preparation; "
            f"preparation.prepare('cifar10', Path({str(cifar_python)!r}), "
            f"Path({str(tmp_path / 'own')!r}), 32, 3); print('tensorflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "scripts")})
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr[-2000:]
    preparation.prepare("cifar10", cifar_python, tmp_path / "tf", 32, 3)  # tf imported here
    assert _digests(tmp_path / "own") == _digests(tmp_path / "tf")


def test_a_resizing_preparation_imports_tensorflow_once_before_its_shard_threads(
        cifar_python, tmp_path):
    """The shards are written by threads; where they resize, each imported TensorFlow, for
    the first time side by side in a process where it was not loaded yet. It is loaded
    before the first thread starts, in a fresh process, and the shards are written."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    code = ("import sys, concurrent.futures as cf; from pathlib import Path\n"
            "seen = []\n"
            "class Pool(cf.ThreadPoolExecutor):\n"
            "    def __init__(self, *a, **k):\n"
            "        seen.append('tensorflow' in sys.modules); super().__init__(*a, **k)\n"
            "cf.ThreadPoolExecutor = Pool\n"
            "from dlscale.data import tfrecords, preparation\n"
            "tfrecords.ThreadPoolExecutor = Pool\n"
            f"preparation.prepare('cifar10', Path({str(cifar_python)!r}), "
            f"Path({str(tmp_path / 'out')!r}), 24, 4)\n"
            "print(seen)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT / "scripts")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[True, True]", proc.stdout


def test_shard_bounds_cover_everything_without_empty_shards():
    assert shard_bounds(10, 3) == [(0, 3), (3, 7), (7, 10)]
    assert shard_bounds(2, 16) == [(0, 1), (1, 2)]
    assert sum(b - a for a, b in shard_bounds(50000, 16)) == 50000


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir())}


def test_prepare_writes_manifest_and_identical_bytes_twice(cifar_python, tmp_path):
    first = preparation.prepare("cifar10", cifar_python, tmp_path / "a", 48, 3)
    preparation.prepare("cifar10", cifar_python, tmp_path / "b", 48, 3)
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest == first
    assert manifest["image_shape"] == [48, 48, 3]
    assert manifest["splits"]["train"]["count"] == 100
    assert manifest["splits"]["test"]["count"] == 40
    assert sum(manifest["splits"]["train"]["per_class"]) == 100
    assert [s["file"] for s in manifest["splits"]["test"]["shards"]] == [
        "test-00000-of-00003.tfrecord", "test-00001-of-00003.tfrecord",
        "test-00002-of-00003.tfrecord"]
    assert sum(s["records"] for s in manifest["splits"]["train"]["shards"]) == 100


def test_limits_keep_the_first_images(cifar_python, tmp_path):
    manifest = preparation.prepare("cifar10", cifar_python, tmp_path, 32, 2,
                                    limit_train=30, limit_test=10)
    assert manifest["splits"]["train"]["count"] == 30
    with pytest.raises(DatasetError, match="limit_train=500 but the train split has only 100"):
        preparation.prepare("cifar10", cifar_python, tmp_path / "x", 32, 2, limit_train=500)


def test_failed_preparation_leaves_no_manifest_and_keeps_nothing(cifar_python, tmp_path):
    out = tmp_path / "out"
    preparation.prepare("cifar10", cifar_python, out, 32, 2)
    with pytest.raises(DatasetError, match="checksum mismatch"):
        preparation.prepare("cifar10", cifar_python, out, 32, 2, md5="f" * 32)
    # checksum is checked before anything is touched: the earlier good output is intact
    assert (out / "manifest.json").exists()
    bad = cifar_python.parent / "truncated.tar.gz"
    bad.write_bytes(cifar_python.read_bytes()[:5000])
    with pytest.raises(DatasetError):
        preparation.prepare("cifar10", bad, tmp_path / "bad", 32, 2)
    assert not (tmp_path / "bad" / "manifest.json").exists()
    assert not list(tmp_path.glob(".*partial*"))


def test_cli_reports_errors_without_traceback(cifar_python, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        prepare_data.main(["--dataset", "cifar10", "--source", str(cifar_python),
                           "--md5", "0" * 32, "--out", str(tmp_path)])
    assert exit_info.value.code == 1
    assert "error: checksum mismatch" in capsys.readouterr().err


@pytest.fixture(scope="module")
def prepared(cifar_python, tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared")
    preparation.prepare("cifar10", cifar_python, out, 40, 4)
    return out


def test_reader_returns_uint8_batches_with_the_right_labels(prepared, cifar_python):
    ds = make_dataset(prepared, "test", 16, training=False)
    images, labels = zip(*[(x.numpy(), y.numpy()) for x, y in ds])
    images, labels = np.concatenate(images), np.concatenate(labels)
    assert images.dtype == np.uint8 and images.shape == (40, 40, 40, 3)
    from dlscale.data.sources import read_dataset
    np.testing.assert_array_equal(labels, read_dataset("cifar10", cifar_python).labels["test"])


def test_training_reader_drops_remainder_repeats_and_is_seeded(prepared):
    ds = make_dataset(prepared, "train", 32, training=True, seed=7)
    batches = [y.numpy() for _, y in ds.take(10)]  # 10 x 32 > 100 images: it repeats
    assert all(len(b) == 32 for b in batches)
    again = [y.numpy() for _, y in make_dataset(prepared, "train", 32, training=True,
                                                 seed=7).take(10)]
    assert all((a == b).all() for a, b in zip(batches, again))


def test_reader_splits_files_between_input_pipelines(prepared):
    parts = [np.concatenate([y.numpy() for _, y in make_dataset(
        prepared, "train", 10, training=False, num_shards=2, shard_index=i)]) for i in (0, 1)]
    assert len(parts[0]) + len(parts[1]) == 100


def test_more_input_pipelines_than_files_split_the_records(prepared):
    whole = np.concatenate([y.numpy() for _, y in make_dataset(prepared, "train", 1000,
                                                               training=False)])
    parts = [np.concatenate([y.numpy() for _, y in make_dataset(
        prepared, "train", 1000, training=False, num_shards=8, shard_index=i)]) for i in range(8)]
    assert all(len(p) for p in parts)  # 4 files, 8 readers: every reader gets records
    assert sorted(np.concatenate(parts).tolist()) == sorted(whole.tolist())


@pytest.mark.parametrize("num_shards", [1, 2, 3, 8])
def test_each_readers_share_is_known_from_the_manifest(prepared, num_shards):
    from dlscale.data.tfrecords import load_manifest, shard_records

    manifest = load_manifest(prepared)
    for index in range(num_shards):
        read = sum(len(y) for _, y in make_dataset(prepared, "test", 7, training=False,
                                                  num_shards=num_shards, shard_index=index))
        assert shard_records(manifest, "test", num_shards, index) == read


def pairs(batches):
    """(label, image digest) of every image in (images, labels) batches."""
    return [(int(y), hashlib.md5(x.tobytes()).hexdigest())
            for images, labels in batches for x, y in zip(images.numpy(), labels.numpy())]


def test_a_split_held_in_memory_gives_every_image_once_per_pass_in_a_new_order(prepared):
    files = sorted(pairs(make_dataset(prepared, "train", 1000, training=False)))
    ds = make_dataset(prepared, "train", 25, training=True, seed=3, cache=True)
    read = pairs(ds.take(12))  # 100 images: 3 passes of 4 batches of 25
    passes = [read[i:i + 100] for i in (0, 100, 200)]
    assert all(sorted(p) == files for p in passes)  # each image with its own label
    assert passes[0] != passes[1] != passes[2] and passes[0] != files
    assert pairs(make_dataset(prepared, "train", 25, training=True, seed=3,
                              cache=True).take(12)) == read  # seeded
    assert pairs(make_dataset(prepared, "train", 25, training=True, seed=4,
                              cache=True).take(4)) != read[:100]


def test_held_in_memory_the_pipelines_still_share_the_records(prepared):
    from dlscale.data.tfrecords import load_manifest, split_bytes

    whole = sorted(pairs(make_dataset(prepared, "train", 1000, training=False)))
    for num_shards in (2, 8):  # by file, by record
        parts = [pairs(make_dataset(prepared, "train", 1000, training=False, cache=True,
                                    num_shards=num_shards, shard_index=i))
                 for i in range(num_shards)]
        assert sorted(sum(parts, [])) == whole
        manifest = load_manifest(prepared)
        assert [split_bytes(manifest, "train", num_shards, i) for i in range(num_shards)] == \
            [len(p) * 40 * 40 * 3 for p in parts]


def test_held_in_memory_a_training_pass_drops_the_last_partial_batch(prepared):
    batches = [len(y) for _, y in make_dataset(prepared, "train", 30, training=True,
                                                cache=True).take(6)]
    assert batches == [30] * 6  # 3 full batches of 100 images per pass


@pytest.mark.parametrize("cache", [False, True], ids=["shard reader", "held in memory"])
@pytest.mark.parametrize("num_shards, shard_index", [(1, 0), (8, 3)])
def test_a_resumed_reader_goes_on_with_the_order_an_uninterrupted_one_has(
        prepared, cache, num_shards, shard_index):
    """After k epochs of s steps, a rerun that skips k x s batches sees what a run that was
    never stopped sees from epoch k + 1 on (not epoch 1's order again)."""
    def labels(skip: int, count: int) -> list:
        return [tuple(y.numpy()) for _, y in make_dataset(
            prepared, "train", 3, training=True, seed=5, shuffle_buffer=20, cache=cache,
            num_shards=num_shards, shard_index=shard_index, skip_batches=skip).take(count)]

    steps = 12 if num_shards == 1 else 2  # an epoch of less than one pass, or of about one
    whole = labels(0, 12 * steps)
    for epochs_done in (1, 4, 9):
        assert labels(epochs_done * steps, 12 * steps - epochs_done * steps) == \
            whole[epochs_done * steps:], epochs_done
    assert labels(steps, steps) != whole[:steps]  # the next epoch's order is another
