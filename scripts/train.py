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

import argparse
import hashlib
import json
import os
import sys
import time
import traceback
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

from dlscale import cli as K
from dlscale.cli import quiet_tensorflow
from dlscale.vocabulary import (COMMUNICATIONS, DEFAULTS, DEVICES, LOOPS, LR_SCALINGS,
                                OPTIMIZERS, PRECISIONS, STRATEGIES)
from dlscale.outcomes import EXIT_STATUS, STATE, write_outcome
from dlscale.telemetry import TELEMETRY, describe_system
from dlscale.training import RunError, read_records



class Tee:
    """Copies what Keras prints to stdout into train.log as well (see tee_stdout)."""

    def __init__(self, stream, file):
        self.stream, self.file = stream, file

    def write(self, text):
        self.stream.write(text)
        self.file.write(text)
        return len(text)

    def flush(self):
        self.stream.flush()
        self.file.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


@contextmanager
def tee_stdout(path: Path):
    """stdout goes to `path` too while the block runs; then the file is closed and
    sys.stdout is what it was."""
    original = sys.stdout
    with open(path, "a", buffering=1) as file:
        sys.stdout = Tee(original, file)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stdout = original


def steps_range(text: str) -> tuple[int, int]:
    first, _, last = text.partition(",")
    if not (first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last)):
        raise argparse.ArgumentTypeError(f"expected FIRST,LAST steps such as 2,4, got '{text}'")
    return int(first), int(last)


def parse_args(argv=None) -> argparse.Namespace:
    train, data = DEFAULTS["training"], DEFAULTS["data"]
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--data-dir", required=True, type=Path, help="folder with manifest.json and shards")
    add("--out", required=True, type=Path, help="run folder for train.log, epochs.jsonl, run.json")
    add("--model", default="ResNet50V2",
        help="keras.applications name (weights=None) or SimpleCNN (default: ResNet50V2)")
    add("--gpus", type=int, default=1, help="replicas in total, over all workers (default: 1)")
    add("--nodes", type=int, default=1, help="nodes the run spans (default: 1)")
    add("--strategy", choices=["auto", *STRATEGIES], default="auto",
        help="auto: mirrored in one process, multiworker when there are several workers; "
             "horovod: one process per GPU, started by horovodrun (see launch.py)")
    add("--epochs", type=int, default=train["epochs"])
    add("--batch-per-gpu", type=int, default=train["batch_per_gpu"],
        help="images per replica per step")
    add("--batch-per-gpu-file", type=Path,
        help="take the batch per replica from find_batch_size.py's JSON (batch_per_gpu: auto)")
    add("--synthetic", action="store_true",
        help="train on one repeated random batch (no input pipeline): the model's own speed")
    add("--base-lr", type=float, default=train["base_lr"], help="learning rate of one replica")
    add("--lr-scaling", choices=LR_SCALINGS, default=train["lr_scaling"],
        help="linear: lr = base x replicas (default); none: lr = base")
    add("--warmup-epochs", type=float, default=train["warmup_epochs"],
        help="ramp the rate linearly from base to scaled over this many epochs")
    add("--loop", choices=LOOPS, default=train["loop"],
        help="fit: Keras' Model.fit; custom: a tf.function step under strategy.run, the loss "
             "averaged over the global batch (mirrored and multiworker)")
    add("--optimizer", choices=OPTIMIZERS, default=train["optimizer"],
        help="sgd (with --momentum) or adam; the rate's scaling and warm-up apply to both")
    add("--momentum", type=float, default=train["momentum"], help="SGD momentum")
    add("--precision", choices=PRECISIONS, default=train["precision"],
        help="mixed_auto: bfloat16 where the hardware has it, else float16 with loss scaling")
    add("--xla", action=argparse.BooleanOptionalAction, default=False, help="jit_compile the step")
    add("--device", choices=DEVICES, default=train["device"],
        help="cpu: replicas on logical CPU devices (no GPU needed)")
    add("--seed", type=int, default=train["seed"])
    add("--steps-per-epoch", type=int,
        help="cap the steps of an epoch (default: all training images once)")
    add("--image-size", type=int,
        help="the model's input size in pixels; when the shards are smaller (data.resize: "
             "on_device) the model's first layer resizes them (default: the shards' size)")
    add("--shuffle-buffer", type=int, default=data["shuffle_buffer"],
        help="training reader's shuffle buffer, in records (default: %(default)s)")
    add("--communication", choices=COMMUNICATIONS, default=train["communication"],
        help="multiworker collectives: auto (NCCL on GPUs, ring on CPUs), nccl or ring")
    add("--save-model", action=argparse.BooleanOptionalAction, default=False,
        help="save the final model as model.keras in --out (chief only)")
    add("--tensorboard", action=argparse.BooleanOptionalAction, default=False,
        help="write TensorBoard event files to --out/tensorboard (chief only)")
    add("--profile-steps", type=steps_range, metavar="FIRST,LAST",
        help="profile these training steps into --out/tensorboard (chief only)")
    add("--telemetry-interval", type=float, default=train["telemetry_interval_s"],
        metavar="SECONDS", help="sample host CPU, RSS and (NVML) GPU use into --out/"
        "telemetry.csv every SECONDS from the chief; 0: off (default: %(default)s)")
    add("--synthetic-check-steps", type=int, default=0, metavar="N",
        help="after training, time N steps on synthetic input (the model's speed without "
             "the input pipeline) for the input-bound check; 0: off")
    add("--attempt", type=int, default=1,
        help="which attempt at this point this is (the workflow counts failed ones)")
    add("--time-limit-min", type=float,
        help="stop at an epoch boundary before this many minutes from the start (status "
             "timeout, resumable); inside a SLURM job the job's own end time is used")
    args = parser.parse_args(argv)
    if args.batch_per_gpu_file:
        args.batch_per_gpu = int(json.loads(args.batch_per_gpu_file.read_text())["batch_per_gpu"])
    for name in ("gpus", "nodes", "epochs", "batch_per_gpu", "shuffle_buffer", "steps_per_epoch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.base_lr <= 0 or args.warmup_epochs < 0 or not 0 <= args.momentum < 1:
        parser.error("--base-lr must be > 0, --warmup-epochs >= 0 and 0 <= --momentum < 1")
    return args


def run(args: argparse.Namespace, started: datetime, stack: ExitStack) -> dict:
    """Train and evaluate; return the run record (status completed, failed, out_of_memory
    or timeout). Raises RunError when the run cannot start or go on."""
    quiet_tensorflow()
    from dlscale import training as T
    from dlscale.backends import make_backend
    from dlscale.tfrecords import load_manifest

    backend = make_backend(resolve_strategy(args), args)
    manifest = load_manifest(args.data_dir)
    state, note, resuming = open_state(args, backend, manifest, stack)
    say = print if backend.chief else (lambda *a, **k: None)
    backend.setup()
    sampler = start_telemetry(args, backend, stack)
    plan = T.plan_run(batch_per_gpu=args.batch_per_gpu, replicas=backend.replicas,
                      train_images=manifest["splits"]["train"]["count"],
                      steps_per_epoch=args.steps_per_epoch, base_lr=args.base_lr,
                      lr_scaling=args.lr_scaling, warmup_epochs=args.warmup_epochs,
                      xla=args.xla, device=args.device, devices_in_process=len(backend.devices))
    precision = T.resolve_precision(args.precision, args.device)
    model, recorder, callbacks = build(args, backend, plan, manifest, precision, state,
                                       T.job_deadline(args.time_limit_min, started.timestamp()),
                                       sampler)
    train_ds, test_ds = backend.datasets(*inputs(args, manifest, plan), plan.global_batch)
    for line in filter(None, [summary(args, backend, plan, manifest, precision), note,
                              plan.xla_note, resuming and "resuming from the backup in "
                              f"{state / ('ckpt' if args.loop == 'custom' else 'backup')}"]):
        say(f"dlscale train: {line}")
    train = trainer(args, backend, plan, model, train_ds, callbacks, state)
    t0 = time.perf_counter()
    status, reason = fit(train, args, precision)
    fit_seconds = time.perf_counter() - t0
    if status == "completed" and recorder.saw_nan:
        status, reason = "failed", "loss became NaN or infinite; training was stopped"
    test = {}
    if status == "completed" and not args.synthetic:
        test = backend.reduce_test(model.evaluate(test_ds, verbose=0, return_dict=True),
                                   manifest)
        say(f"dlscale train: test loss {test['loss']:.4f}, test accuracy {test['accuracy']:.4f}")
    elif reason:
        say(f"dlscale train: {reason}")
    if status == "completed" and args.save_model:
        backend.save_model(model, args.out / "model.keras")
    synthetic = (synthetic_speed(args, backend, plan, manifest, model)
                 if status == "completed" and args.synthetic_check_steps else None)
    if sampler:
        sampler.stop()
    info = record(args, backend, plan, manifest, precision, started, status, reason, test,
                  fit_seconds, T.read_records(state / "epochs.jsonl"),
                  resumed_at=(recorder.first_epoch + 1) if resuming else None, note=note)
    info["telemetry"] = ({"file": TELEMETRY, "interval_s": args.telemetry_interval,
                          "gpu_note": sampler.gpu_note} if sampler else None)
    info["synthetic_images_per_s"] = synthetic
    if backend.chief:
        write_outcome(args.out, info)
    return info


def start_telemetry(args, backend, stack: ExitStack):
    """The chief's sampler (telemetry.csv in the run folder), stopped when the run ends."""
    if not backend.chief or args.telemetry_interval <= 0:
        return None
    from dlscale.telemetry import Sampler

    sampler = Sampler(args.out / TELEMETRY, args.telemetry_interval,
                      gpus=args.device == "gpu").start()
    stack.callback(sampler.stop)
    return sampler


def synthetic_speed(args, backend, plan, manifest: dict, model) -> float:
    """Images/s of the trained model on synthetic input (one repeated random batch per
    replica, no reading or decoding): timed over --synthetic-check-steps steps after as
    many untimed ones, through the same strategy. Real / this < 1 means the input
    pipeline holds training back."""
    from dlscale import training as T

    def synthetic_input(context):
        return T.synthetic_dataset(tuple(manifest["image_shape"]), manifest["num_classes"],
                                   context.get_per_replica_batch_size(plan.global_batch),
                                   args.seed)

    train_ds, _ = backend.datasets(synthetic_input, inputs(args, manifest, plan)[1],
                                   plan.global_batch)  # the test input is not read
    times = []
    keras = K.keras()
    timer = keras.callbacks.LambdaCallback(
        on_epoch_begin=lambda epoch, logs: times.append(time.perf_counter()),
        on_epoch_end=lambda epoch, logs: times.append(time.perf_counter()))
    if not hasattr(model, "_training_state"):  # BackupAndRestore deletes it as fit ends,
        model._training_state = None           # and tf-keras' next fit reads it
    model.fit(train_ds, epochs=2, steps_per_epoch=args.synthetic_check_steps, verbose=0,
              callbacks=[timer])
    return round(args.synthetic_check_steps * plan.global_batch / (times[3] - times[2]), 2)


def build(args, backend, plan, manifest: dict, precision: str, state: Path, deadline,
          sampler=None):
    """The compiled model in the backend's scope, its epoch recorder and its callbacks."""
    from dlscale import training as T

    keras = K.keras()
    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(precision)
    schedule = T.warmup_schedule(args.base_lr, plan.lr, plan.warmup_steps)
    recorder = T.epoch_recorder(state / "epochs.jsonl", plan.steps, plan.global_batch,
                                backend.lr_of(schedule), backend.chief, sampler)
    with backend.scope():
        model = T.build_model(args.model, tuple(manifest["image_shape"]),
                              manifest["num_classes"], args.image_size)
        callbacks = (backend.callbacks(recorder, keras.callbacks.TerminateOnNaN(),
                                       str(state / "backup"), plan) if args.loop == "fit"
                     else [recorder]) + chief_callbacks(args, backend)
        if deadline is not None:  # last: it stops training after the backup is saved
            callbacks.append(T.deadline_stop(deadline, backend.agree))
        model.compile(optimizer=backend.optimizer(plan, schedule), metrics=["accuracy"],
                      loss="sparse_categorical_crossentropy", jit_compile=plan.xla)
    return model, recorder, callbacks


def trainer(args, backend, plan, model, train_ds, callbacks: list, state: Path):
    """The training loop to run: Keras' fit, or the custom loop."""
    if args.loop == "custom":
        from dlscale.customloop import CustomLoop

        loop = CustomLoop(backend, model, plan, state / "ckpt")
        return lambda: loop.train(train_ds, args.epochs, callbacks, backend.chief)
    return lambda: model.fit(train_ds, epochs=args.epochs, steps_per_epoch=plan.steps,
                             verbose=2 if backend.chief else 0, callbacks=callbacks)


def chief_callbacks(args, backend) -> list:
    """TensorBoard event files and a profiler trace of --profile-steps, from the chief."""
    if not backend.chief or not (args.tensorboard or args.profile_steps):
        return []
    keras = K.keras()
    return [keras.callbacks.TensorBoard(log_dir=str(args.out / "tensorboard"),
                                        profile_batch=args.profile_steps or 0)]


def open_state(args, backend, manifest: dict, stack: ExitStack):
    """The chief readies the run's state (resume only with the same settings) and tees
    stdout into its train.log; returns (state folder, note for the log, resuming)."""
    from dlscale.training import prepare_state

    state = args.out / STATE
    backup = state / ("ckpt" if args.loop == "custom" else "backup")  # what a rerun resumes
    resuming = backend.can_resume and backup.is_dir() and any(backup.iterdir())
    note = None
    if backend.chief:  # before any worker can restore: the others wait for the chief
        note = prepare_state(state, run_settings(args, backend.kind, manifest), args.epochs)
        resuming = resuming and backup.is_dir()
        if not resuming:  # from epoch 1: an earlier attempt's lines do not belong here
            for name in ("train.log", "epochs.jsonl"):
                (state / name).unlink(missing_ok=True)
        stack.enter_context(tee_stdout(state / "train.log"))
    return state, note, resuming


def inputs(args, manifest: dict, plan):
    """(train input function of an InputContext, test input of (batch, shards, index))."""
    from dlscale import training as T
    from dlscale.tfrecords import make_dataset

    def train_input(context):
        batch = context.get_per_replica_batch_size(plan.global_batch)
        seed = args.seed + context.input_pipeline_id
        if args.synthetic:
            return T.synthetic_dataset(tuple(manifest["image_shape"]), manifest["num_classes"],
                                       batch, seed)
        return make_dataset(args.data_dir, "train", batch, training=True, seed=seed,
                            shuffle_buffer=args.shuffle_buffer,
                            num_shards=context.num_input_pipelines,
                            shard_index=context.input_pipeline_id)

    def test_input(batch, shards, index):
        return make_dataset(args.data_dir, "test", batch, training=False, num_shards=shards,
                            shard_index=index)

    return train_input, test_input


def summary(args, backend, plan, manifest: dict, precision: str) -> str:
    facts = input_facts(args, manifest)
    return (f"{args.model} on {backend.replicas} replica(s) [{backend.kind}, {args.loop}: "
            f"{', '.join(backend.devices)} x {backend.size} worker(s)], global batch "
            f"{plan.global_batch}, lr {plan.lr:g}, {plan.steps} steps/epoch of "
            f"{manifest['splits']['train']['count']} images "
            f"({facts['resize']} resize to {facts['image_size']} px), "
            f"{precision}, "
            f"xla {'on' if plan.xla else 'off'}{', synthetic input' if args.synthetic else ''}")


def fit(train, args, precision: str):
    """Run the training loop; (status, reason) of how it ended."""
    import tensorflow as tf

    from dlscale.training import DeadlineReached

    try:
        train()
    except DeadlineReached as stop:
        left = max(0.0, stop.deadline - time.time())
        return "timeout", (
            f"stopped after epoch {stop.epoch} of {args.epochs}: the next epoch (up to "
            f"{1.5 * stop.longest:.0f} s) would not end within the {left:.0f} s left before "
            "the time limit; a rerun continues from the last epoch, with more time")
    except tf.errors.ResourceExhaustedError as exc:
        return "out_of_memory", (
            f"out of memory with {args.batch_per_gpu} images per GPU ({precision}, "
            f"{args.model}): lower batch_per_gpu, or set batch_per_gpu: auto to find the "
            f"largest that fits ({str(exc).strip().splitlines()[0][:200]})")
    return "completed", None


def record(args, backend, plan, manifest: dict, precision: str, started: datetime,
           status: str, reason, test: dict, fit_seconds: float, records: list[dict], *,
           resumed_at, note) -> dict:
    """The run.json of a run."""
    from dlscale import training as T

    return {
        "status": status, "failure": reason, "model": args.model, **backend.facts(),
        "replicas": backend.replicas, "gpus_asked": args.gpus, "nodes": args.nodes,
        "device_kind": args.device, "batch_per_gpu": args.batch_per_gpu,
        "global_batch": plan.global_batch, "optimizer": args.optimizer, "loop": args.loop,
        "model_file": "model.keras" if args.save_model and status == "completed" else None,
        "tensorboard": "tensorboard" if args.tensorboard or args.profile_steps else None,
        "profile_steps": list(args.profile_steps) if args.profile_steps else None,
        "base_lr": args.base_lr, "lr_scaling": args.lr_scaling, "lr": plan.lr,
        "warmup_epochs": args.warmup_epochs, "momentum": args.momentum,
        "precision": precision, "precision_asked": args.precision, "xla": plan.xla,
        "xla_asked": args.xla, "xla_note": plan.xla_note,
        "seed": args.seed, "synthetic_input": args.synthetic,
        "epochs": args.epochs, "epochs_completed": len(records),
        "resumed_at_epoch": resumed_at, "steps_per_epoch": plan.steps,
        "train_images": manifest["splits"]["train"]["count"],
        "images_per_epoch": plan.steps * plan.global_batch,
        "test_images": manifest["splits"]["test"]["count"],
        "test_loss": test.get("loss"), "test_accuracy": test.get("accuracy"),
        "fit_seconds": round(fit_seconds, 3),
        "dataset": {"dir": str(args.data_dir), "name": manifest["dataset"],
                    "image_shape": manifest["image_shape"],
                    "native_shape": manifest.get("native_shape")},
        **input_facts(args, manifest),
        **T.environment_facts(), "versions": (versions := T.versions()),
        "system": describe_system(versions),
        "attempt": args.attempt, "state_note": note,
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": [Path(sys.argv[0]).name, *sys.argv[1:]],
    }


def model_size(args, manifest: dict) -> int:
    return args.image_size or manifest["image_shape"][0]


def input_facts(args, manifest: dict) -> dict:
    """Where the images were brought to the model's size: prepare (shards at that size),
    on_device (the model's first layer), or none (the dataset's own size)."""
    size, shards = model_size(args, manifest), manifest["image_shape"]
    native = manifest.get("native_shape", shards)
    resize = ("on_device" if shards[:2] != [size, size]
              else "prepare" if native[:2] != shards[:2] else "none")
    return {"resize": resize, "image_size": size}


def resolve_strategy(args: argparse.Namespace) -> str:
    if args.strategy != "auto":
        return args.strategy
    tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS", os.environ.get("SLURM_NTASKS", 1)))
    multi = args.nodes > 1 or os.environ.get("TF_CONFIG") or tasks > 1
    return "multiworker" if multi else "mirrored"


def run_settings(args: argparse.Namespace, strategy_kind: str, manifest: dict) -> dict:
    """What defines the run (training.RESUME_KEYS): a backup made with other settings is
    not resumed. The data is identified by the manifest, which lists every shard."""
    from dlscale.tfrecords import MANIFEST

    digest = hashlib.sha256((args.data_dir / MANIFEST).read_bytes()).hexdigest()
    return {"model": args.model, "gpus": args.gpus, "strategy": strategy_kind,
            "batch_per_gpu": args.batch_per_gpu, "base_lr": args.base_lr,
            "lr_scaling": args.lr_scaling, "warmup_epochs": args.warmup_epochs,
            "momentum": args.momentum, "precision": args.precision, "seed": args.seed,
            "synthetic": args.synthetic, "steps_per_epoch": args.steps_per_epoch,
            "loop": args.loop, "optimizer": args.optimizer,
            "image_shape": manifest["image_shape"], "data_sha256": digest,
            "image_size": model_size(args, manifest),
            "epochs": args.epochs}


def chief_process() -> bool:
    """Whether this process writes the records (rank or task 0), known without TensorFlow."""
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if name in os.environ:
            return os.environ[name] == "0"
    from dlscale.training import worker_identity

    return worker_identity()[0] == 0


def record_failure(args: argparse.Namespace, reason: str, started: datetime) -> None:
    """run.json for a run that stopped with an error before it could describe itself."""
    from dlscale.training import environment_facts

    if not chief_process() or (args.out / "run.json").exists():
        return
    info = {"status": "failed", "failure": reason, "model": args.model,
            "strategy": args.strategy, "replicas": None, "gpus_asked": args.gpus,
            "nodes": args.nodes, "batch_per_gpu": args.batch_per_gpu,
            "global_batch": args.batch_per_gpu * args.gpus, "precision": args.precision,
            "epochs": args.epochs, "epochs_completed": 0, "images_per_epoch": None,
            "test_accuracy": None, "attempt": args.attempt, **environment_facts(),
            "started": started.isoformat(timespec="seconds"),
            "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": [Path(sys.argv[0]).name, *sys.argv[1:]]}
    info["epochs_completed"] = len(read_records(args.out / STATE / "epochs.jsonl"))
    write_outcome(args.out, info)


def main(argv=None) -> int:
    args = parse_args(argv)
    started = datetime.now(timezone.utc)
    try:
        with ExitStack() as stack:  # what run() opens is closed before a failure is recorded
            info = run(args, started, stack)
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        record_failure(args, str(exc), started)
        return exc.code
    except Exception as exc:  # a crash: the traceback goes to the log, the reason to run.json
        traceback.print_exc()
        record_failure(args, f"{type(exc).__name__}: {str(exc).strip()[:300]}", started)
        return 1
    if info["failure"]:
        print(f"error: {info['failure']}", file=sys.stderr)
    return EXIT_STATUS[info["status"]]


if __name__ == "__main__":
    sys.exit(main())
