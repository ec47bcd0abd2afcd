#!/usr/bin/env python3
"""What each piece of train.py's instrumentation costs a steady epoch, in one process.

  python bench/bench_callbacks.py [--model MobileNetV2] [--replicas 2] [--rounds 4]
      [--steps 24] [--epochs 3] [--image-size 32] [--batch 64] [--sets bare ...]

bench/bench_overhead.py compares whole processes, whose run-to-run noise on a shared VM
(about 4 %) hides a cost of a few per cent. Here one model (dlscale.train.training.build_model,
MirroredStrategy over logical CPU devices, synthetic input: one repeated batch) is fitted
again and again in the same process, each fit with another set of callbacks, the sets
taking turns round after round. Each epoch is timed by a callback placed first, as
train.py's epoch recorder is; the first epoch of each fit is left out (iterator start).
Two compiled copies of the model differ in the learning rate only: a constant (as a bare
script) and dlscale's warm-up schedule (as train.py).

Sets (--sets): bare (the timer only); + TerminateOnNaN (reads the loss after every step);
+ BackupAndRestore (an epoch's checkpoint); both (Keras then calls every callback's step
hooks, and BackupAndRestore's assign a variable after every step); + the epoch
recorder with telemetry sampling every second (train.py's defaults); train.py's whole
set (recorder, BackupAndRestore); that set on the schedule's copy; and, on request
(train.py+nan), the set train.py had until 2026-11-25, with TerminateOnNaN; and, on
request (arrays), bare with numpy arrays into fit instead of the distributed dataset, as
bench/bare_keras.py. And the learning rate alone, the timer only in each: control (a
second copy compiled like bare's, which shows what a copy alone changes), flat (dlscale's
schedule without warm-up, the default: a schedule returning the constant rate) and warmup
(the warm-up schedule).
Prints a Markdown table: median steady epoch per set, and its ratio to bare.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "bench")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tf.keras is tf_keras, as in train.py

DEFAULT_SETS = ["bare", "nan", "backup", "nan+backup", "recorder", "train.py", "schedule"]
ALL_SETS = DEFAULT_SETS + ["train.py+nan", "arrays", "control", "flat", "warmup"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="MobileNetV2")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=24, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=3, help="per fit (the first untimed)")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--batch", type=int, default=64, help="per replica")
    parser.add_argument("--sets", nargs="+", default=DEFAULT_SETS,
                        help=f"callback sets to time (default: {' '.join(DEFAULT_SETS)}; "
                        "also: arrays)")
    args = parser.parse_args(argv)
    if "bare" not in args.sets or not set(args.sets) <= set(ALL_SETS):
        parser.error(f"--sets {' '.join(args.sets)}: expected bare and any of "
                     f"{', '.join(ALL_SETS[1:])}")

    import tensorflow as tf
    from bare_keras import EpochTimer  # the bare script's timer, the same in every set

    from dlscale.train import training
    from dlscale.train.keraschoice import keras as load_keras
    from dlscale.train.telemetry import Sampler

    keras = load_keras()
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.replicas)])
    shape, classes, global_batch = (args.image_size, args.image_size, 3), 10, \
        args.batch * args.replicas
    lr = 0.01 * args.replicas

    def compiled(rate):
        with strategy.scope():
            model = training.build_model(args.model, shape, classes)
            model.compile(optimizer=training.make_optimizer("sgd", rate), metrics=["accuracy"],
                          loss="sparse_categorical_crossentropy")
        return model

    keras.utils.set_random_seed(0)
    constant = compiled(lr)
    scheduled = compiled(training.warmup_schedule(0.01, lr, args.steps))
    extra = {"control": lambda: compiled(lr),  # built only when asked for
             "flat": lambda: compiled(training.warmup_schedule(0.01, lr, 0))}
    extra = {name: make() for name, make in extra.items() if name in args.sets}
    data = strategy.distribute_datasets_from_function(
        lambda context: training.synthetic_dataset(
            shape, classes, context.get_per_replica_batch_size(global_batch), 0))

    work = Path(tempfile.mkdtemp(prefix="dlscale-bench-callbacks-"))
    sampler = Sampler(work / "telemetry.csv", 1.0, gpus=False)

    def recorder(name):
        return training.epoch_recorder(work / f"{name}.jsonl", args.steps, global_batch,
                                       lambda model: 0.0, True, sampler)

    def backup(name, round_):
        # a fresh folder each fit: a backup left by the last fit would skip its epochs
        return keras.callbacks.BackupAndRestore(str(work / f"backup-{name}-{round_}"),
                                                delete_checkpoint=False)

    import numpy as np

    rng = np.random.default_rng(0)  # the bare script's input: arrays in memory
    x = rng.integers(0, 256, (args.steps * global_batch, *shape), dtype=np.uint8)
    y = rng.integers(0, classes, args.steps * global_batch)

    def fit(model, callbacks=lambda n, r: [], arrays=False):
        def run(name, round_):
            timer = EpochTimer()
            if arrays:  # Keras distributes the arrays, shuffled each epoch
                model.fit(x, y, batch_size=global_batch, epochs=args.epochs, verbose=0,
                          callbacks=[timer])
            else:
                model.fit(data, epochs=args.epochs, steps_per_epoch=args.steps, verbose=0,
                          callbacks=[timer, *callbacks(name, round_)])
            if not hasattr(model, "_training_state"):  # BackupAndRestore's end deletes it,
                model._training_state = None  # and the next fit without one reads it
            return timer.seconds[1:]
        return run

    def train_py(n, r):
        return [recorder(n), backup(n, r)]

    def train_py_before(n, r):  # until 2026-11-25
        return [recorder(n), keras.callbacks.TerminateOnNaN(), backup(n, r)]

    sets = {  # short name: (label, fit)
        "bare": ("bare (timer only)", fit(constant)),
        "nan": ("+ TerminateOnNaN", fit(constant, lambda n, r: [
            keras.callbacks.TerminateOnNaN()])),
        "backup": ("+ BackupAndRestore", fit(constant, lambda n, r: [backup(n, r)])),
        "nan+backup": ("+ TerminateOnNaN + BackupAndRestore", fit(constant, lambda n, r: [
            keras.callbacks.TerminateOnNaN(), backup(n, r)])),
        "recorder": ("+ epoch recorder and telemetry", fit(constant, lambda n, r: [
            recorder(n)])),
        "train.py": ("train.py's set", fit(constant, train_py)),
        "schedule": ("train.py's set, warm-up schedule", fit(scheduled, train_py)),
        "train.py+nan": ("train.py's set before 2026-11-25 (+ TerminateOnNaN)",
                         fit(constant, train_py_before)),
        "arrays": ("bare, numpy arrays into fit (bench/bare_keras.py's input)",
                   fit(constant, arrays=True)),
        "control": ("bare on a second copy of its model", fit(extra.get("control"))),
        "flat": ("bare on dlscale's schedule without warm-up", fit(extra.get("flat"))),
        "warmup": ("bare on the warm-up schedule", fit(scheduled)),
    }
    sets = {name: sets[name] for name in args.sets}
    for model in (constant, scheduled, *extra.values()):  # trace and warm up, untimed
        model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0)
    sampler.start()
    steady = {name: [] for name in sets}
    began = time.time()
    for round_ in range(args.rounds):
        names = list(sets) if round_ % 2 == 0 else list(reversed(sets))
        for index, name in enumerate(names):
            steady[name] += sets[name][1](str(index), round_)
        print(f"round {round_ + 1}: " + json.dumps(
            {n: round(statistics.median(v), 3) for n, v in steady.items()}),
            file=sys.stderr, flush=True)
    sampler.stop()
    base = statistics.median(steady["bare"])
    print(f"machine: {platform.node()}, {os.cpu_count()} cores; {args.model}, "
          f"{args.replicas} replica(s), {args.image_size} px, batch {args.batch} per replica, "
          f"{args.steps} steps per epoch, {args.rounds} rounds x {args.epochs - 1} timed "
          f"epochs per set, {time.time() - began:.0f} s\n")
    print("| callbacks | median steady epoch [s] | spread (min-max) [s] | ratio to bare |")
    print("|---|---|---|---|")
    for name, values in steady.items():
        median = statistics.median(values)
        print(f"| {sets[name][0]} | {median:.3f} | {min(values):.3f}-{max(values):.3f} | "
              f"{median / base:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
