#!/usr/bin/env python3
"""Find the largest per-GPU batch a model trains with (`batch_per_gpu: auto`).

  find_batch_size.py --model ResNet50V2 --data-dir results/data/cifar10-128px \\
      --precision float32 --out results/batch/ResNet50V2/float32.json

The study's manual step "raise the batch until out of memory", automated: each trial
trains a few steps on one GPU with synthetic images of the dataset's shape, in its own
process (an out-of-memory error cannot poison the next trial); powers of two first,
then a bisection; the result keeps a safety margin (default 0.9) and is rounded down
to a multiple of 8. Needs a GPU: with none visible it stops at once instead of
filling host memory.

Exit status: 0 found; 1 no batch trains or a trial failed for another reason; 5 no GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from dlscale.core.cli import exit_without_teardown
from dlscale.core.vocabulary import DEFAULTS, PRECISIONS
from dlscale.train import keraschoice
from dlscale.train.batchsearch import search

OOM, NO_GPU = 10, 5
OOM_WORDS = ("ResourceExhaustedError", "out of memory", "OOM when allocating",
             "CUDA_ERROR_OUT_OF_MEMORY")


class FinderError(Exception):
    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


def run_trial(args: argparse.Namespace) -> int:
    """In the trial process: a few steps with batch args.trial; exit status says how."""
    keraschoice.quiet_tensorflow()
    import tensorflow as tf
    keras = keraschoice.keras()

    from dlscale.data.tfrecords import load_manifest
    from dlscale.train.training import build_model, cuda_visible_devices, resolve_precision

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        print(f"no GPU visible (CUDA_VISIBLE_DEVICES={cuda_visible_devices()})",
              file=sys.stderr)
        return NO_GPU
    tf.config.set_visible_devices(gpus[:1], "GPU")
    manifest = load_manifest(args.data_dir)
    shape = tuple(manifest["image_shape"])
    keras.mixed_precision.set_global_policy(resolve_precision(args.precision, "gpu"))
    batch = args.trial
    images = tf.zeros((batch, *shape), tf.uint8)
    labels = tf.zeros((batch,), tf.int64)
    data = tf.data.Dataset.from_tensors((images, labels)).repeat()
    try:
        model = build_model(args.model, shape, manifest["num_classes"], args.image_size)
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss="sparse_categorical_crossentropy", jit_compile=args.xla)
        model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
    except tf.errors.ResourceExhaustedError as exc:
        print(f"out of memory at batch {batch}: {str(exc)[:300]}", file=sys.stderr)
        return OOM
    print(json.dumps({"device": tf.config.experimental.get_device_details(gpus[0])}))
    return 0


def trial_in_subprocess(args: argparse.Namespace, batch: int, details: dict) -> bool:
    command = [sys.executable, __file__, "--trial", str(batch), "--model", args.model,
               "--data-dir", str(args.data_dir), "--precision", args.precision,
               *(["--image-size", str(args.image_size)] if args.image_size else []),
               "--steps", str(args.steps), "--xla" if args.xla else "--no-xla"]
    proc = subprocess.run(command, capture_output=True, text=True)
    ok = proc.returncode == 0
    print(f"batch {batch}: {'trains' if ok else 'does not train'}", flush=True)
    if proc.returncode == NO_GPU:
        reason = proc.stderr.strip().splitlines()[-1]  # the trial's own words, not TF's
        raise FinderError(f"batch_per_gpu: auto needs a GPU: {reason}; set "
                          "batch_per_gpu to a number to train on CPUs", NO_GPU)
    if ok:
        details.update(json.loads(proc.stdout.strip().splitlines()[-1]))
        return True
    out_of_memory = proc.returncode in (OOM, -9) or any(w in proc.stderr for w in OOM_WORDS)
    if not out_of_memory:
        raise FinderError(f"trial with batch {batch} failed for another reason than memory "
                          f"(exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data-dir", required=True, type=Path, help="prepared dataset (shape)")
    parser.add_argument("--image-size", type=int,
                        help="the model's input size, when it differs from the shards' "
                             "(data.resize: on_device)")
    parser.add_argument("--precision", default=DEFAULTS["training"]["precision"],
                        choices=PRECISIONS)
    parser.add_argument("--xla", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--out", type=Path, help="JSON with the chosen batch and the trials")
    parser.add_argument("--start", type=int, default=16)
    parser.add_argument("--maximum", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=5, help="training steps per trial")
    parser.add_argument("--margin", type=float, default=0.9,
                        help="keep this fraction of the largest batch that trained")
    parser.add_argument("--trial", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.trial:
        return run_trial(args)
    if not args.out:
        parser.error("--out is required")
    details: dict = {}
    try:
        result = search(lambda b: trial_in_subprocess(args, b, details), args.start,
                        args.maximum, margin=args.margin)
    except FinderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    if result.chosen is None:
        print(f"error: {args.model} does not train even with batch 1 on this GPU",
              file=sys.stderr)
        return 1
    from dlscale.core.files import write_json_atomic
    from dlscale.data.tfrecords import load_manifest

    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, {
        "model": args.model, "precision": args.precision, "xla": args.xla,
        "image_size": args.image_size or load_manifest(args.data_dir)["image_shape"][0],
        "batch_per_gpu": result.chosen, "largest_ok": result.largest_ok,
        "smallest_failed": result.smallest_failed, "margin": args.margin,
        "trials": [{"batch": b, "trains": ok} for b, ok in result.trials],
        "device": details, "when": datetime.now(UTC).isoformat(timespec="seconds"),
    })
    print(f"{args.model} ({args.precision}{', xla' if args.xla else ''}): batch per GPU "
          f"{result.chosen} (largest that trained: {result.largest_ok})")
    return 0


if __name__ == "__main__":
    exit_without_teardown(main)
