#!/usr/bin/env python3
"""Train one point of the scaling study: a Keras model, data-parallel with tf.distribute.

Example (the reference study's `ResNet50.py --epochs 5 --batch_size 256 --n_gpus 1`):
  train.py --data-dir results/data/cifar10-128px --model ResNet50V2 --gpus 1 \\
      --epochs 5 --batch-per-gpu 256 --out results/runs/ResNet50V2/gpus1/rep1

Global batch = batch per GPU x replicas; learning rate = base x replicas (linear
scaling), optionally reached by a gradual warm-up. With --device cpu the replicas are
logical CPU devices, so every path runs without GPUs.

Writes into --out: train.log (the Keras verbose=2 output), epochs.jsonl (one JSON object
per epoch: epoch, seconds, steps, images, lr, loss, accuracy) and run.json (settings,
replicas, devices, SLURM allocation, versions, test accuracy, status), run.json last.
While running, state/ holds the backup that lets a killed or timed-out run, started
again with the same flags, continue from its last finished epoch.

Exit status: 0 completed; 2 bad flags or settings; 3 devices or replicas not as asked;
4 NaN loss; 6 out of memory (with the batch that did not fit); 7 stopped before the time
limit (inside a SLURM job the job's end time, else --time-limit-min). run.json says which,
with the reason, for every one of them, and attempts.jsonl keeps a line per attempt.
A restart whose settings differ from the saved state's starts over (the old state is
moved aside and train.log says so); more epochs than before continue, fewer are refused.
"""

from __future__ import annotations

from dlscale.core.cli import exit_without_teardown
from dlscale.train.allocator import restart_tuned


def main(argv=None) -> int:
    from dlscale.train import driver
    from dlscale.train.settings import parse

    return driver.main(parse(argv, __doc__))


if __name__ == "__main__":
    restart_tuned()  # glibc's malloc tuned for training (dlscale.train.allocator)
    exit_without_teardown(main)
