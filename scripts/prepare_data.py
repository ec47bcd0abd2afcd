#!/usr/bin/env python3
"""Turn a dataset source (CIFAR-10 archive or folder, MNIST/Fashion-MNIST IDX files, or a
folder of your own images with one sub-folder per class) into resized, sharded TFRecords
plus manifest.json.

Example:
  prepare_data.py --dataset cifar10 --source cifar-10-python.tar.gz \\
      --md5 c58f30108f718f92721af3b95e74349a --image-size 128 --shards 16 \\
      --out results/data/cifar10-128px

The output folder gets {split}-NNNNN-of-NNNNN.tfrecord shards (raw uint8 pixels and an
int64 label per record) and manifest.json, written last: a run that fails leaves no
manifest. The same source and flags give byte-identical shards.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dlscale.core.cli import exit_without_teardown, fail
from dlscale.core.contract import MANIFEST
from dlscale.core.vocabulary import DEFAULTS
from dlscale.data.datasets import DATASETS, DatasetError
from dlscale.data.preparation import prepare
from dlscale.train.keraschoice import quiet_tensorflow


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, choices=sorted(DATASETS))
    parser.add_argument("--source", required=True, type=Path,
                        help="archive, folder or .npz holding the dataset")
    parser.add_argument("--md5", help="expected md5 of the source archive (checked first)")
    parser.add_argument("--image-size", type=int, default=DEFAULTS["data"]["image_size"],
                        help="output height and width in pixels (default: %(default)s)")
    parser.add_argument("--shards", type=int, default=DEFAULTS["data"]["shards"],
                        help="TFRecord files per split; small splits get fewer "
                             "(default: %(default)s)")
    parser.add_argument("--limit-train", type=int, help="keep only the first N training images")
    parser.add_argument("--limit-test", type=int, help="keep only the first N test images")
    parser.add_argument("--test-fraction", type=float,
                        default=DEFAULTS["data"]["test_fraction"],
                        help="folder without train/ and test/: the share of each class's "
                             "images kept for testing (default: %(default)s)")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    args = parser.parse_args(argv)
    for name in ("image_size", "shards", "limit_train", "limit_test"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    quiet_tensorflow()
    try:
        manifest = prepare(args.dataset, args.source, args.out, args.image_size, args.shards,
                           args.md5, args.limit_train, args.limit_test, args.test_fraction)
    except DatasetError as exc:
        fail(str(exc))
    except OSError as exc:  # disk full, no permission ...: nothing half-written is left
        fail(f"cannot write {args.out}: {exc.strerror or exc}; nothing was kept")
    except Exception as exc:  # TFRecordWriter reports a full disk as its own error type
        import tensorflow as tf

        if not isinstance(exc, tf.errors.OpError):
            raise
        fail(f"cannot write {args.out}: {exc.message.strip().splitlines()[0]}; "
             "nothing was kept")
    counts = {s: v["count"] for s, v in manifest["splits"].items()}
    print(f"wrote {args.out}/{MANIFEST}: {manifest['dataset']} "
          f"{'x'.join(map(str, manifest['image_shape']))}, {counts}")
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
