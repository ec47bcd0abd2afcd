"""dlscale's own shard reader (dlscale.data.shardreader, issue 60): the TensorFlow reader's
order with the images held in memory, record for record, read with TensorFlow made
unimportable; every record's checksums and layout checked."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import NO_TENSORFLOW, SCRIPTS

from dlscale.data import tfrecords
from dlscale.data.shardreader import Reader, ShardError, interleaved

SHAPE = (4, 4, 3)
COUNTS = [37, 16, 50, 9, 33, 48, 21]  # uneven, some a whole number of interleave blocks

# (split, batch, training, seed, shards, index, skip, batches read)
CASES = [("train", 8, True, 3, 1, 0, 0, 60),     # two passes and more
         ("train", 8, True, 5, 2, 1, 0, 20),     # by file: files 1, 3, 5
         ("train", 4, True, 7, 9, 4, 0, 30),     # by record: more pipelines than files
         ("train", 8, True, 3, 1, 0, 41, 10),    # resumed in its second pass
         ("test", 10, False, 0, 1, 0, 0, 99),    # in file order, the last batch short
         ("test", 6, False, 0, 3, 2, 0, 99)]

WITHOUT_TENSORFLOW = NO_TENSORFLOW + """
import json
sys.path.insert(0, sys.argv[1])
from itertools import islice
from dlscale.data.shardreader import Reader
out = []
for split, batch, training, seed, shards, index, skip, take in json.loads(sys.argv[3]):
    reader = Reader(sys.argv[2], split, batch, training=training, seed=seed,
                    num_shards=shards, shard_index=index, skip_batches=skip)
    out.append([[images[:, 0, 0, 0].tolist(), images[:, 0, 0, 1].tolist(), labels.tolist()]
                for images, labels in islice(reader, take)])
print(json.dumps({"batches": out, "tensorflow": "tensorflow" in sys.modules}))
"""


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Seven shards of 4 x 4 images, each image's first two bytes its number; labels up
    to 299, so that a record's length varies with its label's varint (as a dataset of
    more than 127 classes has it)."""
    root = tmp_path_factory.mktemp("shards")
    entries, number = {"train": [], "test": []}, 0
    for split, counts in (("train", COUNTS), ("test", [13, 12, 11])):
        for i, count in enumerate(counts):
            ids = np.arange(number, number + count)
            images = np.zeros((count, *SHAPE), np.uint8)
            images[:, 0, 0, 0], images[:, 0, 0, 1] = ids // 256, ids % 256
            name = tfrecords.shard_name(split, i, len(counts))
            tfrecords.write_shard(root / name, images, (ids * 7) % 300, SHAPE[0])
            entries[split].append({"file": name, "records": count})
            number += count
    (root / "manifest.json").write_text(json.dumps({
        "image_shape": list(SHAPE), "num_classes": 300,
        "splits": {s: {"count": sum(e["records"] for e in entries[s]), "shards": entries[s]}
                   for s in entries}}))
    return root


def tensorflow_batches(root, split, batch, training, seed, shards, index, skip, take):
    ds = tfrecords.make_dataset(root, split, batch, training=training, seed=seed,
                                num_shards=shards, shard_index=index, skip_batches=skip,
                                cache=training)
    return [[images[:, 0, 0, 0].tolist(), images[:, 0, 0, 1].tolist(), labels.tolist()]
            for images, labels in ds.take(take).as_numpy_iterator()]


def test_the_reader_gives_the_tensorflow_readers_batches_without_tensorflow(shards):
    done = subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, str(SCRIPTS),
                           str(shards), json.dumps(CASES)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    ours = json.loads(done.stdout)
    assert not ours["tensorflow"]
    for case, batches in zip(CASES, ours["batches"], strict=True):
        assert batches == tensorflow_batches(shards, *case), case
    # a training pass is a permutation of the pipeline's records; the next pass another
    first = ours["batches"][0]
    per_pass = sum(COUNTS) // 8
    seen = [256 * hi + lo for b in first[:per_pass] for hi, lo in zip(b[0], b[1])]
    assert len(set(seen)) == len(seen) == per_pass * 8
    assert first[per_pass] != first[0]


def test_the_interleave_takes_blocks_from_four_files_in_turn():
    order = interleaved([20, 3, 16, 5, 2, 40])
    assert order[:16] == [(0, r) for r in range(16)]
    assert order[16:19] == [(1, 0), (1, 1), (1, 2)]
    assert sorted(order) == [(f, r) for f, n in enumerate([20, 3, 16, 5, 2, 40])
                             for r in range(n)]


def test_a_damaged_or_foreign_shard_is_refused_with_its_file_and_record(shards, tmp_path):
    import shutil

    root = tmp_path / "data"
    shutil.copytree(shards, root)
    name = tfrecords.shard_name("train", 2, len(COUNTS))
    data = bytearray((root / name).read_bytes())
    length = int.from_bytes(data[:8], "little")
    at = 3 * (12 + length + 4) + 12 + 30  # record 3's payload, in its pixels
    data[at] ^= 0xFF
    (root / name).write_bytes(bytes(data))
    with pytest.raises(ShardError, match=rf"{name}: record 3 fails its CRC-32C"):
        Reader(root, "train", 8, training=True)
    (root / name).write_bytes(bytes(data[:-5]))
    with pytest.raises(ShardError, match="record 49 is cut short"):
        Reader(root, "train", 8, training=True)
    # a manifest that counts other shards than those in the folder
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["splits"]["test"]["shards"][0]["records"] += 1
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ShardError, match="the test shards hold 36 records for this reader, "
                                         "manifest.json says 37"):
        Reader(root, "test", 8, training=False)
    # well framed, but images of another size: not what the manifest says
    images = np.zeros((5, 2, 2, 3), np.uint8)
    tfrecords.write_shard(root / name, images, np.arange(5), 2)
    with pytest.raises(ShardError, match="record 0 is not a 48-byte image"):
        Reader(root, "train", 8, training=True)


@pytest.mark.parametrize("every", [2, 3])
def test_readers_in_turn_give_the_batches_one_reader_gives_in_its_order(shards, every):
    """A torch point's DataLoader workers (train.py --num-workers): each of `every` walks
    the order and gathers its turn; taken in turn they are the one reader's batches, a
    resumed reader's too, across passes."""
    for skip in (0, 41):
        reader = Reader(shards, "train", 8, training=True, seed=3, skip_batches=skip)
        whole = [b for _, b in zip(range(30), reader)]
        turns = [reader.batches(offset=k, every=every) for k in range(every)]
        taken = [next(turns[i % every]) for i in range(30)]
        for (images, labels), (want_images, want_labels) in zip(taken, whole):
            assert np.array_equal(images, want_images) and np.array_equal(labels, want_labels)
