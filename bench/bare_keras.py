#!/usr/bin/env python3
"""A bare Keras training script, the kind users write: load CIFAR-10, build, fit, print.

The baseline of bench/bench_overhead.py: the same model, images, batch and replicas as
dlscale's train.py, with nothing around `fit` but a timer per epoch. It does not import
dlscale. Prints one JSON line at the end: the epochs' seconds, fit's seconds.

  python bench/bare_keras.py --archive cifar.tar.gz --model SimpleCNN --replicas 2 \\
      --batch-size 64 --epochs 4 --cpu-replicas
"""

import argparse
import json
import pickle
import tarfile
import time

import numpy as np
import tensorflow as tf
from tensorflow import keras


def load(archive):
    """(x_train, y_train), (x_test, y_test) from CIFAR-10's python archive, uint8 NHWC."""
    parts = {"train": [], "test": []}
    with tarfile.open(archive) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = member.name.rsplit("/", 1)[-1]
            if name.startswith(("data_batch_", "test_batch")):
                batch = pickle.load(tar.extractfile(member), encoding="bytes")
                x = batch[b"data"].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
                parts["test" if name == "test_batch" else "train"].append(
                    (x, np.array(batch[b"labels"])))
    return [tuple(np.concatenate(a) for a in zip(*parts[s])) for s in ("train", "test")]


def build(name, classes):
    inputs = keras.Input(shape=(32, 32, 3), dtype="uint8")
    x = keras.layers.Rescaling(1.0 / 255)(inputs)
    if name == "SimpleCNN":
        for filters in (32, 64):
            x = keras.layers.Conv2D(filters, 5, padding="same", activation="relu")(x)
            x = keras.layers.MaxPooling2D()(x)
        logits = keras.layers.Dense(classes)(keras.layers.Flatten()(x))
    else:
        logits = getattr(keras.applications, name)(
            weights=None, input_shape=(32, 32, 3), classes=classes,
            classifier_activation=None)(x)
    return keras.Model(inputs, keras.layers.Activation("softmax")(logits))


class EpochTimer(keras.callbacks.Callback):
    """Each epoch's seconds, and its (begin, end) in perf_counter's seconds (on Linux
    CLOCK_MONOTONIC, the clock bench/profile_overhead.py has perf stamp samples with)."""

    def __init__(self):
        super().__init__()
        self.seconds, self.windows = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        end = time.perf_counter()
        self.seconds.append(end - self.t0)
        self.windows.append((self.t0, end))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--archive", required=True)
    parser.add_argument("--model", default="SimpleCNN")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64, help="per replica")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--cpu-replicas", action="store_true")
    args = parser.parse_args()

    if args.cpu_replicas:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
        devices = [f"/cpu:{i}" for i in range(args.replicas)]
    else:
        devices = [f"/gpu:{i}" for i in range(args.replicas)]
    strategy = tf.distribute.MirroredStrategy(devices)
    (x, y), (xt, yt) = load(args.archive)
    batch = args.batch_size * args.replicas
    with strategy.scope():
        model = build(args.model, 10)
        model.compile(optimizer=keras.optimizers.SGD(args.lr * args.replicas),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    timer = EpochTimer()
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=args.epochs, verbose=2, callbacks=[timer])
    fit = time.perf_counter() - start
    loss, accuracy = model.evaluate(xt, yt, batch_size=batch, verbose=0)
    print(json.dumps({"epochs": timer.seconds, "fit_s": fit, "test_accuracy": accuracy,
                      "windows": timer.windows}))


if __name__ == "__main__":
    main()
