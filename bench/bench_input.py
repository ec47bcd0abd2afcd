#!/usr/bin/env python3
"""What the input costs an epoch in CPU time: dlscale's TFRecord pipeline against arrays.

  python bench/bench_input.py [--work /tmp/dlscale-bench-overhead] [--replicas 2]
      [--batch 64] [--epochs 40] [--images 2048] [--model SimpleCNN] [--model-epochs 10]

bench/bench_overhead.py's bare script holds the training images in memory as numpy arrays
and lets Keras batch them; dlscale's train.py reads TFRecord shards (interleave, shuffle,
batch, parse, prefetch; dlscale.data.tfrecords.make_dataset). On a machine whose cores are
also the training devices (this VM's logical CPU replicas) the input's CPU time is taken
from the model's. This measures it without a model: one epoch of each input (the same
images, global batch and replicas, each distributed by a MirroredStrategy as in training:
dlscale's by distribute_datasets_from_function, the arrays by Keras' own data adapter
and experimental_distribute_dataset, as `fit(x, y)` does), the process's CPU seconds
(getrusage, every thread) and wall seconds per epoch, the two taking turns. Uses (or
makes) the prepared data of bench/bench_overhead.py. For scale, the last row is a
training epoch of --model on synthetic input (one repeated batch: next to no input work),
same replicas and batch: the CPU the model itself uses. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "bench"), str(ROOT / "tests")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is tf_keras, as in train.py


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "dlscale-bench-overhead")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64, help="per replica")
    parser.add_argument("--epochs", type=int, default=40, help="timed epochs per input")
    parser.add_argument("--images", type=int, default=2048, help="when the data is made")
    parser.add_argument("--model", default="SimpleCNN", help="for the last row")
    parser.add_argument("--model-epochs", type=int, default=10, help="timed, for the last row")
    args = parser.parse_args(argv)

    import make_synthetic_cifar

    from dlscale.data import preparation

    archive, data = args.work / "cifar.tar.gz", args.work / "data32"
    if not (data / "manifest.json").exists():
        make_synthetic_cifar.write_archive(archive, "python", args.images, 256, seed=0)
        preparation.prepare("cifar10", archive, data, 32, 4)

    import tensorflow as tf
    from bare_keras import load
    from tf_keras.src.engine import data_adapter

    from dlscale.core.vocabulary import SHUFFLE_BUFFER
    from dlscale.data.tfrecords import make_dataset
    from dlscale.train import training

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.replicas)])
    global_batch = args.batch * args.replicas
    (x, y), _ = load(archive)
    steps = len(x) // global_batch

    def records(context, cache=False):  # as dlscale.train.driver.inputs' train_input
        return make_dataset(data, "train", context.get_per_replica_batch_size(global_batch),
                            training=True, seed=context.input_pipeline_id,
                            shuffle_buffer=SHUFFLE_BUFFER,
                            num_shards=context.num_input_pipelines,
                            shard_index=context.input_pipeline_id, cache=cache)

    adapter = data_adapter.TensorLikeDataAdapter(x, y, batch_size=global_batch, shuffle=True,
                                                 epochs=args.epochs + 1, steps=None)
    inputs = {
        "dlscale: TFRecord shards, read every epoch (make_dataset)":
            iter(strategy.distribute_datasets_from_function(records)),
        "dlscale: TFRecord shards, decoded once and held in memory (make_dataset cache=True)":
            iter(strategy.distribute_datasets_from_function(
                lambda context: records(context, cache=True))),
        "bare: numpy arrays (Keras' data adapter, as fit(x, y))":
            iter(strategy.experimental_distribute_dataset(adapter.get_dataset())),
    }

    @tf.function
    def touch(batch):  # the step's use of the batch, without a model
        def per_replica(images, labels):
            return tf.reduce_sum(tf.cast(images[:, 0, 0, 0], tf.int64)) + tf.reduce_sum(labels)
        return strategy.run(per_replica, args=batch)

    def epoch(iterator):
        for _ in range(steps):
            touch(next(iterator))

    for iterator in inputs.values():  # trace, fill the buffers: untimed
        epoch(iterator)
    cpu_s = {name: [] for name in inputs}
    wall_s = {name: [] for name in inputs}
    began = time.time()
    for round_ in range(args.epochs):
        names = list(inputs) if round_ % 2 == 0 else list(reversed(inputs))
        for name in names:
            wall, used = time.perf_counter(), cpu_seconds()
            epoch(inputs[name])
            cpu_s[name].append(cpu_seconds() - used)
            wall_s[name].append(time.perf_counter() - wall)
    model_cpu, model_wall = model_epochs(strategy, training, args.model, x.shape[1:], global_batch,
                                         steps, args.model_epochs)
    print(f"machine: {platform.node()}, {os.cpu_count()} cores; {len(x)} images at "
          f"{x.shape[1]} px, {args.replicas} replicas, global batch {global_batch}, {steps} "
          f"steps per epoch, {args.epochs} timed epochs per input, {time.time() - began:.0f} s\n")
    print("| input | median CPU per epoch [s] | spread (min-max) [s] | median wall per epoch [s] |")
    print("|---|---|---|---|")
    for name in inputs:
        print(f"| {name} | {statistics.median(cpu_s[name]):.3f} | {min(cpu_s[name]):.3f}-"
              f"{max(cpu_s[name]):.3f} | {statistics.median(wall_s[name]):.3f} |")
    print(f"| for scale: a training epoch of {args.model}, synthetic input | "
          f"{statistics.median(model_cpu):.3f} | {min(model_cpu):.3f}-{max(model_cpu):.3f} | "
          f"{statistics.median(model_wall):.3f} |")
    return 0


def model_epochs(strategy, training, name, shape, global_batch, steps, epochs):
    """CPU and wall seconds of each training epoch after the first (synthetic input)."""
    import tensorflow as tf

    cpu_s, wall_s = [], []

    class Clock(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = (cpu_seconds(), time.perf_counter())

        def on_epoch_end(self, epoch, logs=None):
            if epoch:
                cpu_s.append(cpu_seconds() - self.started[0])
                wall_s.append(time.perf_counter() - self.started[1])

    with strategy.scope():
        model = training.build_model(name, tuple(shape), 10)
        model.compile(optimizer=training.make_optimizer("sgd", 0.01), metrics=["accuracy"],
                      loss="sparse_categorical_crossentropy")
    data = strategy.distribute_datasets_from_function(lambda context: training.synthetic_dataset(
        tuple(shape), 10, context.get_per_replica_batch_size(global_batch), 0))
    model.fit(data, epochs=epochs + 1, steps_per_epoch=steps, verbose=0, callbacks=[Clock()])
    return cpu_s, wall_s


if __name__ == "__main__":
    sys.exit(main())
