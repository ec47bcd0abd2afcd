#!/usr/bin/env python3
"""A standalone Keras training script, written the way users write them (no dlscale in
it): flags for GPUs, batch and epochs, MirroredStrategy over the GPUs, model.fit with
verbose=2, a final evaluate. dlscale scales it with

    sweep:
      models: []
      commands:
        my_train: >-
          python examples/my_train.py --gpus {gpus} --batch-size {batch_per_gpu}
          --epochs {epochs} --lr {lr}

It trains a small CNN on Fashion-MNIST, read from the IDX files in --data-dir (Debian's
dataset-fashion-mnist puts them in /usr/share/datasets/fashion-mnist), or downloaded by
Keras when no folder is given. Without GPUs, --cpu-replicas splits the CPU into logical
devices so that the replicas are real.
"""

import argparse
import gzip
import os

import numpy as np
import tensorflow as tf
from tensorflow import keras


def read_idx(path):
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir, limit):
    if data_dir:
        names = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]
        x, y, xt, yt = (read_idx(os.path.join(data_dir, n)) for n in names)
    else:
        (x, y), (xt, yt) = keras.datasets.fashion_mnist.load_data()
    if limit:
        x, y, xt, yt = x[:limit], y[:limit], xt[:limit // 4], yt[:limit // 4]
    return (x[..., None] / 255.0, y), (xt[..., None] / 255.0, yt)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="per GPU")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--limit", type=int, default=0, help="train on the first N images")
    parser.add_argument("--cpu-replicas", action="store_true",
                        help="no GPUs: --gpus logical CPU devices instead")
    args = parser.parse_args()

    if args.cpu_replicas:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.gpus)
        devices = [f"/cpu:{i}" for i in range(args.gpus)]
    else:
        devices = [f"/gpu:{i}" for i in range(args.gpus)]
    strategy = tf.distribute.MirroredStrategy(devices)
    print(f"Number of devices: {strategy.num_replicas_in_sync}")

    (x, y), (xt, yt) = load(args.data_dir, args.limit)
    batch = args.batch_size * strategy.num_replicas_in_sync
    with strategy.scope():
        model = keras.Sequential([
            keras.Input(shape=(28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(10, activation="softmax"),
        ])
        model.compile(optimizer=keras.optimizers.SGD(args.lr),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x, y, batch_size=batch, epochs=args.epochs, verbose=2)
    loss, accuracy = model.evaluate(xt, yt, batch_size=batch, verbose=2)
    print(f"Test loss: {loss:.4f}, test accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    main()
