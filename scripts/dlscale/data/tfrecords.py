"""TFRecord shards of raw uint8 images: the writer used by preparation and the
tf.data reader used by training.

A record is a `tf.train.Example` with `image` (bytes: H*W*3 raw uint8) and `label`
(int64). The writer encodes it by hand (the bytes are the same protobuf wire format
TensorFlow parses; a unit test checks this against `tf.train.Example`) because
building one protobuf object per image from Python is the slowest part of
preparation. The dataset description lives in `manifest.json` beside the shards.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import numpy as np

from dlscale.core.contract import MANIFEST
from dlscale.core.vocabulary import SHUFFLE_BUFFER

# records parsed at once when a split is read into memory: its bytes are what that costs
# beyond the images' own
PARSE_BATCH = 1024
# records framed at once by dlscale's writer: its checksums run over all of them in each
# numpy call (crc32c_rows), so more records at once cost fewer calls
FRAMED_AT_ONCE = 1024
# the readers interleave this many files at a time, this many records from each in turn
# (dlscale.data.shardreader reads in the same order)
INTERLEAVE_CYCLE = 4
INTERLEAVE_BLOCK = 16
# splitmix64's constants (Steele, Lea and Flood, 2014): pass_order's hash
GOLDEN, MIX1, MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


class ExampleEncoder:
    """Serialises (image, label) as a tf.train.Example for one fixed image size."""

    def __init__(self, image_bytes: int):
        self.image_bytes = image_bytes
        bytes_list_len = 1 + len(_varint(image_bytes)) + image_bytes
        feature_len = 1 + len(_varint(bytes_list_len)) + bytes_list_len
        key = _field(1, b"image")
        entry_len = len(key) + 1 + len(_varint(feature_len)) + feature_len
        # Everything before the pixels is the same for every image of this size.
        self.image_entry_head = (
            _varint(1 << 3 | 2) + _varint(entry_len)          # Features.feature map entry
            + key
            + _varint(2 << 3 | 2) + _varint(feature_len)      # value: Feature
            + _varint(1 << 3 | 2) + _varint(bytes_list_len)   # Feature.bytes_list
            + _varint(1 << 3 | 2) + _varint(image_bytes))     # BytesList.value
        self._labels: dict[int, bytes] = {}

    def label_entry(self, label: int) -> bytes:
        if label not in self._labels:
            int64_list = _field(1, _varint(label))            # packed Int64List.value
            feature = _field(3, int64_list)                   # Feature.int64_list
            self._labels[label] = _field(1, _field(1, b"label") + _field(2, feature))
        return self._labels[label]

    def encode(self, image: bytes, label: int) -> bytes:
        features = self.image_entry_head + image + self.label_entry(label)
        return _varint(1 << 3 | 2) + _varint(len(features)) + features


def shard_name(split: str, index: int, total: int) -> str:
    return f"{split}-{index:05d}-of-{total:05d}.tfrecord"


def shard_bounds(count: int, shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, stop) ranges of near-equal size; never an empty shard."""
    shards = max(1, min(shards, count))
    edges = np.linspace(0, count, shards + 1).round().astype(int)
    return list(zip(edges[:-1].tolist(), edges[1:].tolist()))


def resize_batch(images: np.ndarray, size: int) -> np.ndarray:
    """Bilinear resize of N x h x w x 3 uint8 to N x size x size x 3 uint8 (as the
    study's `tf.image.resize`, rounded back to bytes so shards stay compact)."""
    if images.shape[1:3] == (size, size):
        return images
    import tensorflow as tf

    resized = tf.image.resize(tf.convert_to_tensor(images), (size, size), method="bilinear")
    # bilinear weights are convex, so values stay in [0, 255]: +0.5 and truncation rounds
    return tf.cast(resized + 0.5, tf.uint8).numpy()


@cache
def _crc32c_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1)
    return table.astype(np.uint32)


def _columns(rows: np.ndarray, crc: np.ndarray) -> np.ndarray:
    """The CRC register after each row's bytes, all rows at once: four bytes a column
    where the rows' length allows (two 65,536-entry tables), else one."""
    if rows.shape[1] % 4 == 0 and rows.shape[1]:
        low, high = _word_tables()
        words = np.ascontiguousarray(rows).view("<u4")
        for column in np.ascontiguousarray(words.T):
            crc = crc ^ column
            crc = low[crc & 0xFFFF] ^ high[crc >> 16]
        return crc
    table = _crc32c_table()
    for column in np.ascontiguousarray(rows.T):
        crc = table[(crc ^ column) & 0xFF] ^ (crc >> 8)
    return crc


@cache
def _word_tables() -> tuple[np.ndarray, np.ndarray]:
    """The register's low and high 16 bits each advanced over four zero bytes: their
    xor is the register advanced (it is linear in its bits), after the word's xor."""
    values = np.arange(65536, dtype=np.uint32)
    zeros = np.zeros((65536, 1), np.uint8)
    low, high = values, values << np.uint32(16)
    for _ in range(4):
        low, high = (_columns(zeros, v) for v in (low, high))
    return low, high


def _apply(operator: np.ndarray, register: np.ndarray) -> np.ndarray:
    """A linear map of the register (32 columns over GF(2)) applied to each value."""
    out = np.zeros_like(register)
    for bit in range(32):
        out ^= np.where((register >> np.uint32(bit)) & np.uint32(1), operator[bit],
                        np.uint32(0))
    return out


@cache
def _zeros(count: int) -> np.ndarray:
    """The operator that advances the CRC register over `count` zero bytes, by squaring
    the one-byte operator."""
    if count == 1:
        return _columns(np.zeros((32, 1), np.uint8), np.uint32(1) << np.arange(32,
                                                                               dtype=np.uint32))
    half = _zeros(count // 2)
    twice = _apply(half, half)
    return _apply(_zeros(1), twice) if count % 2 else twice


SEGMENT = 256  # bytes of a row whose registers are run side by side before combining


def crc32c_rows(rows: np.ndarray) -> np.ndarray:
    """CRC-32C (Castagnoli, the checksum of TFRecord framing) of each row of an N x L
    uint8 array, computed for all rows at once. A long row is cut into segments whose
    registers run side by side from zero, then combined (the register is linear in its
    bytes: after segment k it is the one before advanced over SEGMENT zero bytes, xor
    segment k's own), so the numpy calls number SEGMENT, not L, per batch of rows."""
    count, length = rows.shape
    start = np.full(count, 0xFFFFFFFF, dtype=np.uint32)
    if length <= 2 * SEGMENT:
        return _columns(rows, start) ^ np.uint32(0xFFFFFFFF)
    pieces = -(-length // SEGMENT)
    padded = np.zeros((count, pieces * SEGMENT), np.uint8)
    padded[:, pieces * SEGMENT - length:] = rows  # leading zeros leave a zero register
    own = _columns(padded.reshape(count * pieces, SEGMENT),
                   np.zeros(count * pieces, np.uint32)).reshape(count, pieces)
    register = np.zeros(count, np.uint32)
    step = _zeros(SEGMENT)
    for piece in range(pieces):
        register = _apply(step, register) ^ own[:, piece]
    return (_apply(_zeros(length), start) ^ register) ^ np.uint32(0xFFFFFFFF)


def masked_crc(crc: np.ndarray) -> np.ndarray:
    crc = crc.astype(np.uint64)
    return ((((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF).astype("<u4")


def tfrecord_frames(records: list[bytes]) -> bytes:
    """The records in TFRecord framing, as TensorFlow's TFRecordWriter writes them: per
    record its length (uint64), the length's masked CRC-32C, the bytes, their masked
    CRC-32C (little-endian)."""
    out = [b""] * len(records)
    by_length: dict[int, list[int]] = {}
    for index, record in enumerate(records):
        by_length.setdefault(len(record), []).append(index)
    for length, indices in by_length.items():
        data = np.frombuffer(b"".join(records[i] for i in indices), np.uint8)
        data_crc = masked_crc(crc32c_rows(data.reshape(len(indices), length)))
        head = np.array([length], "<u8").tobytes()
        head += masked_crc(crc32c_rows(np.frombuffer(head, np.uint8)[None]))[0].tobytes()
        for i, crc in zip(indices, data_crc.tolist()):
            out[i] = head + records[i] + crc.to_bytes(4, "little")
    return b"".join(out)


def needs_tensorflow(images: np.ndarray, size: int) -> bool:
    """Whether write_shard writes these images with TensorFlow: to resize them, or because
    it is loaded already."""
    return "tensorflow" in sys.modules or images.shape[1:3] != (size, size)


def write_shard(path: Path, images: np.ndarray, labels: np.ndarray, size: int,
                chunk: int = 256) -> None:
    """One shard of records. Where TensorFlow is needed (to resize, `chunk` images at a
    time) or loaded already (the images were decoded with it) its TFRecordWriter writes
    them; otherwise dlscale frames them itself, the same bytes, and preparation never
    imports TensorFlow (most of a small dataset's preparation: docs/benchmarks.md, "Tests
    and CI")."""
    encoder = ExampleEncoder(size * size * 3)
    if needs_tensorflow(images, size):
        import tensorflow as tf

        with tf.io.TFRecordWriter(str(path)) as writer:
            for lo in range(0, len(images), chunk):
                batch = resize_batch(images[lo:lo + chunk], size)
                for image, label in zip(batch, labels[lo:lo + chunk].tolist()):
                    writer.write(encoder.encode(image.tobytes(), label))
        return
    with open(path, "wb") as out:
        for lo in range(0, len(images), FRAMED_AT_ONCE):
            out.write(tfrecord_frames([encoder.encode(image.tobytes(), label) for image, label
                                       in zip(images[lo:lo + FRAMED_AT_ONCE],
                                              labels[lo:lo + FRAMED_AT_ONCE].tolist())]))


def write_split(images: np.ndarray, labels: np.ndarray, out_dir: Path, split: str,
                shards: int, size: int, workers: int | None = None) -> list[dict]:
    """Resize and write one split as shards, several at once (resizing and writing
    release the GIL); return [{file, records}] in shard order. Each shard's bytes
    depend only on its images, so the result is the same for any `workers`."""
    bounds = shard_bounds(len(images), shards)
    names = [shard_name(split, i, len(bounds)) for i in range(len(bounds))]
    workers = workers or min(len(bounds), os.cpu_count() or 1)
    if needs_tensorflow(images, size):
        # imported here, once, rather than by the shards' threads side by side for the first
        # time (a package's first import from several threads can meet its modules half
        # made). The CI failure that prompted this, "No module named 'six.moves'", was
        # the tests' own clean-up (tests/conftest.py, process_as_found), fixed there
        import tensorflow  # noqa: F401
    with ThreadPoolExecutor(workers) as pool:
        jobs = [pool.submit(write_shard, out_dir / name, images[lo:hi], labels[lo:hi], size)
                for name, (lo, hi) in zip(names, bounds)]
        for job in jobs:
            job.result()
    return [{"file": name, "records": hi - lo} for name, (lo, hi) in zip(names, bounds)]


def pass_order(seed: int, epoch: int, count: int, ops=None):
    """The order of a pass over `count` records held in memory: the records sorted by a
    splitmix64 hash of (seed, pass, record), 63 bits of it, ties by record. One function
    for both readers: numpy by default, TensorFlow's ops (`ops=tf`, `epoch` a tensor) in
    make_dataset's graph, with the same 64-bit wrapping arithmetic, so the two give the
    same order for the same seed."""
    if ops is None:
        with np.errstate(over="ignore"):
            base = np.uint64((seed * 1_000_003 + epoch) % 2**64) * np.uint64(GOLDEN)
            z = np.arange(count, dtype=np.uint64) + base + np.uint64(GOLDEN)
            z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
            keys = ((z ^ (z >> np.uint64(31))) >> np.uint64(1)).astype(np.int64)
        return np.argsort(keys, kind="stable").astype(np.int64)
    tf = ops
    u64 = tf.uint64

    def shift(x, bits):
        return tf.bitwise.right_shift(x, tf.constant(bits, u64))

    base = tf.cast(tf.constant(seed, tf.int64) * 1_000_003 + epoch, u64) * tf.constant(
        GOLDEN, u64)
    z = tf.cast(tf.range(count, dtype=tf.int64), u64) + base + tf.constant(GOLDEN, u64)
    z = tf.bitwise.bitwise_xor(z, shift(z, 30)) * tf.constant(MIX1, u64)
    z = tf.bitwise.bitwise_xor(z, shift(z, 27)) * tf.constant(MIX2, u64)
    keys = tf.cast(shift(tf.bitwise.bitwise_xor(z, shift(z, 31)), 1), tf.int64)
    return tf.cast(tf.argsort(keys, stable=True), tf.int64)


def load_manifest(data_dir: str | Path) -> dict:
    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"no {MANIFEST} in {data_dir}: prepare the dataset first")
    return json.loads(path.read_text())


def shard_records(manifest: dict, split: str, num_shards: int = 1, shard_index: int = 0) -> int:
    """How many records input pipeline `shard_index` of `num_shards` reads in one pass
    over `split` (as make_dataset shards: by file, or by record when files are fewer)."""
    shards = manifest["splits"][split]["shards"]
    if num_shards <= len(shards):
        return sum(s["records"] for s in shards[shard_index::num_shards])
    total = sum(s["records"] for s in shards)
    return len(range(shard_index, total, num_shards))


def split_bytes(manifest: dict, split: str, num_shards: int = 1, shard_index: int = 0) -> int:
    """Bytes of the decoded images that input pipeline `shard_index` of `num_shards`
    reads in one pass over `split`: what holding them in memory costs."""
    height, width, channels = manifest["image_shape"]
    return shard_records(manifest, split, num_shards, shard_index) * height * width * channels


def make_dataset(data_dir: str | Path, split: str, batch_size: int, *, training: bool,
                 seed: int = 0, shuffle_buffer: int = SHUFFLE_BUFFER, num_shards: int = 1,
                 shard_index: int = 0, repeat: bool | None = None, cache: bool = False,
                 skip_batches: int = 0):
    """Batched (uint8 image, int64 label) dataset, in the tf.data guide's order:
    list shards, interleave readers, shuffle, batch, vectorised parse, prefetch.

    training=True shuffles (seeded), repeats and drops the last partial batch so every
    step has the same global batch; num_shards/shard_index split the input between
    input pipelines (one per worker under MultiWorkerMirroredStrategy or Horovod): by
    file when there are at least as many files as pipelines, otherwise by record (each
    pipeline reads every file and keeps every num_shards-th record), so any number of
    workers can read any number of shards.

    The order is a function of (seed, pass over the data) only: pass p shuffles the files
    and the records (within shuffle_buffer) with seeds made of both, so `skip_batches`
    (the batches earlier attempts of the run took) starts the stream where they stopped,
    reading at most one pass to get there: a resumed run sees the batches an
    uninterrupted one sees.

    cache=True reads and decodes the records once, in the first pass, and keeps the
    decoded images in memory (split_bytes() of them); every later pass shuffles all of
    them (a full shuffle, as Keras does with arrays, instead of shuffle_buffer) and
    batches them without touching the files.
    """
    import tensorflow as tf

    manifest = load_manifest(data_dir)
    if split not in manifest["splits"]:
        raise ValueError(f"split '{split}' not in {data_dir}: has {sorted(manifest['splits'])}")
    height, width, channels = manifest["image_shape"]
    files = [str(Path(data_dir) / s["file"]) for s in manifest["splits"][split]["shards"]]
    by_record = num_shards > len(files)
    if num_shards > 1 and not by_record:
        files = files[shard_index::num_shards]
    repeat = training if repeat is None else repeat
    records = shard_records(manifest, split, num_shards, shard_index)

    def pass_seed(epoch, salt: int):  # one seed per (seed, pass, use), as a tensor
        return tf.constant(seed, tf.int64) * 1_000_003 + epoch * 2 + salt

    def records_of(epoch, shuffled: bool):
        ds = tf.data.Dataset.from_tensor_slices(files)
        if shuffled:
            ds = ds.shuffle(len(files), seed=pass_seed(epoch, 0))
        ds = ds.interleave(tf.data.TFRecordDataset,
                           cycle_length=min(len(files), INTERLEAVE_CYCLE),
                           block_length=INTERLEAVE_BLOCK,
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return ds.shard(num_shards, shard_index) if by_record else ds

    plain = tf.autograph.experimental.do_not_convert
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}

    @plain
    def parse(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        images = tf.io.decode_raw(parsed["image"], tf.uint8)
        return tf.reshape(images, (-1, height, width, channels)), parsed["label"]

    if cache:  # the whole split as one element, parsed in parts; batches gathered from it
        per_pass = max(records // batch_size if training else -(-records // batch_size), 1)
        first, skip = divmod(skip_batches, per_pass)
        ds = records_of(0, False).batch(PARSE_BATCH).map(parse,
                                                          num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.unbatch().batch(max(records, 1)).cache()
        if repeat:
            ds = ds.repeat()

        @plain
        def batches(epoch, images, labels):
            order = tf.range(tf.shape(labels)[0], dtype=tf.int64)
            if training:  # a new permutation of all the records in every pass
                order = pass_order(seed, epoch, tf.shape(labels)[0], ops=tf)
            picks = tf.data.Dataset.from_tensor_slices(order)
            picks = picks.batch(batch_size, drop_remainder=training)
            picks = picks.skip(tf.where(epoch == first, tf.constant(skip, tf.int64), 0))
            return picks.map(plain(lambda i: (tf.gather(images, i), tf.gather(labels, i))))

        ds = ds.enumerate(start=first).flat_map(plain(lambda epoch, pair: batches(epoch, *pair)))
    else:
        first, skip = divmod(skip_batches * batch_size, max(records, 1))
        if repeat:  # pass after pass, each in an order of its own
            ds = tf.data.Dataset.range(first, 2**62).flat_map(plain(
                lambda epoch: records_of(epoch, training).shuffle(
                    shuffle_buffer, seed=pass_seed(epoch, 1)) if training
                else records_of(epoch, False)))
            ds = ds.skip(skip)
        else:
            ds = records_of(tf.constant(0, tf.int64), training)
            if training:
                ds = ds.shuffle(shuffle_buffer, seed=pass_seed(0, 1))
        ds = ds.batch(batch_size, drop_remainder=training)
        ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)
