"""dlscale's own reader of its shards, without TensorFlow: what a Keras 3
point on JAX needs to train where TensorFlow is not installed.

The shards are dlscale's: TFRecord framing of `tf.train.Example`s that
`tfrecords.ExampleEncoder` lays out the same way for every image of a size. So a record
is read back by the same code that wrote it: its framing's two checksums (CRC-32C, as
TensorFlow checks them), then the encoder's own head before the pixels and its own label
entry after them, byte for byte. A shard that does not match is refused with its file and
record, never read as noise.

The order is the TensorFlow reader's with the images held in memory
(`tfrecords.make_dataset(cache=True)`), record for record: the files interleaved as
tf.data interleaves them (INTERLEAVE_CYCLE files at a time, INTERLEAVE_BLOCK records from
each), split between input pipelines by file or by record the same way, and in training
every pass a permutation of all the pipeline's records made by `tfrecords.pass_order`,
the one function both readers use. The images are not held: each batch is gathered from
the memory-mapped files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dlscale.data.tfrecords import (
    INTERLEAVE_BLOCK,
    INTERLEAVE_CYCLE,
    ExampleEncoder,
    crc32c_rows,
    load_manifest,
    masked_crc,
    pass_order,
    shard_records,
)

HEAD = 12  # a frame's length (uint64) and the length's masked CRC-32C
CHECKED_AT_ONCE = 256  # records whose checksums are computed in one numpy pass


class ShardError(ValueError):
    """A shard that is not dlscale's, or damaged: names the file and the record."""


class Shard:
    """One shard file, memory-mapped: where each record's image lies, and its label."""

    def __init__(self, path: Path, image_bytes: int):
        self.path = path
        size = path.stat().st_size
        self.data = np.memmap(path, np.uint8, "r") if size else np.zeros(0, np.uint8)
        starts, lengths, offset = [], [], 0
        raw = self.data
        while offset < size:
            if offset + HEAD > size:
                raise ShardError(f"{path}: record {len(starts)} is cut short (a partial copy?)")
            length = int.from_bytes(raw[offset:offset + 8].tobytes(), "little")
            starts.append(offset + HEAD)
            lengths.append(length)
            offset += HEAD + length + 4
        if offset != size:
            raise ShardError(f"{path}: record {len(starts) - 1} is cut short (a partial copy?)")
        self.starts = np.array(starts, np.int64)
        self.lengths = np.array(lengths, np.int64)
        self._check_sums()
        self.images, self.labels = self._decode(image_bytes)

    def __len__(self) -> int:
        return len(self.starts)

    def _rows(self, offsets: np.ndarray, width: int) -> np.ndarray:
        data = self.data
        return np.stack([data[at:at + width] for at in offsets.tolist()])

    def _check_sums(self) -> None:
        """Both checksums of every record, as TensorFlow's reader checks them."""
        heads = self.starts - HEAD
        bad = self._mismatch(heads, 8, heads + 8)
        if bad is None:
            for length in np.unique(self.lengths).tolist():
                which = np.flatnonzero(self.lengths == length)
                found = self._mismatch(self.starts[which], length,
                                       self.starts[which] + length)
                if found is not None:
                    bad = int(which[found])
                    break
        if bad is not None:
            raise ShardError(f"{self.path}: record {bad} fails its CRC-32C (a damaged file)")

    def _mismatch(self, offsets: np.ndarray, width: int, sums: np.ndarray) -> int | None:
        for lo in range(0, len(offsets), CHECKED_AT_ONCE):
            part = slice(lo, lo + CHECKED_AT_ONCE)
            computed = masked_crc(crc32c_rows(self._rows(offsets[part], width)))
            stored = self._rows(sums[part], 4).copy().view("<u4").reshape(-1)
            if (wrong := np.flatnonzero(computed != stored)).size:
                return lo + int(wrong[0])
        return None

    def _decode(self, image_bytes: int) -> tuple[np.ndarray, np.ndarray]:
        """(offset of each record's pixels, its label), each record held to the encoder's
        own bytes before and after the pixels."""
        encoder = ExampleEncoder(image_bytes)
        head = encoder.image_entry_head
        images = np.empty(len(self), np.int64)
        labels = np.empty(len(self), np.int64)
        for i, (start, length) in enumerate(zip(self.starts.tolist(), self.lengths.tolist())):
            record = self.data[start:start + length].tobytes()
            inner = 1 + _varint_size(record, 1)  # Example.features: tag and length
            tail = record[inner + len(head) + image_bytes:]
            label = _label_of(tail)
            if (record[0] != 0x0A or record[inner:inner + len(head)] != head
                    or label is None or encoder.label_entry(label) != tail):
                raise ShardError(f"{self.path}: record {i} is not a {image_bytes}-byte image "
                                 "with its label as dlscale writes them (a shard of another "
                                 "dataset or image size?)")
            images[i], labels[i] = start + inner + len(head), label
        return images, labels


def _varint_size(data: bytes, at: int) -> int:
    size = 1
    while data[at + size - 1] & 0x80:
        size += 1
    return size


def _label_of(tail: bytes) -> int | None:
    """The label in an encoder's label entry: the varint that ends it, after its length."""
    for size in range(1, 11):
        if len(tail) > size and tail[-size - 1] == size:
            value = 0
            for shift, byte in enumerate(tail[-size:]):
                value |= (byte & 0x7F) << (7 * shift)
            return value
    return None


def interleaved(counts: list[int]) -> list[tuple[int, int]]:
    """(file, record) in the order tf.data's deterministic interleave reads files of
    `counts` records: INTERLEAVE_CYCLE files open at a time, INTERLEAVE_BLOCK records from
    each in turn. As in tf.data, a file is found exhausted only when its turn asks it for
    one more record; its slot then passes the turn on, and opens the next file when its
    turn comes again."""
    cycle = max(1, min(len(counts), INTERLEAVE_CYCLE))
    slots: list[list[int] | None] = [None] * cycle  # [file, next record]
    index = block = following = 0
    out: list[tuple[int, int]] = []
    while following < len(counts) or any(slot is not None for slot in slots):
        slot = slots[index]
        if slot is None and following < len(counts):
            slots[index] = [following, 0]
            following += 1
        elif slot is not None and slot[1] < counts[slot[0]]:
            out.append((slot[0], slot[1]))
            slot[1] += 1
            block += 1
            if block == INTERLEAVE_BLOCK:
                index, block = (index + 1) % cycle, 0
        else:  # exhausted (or empty with no file left): the turn passes on
            slots[index] = None
            index, block = (index + 1) % cycle, 0
    return out


class Reader:
    """Batches of (uint8 images N x H x W x C, int64 labels N) of one split, as
    `tfrecords.make_dataset(..., cache=True)` gives them, without TensorFlow."""

    def __init__(self, data_dir: str | Path, split: str, batch_size: int, *, training: bool,
                 seed: int = 0, num_shards: int = 1, shard_index: int = 0,
                 repeat: bool | None = None, skip_batches: int = 0):
        manifest = load_manifest(data_dir)
        if split not in manifest["splits"]:
            raise ValueError(f"split '{split}' not in {data_dir}: has "
                             f"{sorted(manifest['splits'])}")
        self.shape = tuple(manifest["image_shape"])
        image_bytes = int(np.prod(self.shape))
        entries = manifest["splits"][split]["shards"]
        by_record = num_shards > len(entries)
        if num_shards > 1 and not by_record:
            entries = entries[shard_index::num_shards]
        self.shards = [Shard(Path(data_dir) / e["file"], image_bytes) for e in entries]
        order = interleaved([len(s) for s in self.shards])
        if by_record:
            order = order[shard_index::num_shards]
        self.files = np.array([f for f, _ in order], np.int64)
        self.records = np.array([r for _, r in order], np.int64)
        if len(order) != (said := shard_records(manifest, split, num_shards, shard_index)):
            raise ShardError(f"{data_dir}: the {split} shards hold {len(order)} records for "
                             f"this reader, manifest.json says {said} (shards of another "
                             "preparation?)")
        self.batch, self.training, self.seed = batch_size, training, seed
        self.repeat = training if repeat is None else repeat
        self.first, self.skip = divmod(skip_batches, max(len(self), 1))

    def __len__(self) -> int:
        """Batches in one pass."""
        count = len(self.files)
        return count // self.batch if self.training else -(-count // self.batch)

    def __iter__(self):
        return self.batches()

    def batches(self, offset: int = 0, every: int = 1):
        """The batches, or of them those at `offset`, `offset + every` ... (one of `every`
        processes reading in turn: dlscale.train.frameworks.torch.loader); the order of
        the others is walked, only these are gathered."""
        epoch, skip, index = self.first, self.skip, 0
        while True:
            order = (pass_order(self.seed, epoch, len(self.files)) if self.training
                     else np.arange(len(self.files)))
            for lo in range(skip * self.batch, len(order), self.batch):
                picks = order[lo:lo + self.batch]
                if self.training and len(picks) < self.batch:
                    break  # every step the same global batch
                if index % every == offset:
                    yield self.gather(picks)
                index += 1
            if not self.repeat:
                return
            epoch, skip = epoch + 1, 0

    def gather(self, picks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        images = np.empty((len(picks), *self.shape), np.uint8)
        labels = np.empty(len(picks), np.int64)
        size = images[0].size if len(picks) else 0
        for row, pick in enumerate(picks.tolist()):
            shard = self.shards[self.files[pick]]
            at = shard.images[self.records[pick]]
            images[row] = shard.data[at:at + size].reshape(self.shape)
            labels[row] = shard.labels[self.records[pick]]
        return images, labels


@dataclass(frozen=True)
class Pipeline:
    """What an input function is told of its input pipeline: TensorFlow's InputContext,
    for Keras 3 on JAX, which reads without TensorFlow (dlscale.data.shardreader)."""

    num_input_pipelines: int = 1
    input_pipeline_id: int = 0
    num_replicas_in_sync: int = 1

    def get_per_replica_batch_size(self, global_batch: int) -> int:
        return global_batch // self.num_replicas_in_sync
