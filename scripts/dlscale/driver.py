"""The training driver behind scripts/train.py: settings -> backend -> data -> model ->
fit -> the run record.

Written records: state/train.log (what Keras prints, teed), state/epochs.jsonl (the epoch
recorder), and at the end run.json through `contract.RunRecord`, which moves the live
records into the run folder. A problem that stops the run is a RunError (exit status in
its `code`); every other ending is a status of the record.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path

from dlscale import cli as K
from dlscale import phases
from dlscale.cli import quiet_tensorflow
from dlscale.contract import (
    EPOCHS,
    EXIT_STATUS,
    RUN_JSON,
    STATE,
    TELEMETRY,
    TRAIN_LOG,
    RunRecord,
    Status,
    read_epochs,
)
from dlscale.files import unshare
from dlscale.settings import Settings, resume_key
from dlscale.telemetry import describe_system
from dlscale.training import RunError


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


def run(settings: Settings, started: datetime, stack: ExitStack) -> dict:
    """Train and evaluate; return the run record (status completed, failed, out_of_memory
    or timeout). Raises RunError when the run cannot start or go on."""
    from dlscale import training as T

    if problem := T.software_problem(settings.modules, settings.container):
        raise RunError(problem, 2)
    quiet_tensorflow()
    import tensorflow  # noqa: F401  (imported here, so that its cost is its phase's)

    from dlscale.backends import make_backend
    from dlscale.tfrecords import load_manifest

    K.keras()
    phases.mark("imports")

    backend = make_backend(resolve_strategy(settings), settings)
    manifest = load_manifest(settings.data_dir)
    state, note, resuming = open_state(settings, backend, manifest, stack)
    say = print if backend.chief else (lambda *a, **k: None)
    backend.setup()
    sampler = start_telemetry(settings, backend, stack)
    plan = T.plan_run(batch_per_gpu=settings.batch_per_gpu, replicas=backend.replicas,
                      train_images=manifest["splits"]["train"]["count"],
                      steps_per_epoch=settings.steps_per_epoch, base_lr=settings.base_lr,
                      lr_scaling=settings.lr_scaling, warmup_epochs=settings.warmup_epochs,
                      xla=settings.xla, device=settings.device,
                      devices_in_process=len(backend.devices))
    precision = T.resolve_precision(settings.precision, settings.device)
    notes: list[str] = []  # what went wrong beside the training: run.json and train.log
    if os.environ.get(SLOW_STEP_ENV):
        notes.append(f"slowed for a test: {SLOW_STEP_ENV}={os.environ[SLOW_STEP_ENV]} s "
                     "of sleep after every step")
    deadline = T.job_deadline(settings.time_limit_min, started.timestamp(), notes)
    backup = backup_dir(settings, state)

    def announce(epoch: int) -> None:  # what the resume did, once the first epoch begins
        if resuming and epoch:
            say(f"dlscale train: resuming from the backup in {backup} at epoch {epoch + 1}")
        elif resuming:
            say(f"dlscale train: the backup in {backup} held no finished epoch: starting "
                "at epoch 1")

    model, recorder, callbacks = build(settings, backend, plan, manifest, precision, state,
                                       deadline, sampler, announce)
    phases.mark("model")
    done = T.completed_epochs(backup) if resuming else 0  # the order goes on from there
    train_ds, test_ds = backend.datasets(*inputs(settings, manifest, plan, done),
                                         plan.global_batch)
    phases.mark("data")
    for line in filter(None, [summary(settings, backend, plan, manifest, precision), note,
                              *notes, plan.xla_note]):
        say(f"dlscale train: {line}")
    train = trainer(settings, backend, plan, model, train_ds, callbacks, state)
    phases.mark("first_step")
    t0 = time.perf_counter()
    status, reason = fit(train, settings, precision)
    fit_seconds = time.perf_counter() - t0
    phases.mark("last_step")
    if resuming and recorder.first_epoch is None and status is Status.COMPLETED:
        say(f"dlscale train: the backup in {backup} holds all {settings.epochs} epochs (the "
            "last attempt ended after its training): nothing to train again")
    if status is Status.COMPLETED and recorder.saw_nan:
        status, reason = Status.FAILED, "loss became NaN or infinite; training was stopped"
    test = {}
    if status is Status.COMPLETED and not settings.synthetic:
        test = backend.reduce_test(model.evaluate(test_ds, verbose=0, return_dict=True),
                                   manifest)
        say(f"dlscale train: test loss {test['loss']:.4f}, test accuracy {test['accuracy']:.4f}")
    elif reason:
        say(f"dlscale train: {reason}")
    if status is Status.COMPLETED and settings.save_model:
        backend.save_model(model, settings.out / "model.keras")
    synthetic = (synthetic_speed(settings, backend, plan, manifest, model)
                 if status is Status.COMPLETED and settings.synthetic_check_steps else None)
    if sampler:
        sampler.stop()
        if sampler.error:
            notes.append(f"telemetry stopped sampling: {sampler.error}")
            say(f"dlscale train: warning: {notes[-1]}")
    phases.mark("evaluated")
    info = record(settings, backend, plan, manifest, precision, started, status, reason, test,
                  fit_seconds, read_epochs(state / EPOCHS),
                  resumed_at=resumed_at(resuming, recorder, settings.epochs), note=note,
                  notes=notes)
    info["telemetry"] = ({"file": TELEMETRY, "interval_s": settings.telemetry_interval,
                          "gpu_note": sampler.gpu_note} if sampler else None)
    info["synthetic_images_per_s"] = synthetic
    if backend.chief:
        info.write(settings.out)
    return info


def resumed_at(resuming: bool, recorder, epochs: int) -> int | None:
    """The epoch a resumed run began at; epochs + 1 when its backup already held them all
    (killed after the training, before its record was written): no epoch ran again."""
    if not resuming:
        return None
    return epochs + 1 if recorder.first_epoch is None else recorder.first_epoch + 1


def start_telemetry(settings, backend, stack: ExitStack):
    """The chief's sampler (telemetry.csv in the run folder), stopped when the run ends."""
    if not backend.chief or settings.telemetry_interval <= 0:
        return None
    from dlscale.telemetry import Sampler

    sampler = Sampler(settings.out / TELEMETRY, settings.telemetry_interval,
                      gpus=settings.device == "gpu").start()
    stack.callback(sampler.stop)
    return sampler


def synthetic_speed(settings, backend, plan, manifest: dict, model) -> float:
    """Images/s of the trained model on synthetic input (one repeated random batch per
    replica, no reading or decoding): timed over --synthetic-check-steps steps after as
    many untimed ones, through the same strategy. Real / this < 1 means the input
    pipeline holds training back."""
    from dlscale import training as T

    def synthetic_input(context):
        return T.synthetic_dataset(tuple(manifest["image_shape"]), manifest["num_classes"],
                                   context.get_per_replica_batch_size(plan.global_batch),
                                   settings.seed)

    train_ds, _ = backend.datasets(synthetic_input, inputs(settings, manifest, plan)[1],
                                   plan.global_batch)  # the test input is not read
    step = model.make_train_function()  # Keras' own step under the strategy, without fit
    batches, steps = iter(train_ds), settings.synthetic_check_steps
    for _ in range(steps):  # untimed: tracing and warm-up
        logs = step(batches)
    float(logs["loss"])  # waits for the device to finish
    start = time.perf_counter()
    for _ in range(steps):
        logs = step(batches)
    float(logs["loss"])
    return round(steps * plan.global_batch / (time.perf_counter() - start), 2)


def build(settings, backend, plan, manifest: dict, precision: str, state: Path, deadline,
          sampler=None, on_first=None):
    """The compiled model in the backend's scope, its epoch recorder and its callbacks."""
    from dlscale import training as T

    keras = K.keras()
    keras.utils.set_random_seed(settings.seed)
    keras.mixed_precision.set_global_policy(precision)
    schedule = T.warmup_schedule(settings.base_lr, plan.lr, plan.warmup_steps)
    recorder = T.epoch_recorder(state / EPOCHS, plan.steps, plan.global_batch,
                                backend.lr_of(schedule), backend.chief, sampler, on_first)
    with backend.scope():
        model = T.build_model(settings.model, tuple(manifest["image_shape"]),
                              manifest["num_classes"], settings.image_size,
                              settings.model_from)
        callbacks = (backend.callbacks(recorder, str(backup_dir(settings, state)), plan)
                     if settings.loop == "fit"
                     else [recorder]) + chief_callbacks(settings, backend)
        callbacks += slow_steps()
        if deadline is not None:  # last: it stops training after the backup is saved
            callbacks.append(T.deadline_stop(deadline, backend.agree))
        model.compile(optimizer=backend.optimizer(plan, schedule), metrics=["accuracy"],
                      loss="sparse_categorical_crossentropy", jit_compile=plan.xla)
    return model, recorder, callbacks


def trainer(settings, backend, plan, model, train_ds, callbacks: list, state: Path):
    """The training loop to run: Keras' fit, or the custom loop."""
    if settings.loop == "custom":
        from dlscale.customloop import CustomLoop

        loop = CustomLoop(backend, model, plan, backup_dir(settings, state))
        return lambda: loop.train(train_ds, settings.epochs, callbacks, backend.chief)
    return lambda: model.fit(train_ds, epochs=settings.epochs, steps_per_epoch=plan.steps,
                             verbose=2 if backend.chief else 0, callbacks=callbacks)


def chief_callbacks(settings, backend) -> list:
    """TensorBoard event files and a profiler trace of --profile-steps, from the chief."""
    if not backend.chief or not (settings.tensorboard or settings.profile_steps):
        return []
    keras = K.keras()
    return [keras.callbacks.TensorBoard(log_dir=str(settings.out / "tensorboard"),
                                        profile_batch=settings.profile_steps or 0)]


# Tests only: seconds of sleep after every training step, so that a study is measurably
# slower than its history on any machine (tests/workflow/test_history_workflow.py);
# run.json notes it
SLOW_STEP_ENV = "DLSCALE_TEST_SLOW_STEP_S"


def slow_steps() -> list:
    delay = float(os.environ.get(SLOW_STEP_ENV) or 0)
    if delay <= 0:
        return []
    return [K.keras().callbacks.LambdaCallback(on_train_batch_end=lambda *_: time.sleep(delay))]


def backup_dir(settings, state: Path) -> Path:
    """What a rerun resumes from: Keras' BackupAndRestore folder, or the custom loop's
    checkpoints."""
    return state / ("ckpt" if settings.loop == "custom" else "backup")


def open_state(settings, backend, manifest: dict, stack: ExitStack):
    """The chief readies the run's state (resume only with the same settings) and tees
    stdout into its train.log; returns (state folder, note for the log, resuming)."""
    from dlscale.tfrecords import MANIFEST
    from dlscale.training import prepare_state

    state = settings.out / STATE
    backup = backup_dir(settings, state)
    resuming = backend.can_resume and backup.is_dir() and any(backup.iterdir())
    note = None
    if backend.chief:  # before any worker can restore: the others wait for the chief
        key = resume_key(settings, backend.kind, manifest, settings.data_dir / MANIFEST)
        note = prepare_state(state, key, settings.epochs, backup)
        resuming = resuming and backup.is_dir()
        for name in (TRAIN_LOG, EPOCHS):
            if resuming:  # appended to: the last record's names for them keep their lines
                unshare(state / name)
            else:  # from epoch 1: an earlier attempt's lines do not belong here
                (state / name).unlink(missing_ok=True)
        stack.enter_context(tee_stdout(state / TRAIN_LOG))
    return state, note, resuming


def inputs(settings, manifest: dict, plan, epochs_done: int = 0):
    """(train input function of an InputContext, test input of (batch, shards, index));
    the training input begins where `epochs_done` epochs of a resumed run left it."""
    from dlscale import training as T
    from dlscale.tfrecords import make_dataset

    def train_input(context):
        batch = context.get_per_replica_batch_size(plan.global_batch)
        seed = settings.seed + context.input_pipeline_id
        # each step takes a batch per replica of this pipeline's worker
        taken = epochs_done * plan.steps * (context.num_replicas_in_sync
                                            // context.num_input_pipelines)
        if settings.synthetic:
            return T.synthetic_dataset(tuple(manifest["image_shape"]), manifest["num_classes"],
                                       batch, seed)
        return make_dataset(settings.data_dir, "train", batch, training=True, seed=seed,
                            shuffle_buffer=settings.shuffle_buffer,
                            num_shards=context.num_input_pipelines,
                            shard_index=context.input_pipeline_id, skip_batches=taken,
                            cache=in_memory(settings, manifest, context.num_input_pipelines,
                                            context.input_pipeline_id))

    def test_input(batch, shards, index):
        return make_dataset(settings.data_dir, "test", batch, training=False, num_shards=shards,
                            shard_index=index)

    return train_input, test_input


def in_memory(settings, manifest: dict, pipelines: int, index: int) -> bool:
    """Whether input pipeline `index` of `pipelines` holds its decoded training images in
    memory (they take at most --cache-mb) instead of reading the shards every epoch."""
    from dlscale.tfrecords import split_bytes

    return split_bytes(manifest, "train", pipelines, index) <= settings.cache_mb * 2**20


def summary(settings, backend, plan, manifest: dict, precision: str) -> str:
    facts = input_facts(settings, backend, manifest)
    return (f"{settings.model} on {backend.replicas} replica(s) [{backend.kind}, {settings.loop}: "
            f"{', '.join(backend.devices)} x {backend.size} worker(s)], global batch "
            f"{plan.global_batch}, lr {plan.lr:g}, {plan.steps} steps/epoch of "
            f"{manifest['splits']['train']['count']} images "
            f"({facts['resize']} resize to {facts['image_size']} px, read from "
            f"{facts['train_input']}), "
            f"{precision}, "
            f"xla {'on' if plan.xla else 'off'}{', synthetic input' if settings.synthetic else ''}")


def fit(train, settings, precision: str):
    """Run the training loop; (status, reason) of how it ended."""
    import tensorflow as tf

    from dlscale.training import DeadlineReached

    try:
        train()
    except DeadlineReached as stop:
        left = max(0.0, stop.deadline - time.time())
        return Status.TIMEOUT, (
            f"stopped after epoch {stop.epoch} of {settings.epochs}: the next epoch (up to "
            f"{1.5 * stop.longest:.0f} s) would not end within the {left:.0f} s left before "
            "the time limit; a rerun continues from the last epoch, with more time")
    except (tf.errors.ResourceExhaustedError, OSError) as exc:
        if full := disk_full(exc):
            return Status.FAILED, full
        if isinstance(exc, OSError):
            raise
        return Status.OUT_OF_MEMORY, (
            f"out of memory with {settings.batch_per_gpu} images per GPU ({precision}, "
            f"{settings.model}): lower batch_per_gpu, or set batch_per_gpu: auto to find the "
            f"largest that fits ({str(exc).strip().splitlines()[0][:200]})")
    return Status.COMPLETED, None


def disk_full(exc: BaseException) -> str | None:
    """'no space left on DEVICE (path)' for a full disk or quota, which TensorFlow raises
    as ResourceExhaustedError like device memory; None for anything else."""
    import errno

    text = str(exc)
    number = getattr(exc, "errno", None)
    if number == errno.ENOSPC or "No space left on device" in text:
        what = "no space left on device"
    elif number == errno.EDQUOT or "Disk quota exceeded" in text:
        what = "disk quota exceeded"
    else:
        return None
    where = getattr(exc, "filename", None) or next(
        (word.strip("'\",;:") for word in text.split() if word.startswith(("/", "results/"))),
        None)
    return f"{what}{f' ({where})' if where else ''}: free space there and run again " \
        f"({text.strip().splitlines()[0][:200]})"


def record(settings, backend, plan, manifest: dict, precision: str, started: datetime,
           status: Status, reason, test: dict, fit_seconds: float, records: list[dict], *,
           resumed_at, note, notes: list[str]) -> RunRecord:
    """The run record of a run that got as far as training."""
    from dlscale import training as T

    return RunRecord.ending(
        status, reason, settings.planned(), backend.facts(),
        replicas=backend.replicas, device_kind=settings.device,
        global_batch=plan.global_batch, optimizer=settings.optimizer, loop=settings.loop,
        model_file="model.keras" if settings.save_model and status is Status.COMPLETED
        else None,
        tensorboard="tensorboard" if settings.tensorboard or settings.profile_steps else None,
        profile_steps=list(settings.profile_steps) if settings.profile_steps else None,
        base_lr=settings.base_lr, lr_scaling=settings.lr_scaling, lr=plan.lr,
        warmup_epochs=settings.warmup_epochs, momentum=settings.momentum,
        precision=precision, precision_asked=settings.precision, xla=plan.xla,
        xla_asked=settings.xla, xla_note=plan.xla_note,
        seed=settings.seed, synthetic_input=settings.synthetic,
        epochs_completed=len(records),
        resumed_at_epoch=resumed_at, steps_per_epoch=plan.steps,
        train_images=manifest["splits"]["train"]["count"],
        images_per_epoch=plan.steps * plan.global_batch,
        test_images=manifest["splits"]["test"]["count"],
        test_loss=test.get("loss"), test_accuracy=test.get("accuracy"),
        fit_seconds=round(fit_seconds, 3),
        dataset={"dir": str(settings.data_dir), "name": manifest["dataset"],
                 "image_shape": manifest["image_shape"],
                 "native_shape": manifest.get("native_shape")},
        **input_facts(settings, backend, manifest),
        **T.environment_facts(), versions=(versions := T.versions()),
        system=describe_system(versions), state_note=note, notes=notes,
        started=started.isoformat(timespec="seconds"),
        command=[Path(sys.argv[0]).name, *sys.argv[1:]])


def input_facts(settings, backend, manifest: dict) -> dict:
    """Where the images were brought to the model's size: prepare (shards at that size),
    on_device (the model's first layer), or none (the dataset's own size); and where
    this process's training input came from after the first epoch: memory, files (the
    shards) or synthetic (one repeated batch)."""
    size, shards = settings.model_size(manifest), manifest["image_shape"]
    native = manifest.get("native_shape", shards)
    resize = ("on_device" if shards[:2] != [size, size]
              else "prepare" if native[:2] != shards[:2] else "none")
    source = ("synthetic" if settings.synthetic
              else "memory" if in_memory(settings, manifest, backend.size, backend.rank)
              else "files")
    return {"resize": resize, "image_size": size, "train_input": source}


def resolve_strategy(settings: Settings) -> str:
    if settings.strategy != "auto":
        return settings.strategy
    tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS", os.environ.get("SLURM_NTASKS", 1)))
    multi = settings.nodes > 1 or os.environ.get("TF_CONFIG") or tasks > 1
    return "multiworker" if multi else "mirrored"


def chief_process() -> bool:
    """Whether this process writes the records (rank or task 0), known without TensorFlow."""
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if name in os.environ:
            return os.environ[name] == "0"
    from dlscale.training import worker_identity

    return worker_identity()[0] == 0


def record_failure(settings: Settings, reason: str, started: datetime) -> None:
    """run.json for a run that stopped with an error before it could describe itself."""
    from dlscale.training import environment_facts

    if not chief_process() or (settings.out / RUN_JSON).exists():
        return
    RunRecord.ending(
        Status.FAILED, reason, settings.planned(), environment_facts(),
        epochs_completed=len(read_epochs(settings.out / STATE / EPOCHS)),
        started=started.isoformat(timespec="seconds"),
        command=[Path(sys.argv[0]).name, *sys.argv[1:]]).write(settings.out)


def main(settings: Settings) -> int:
    """Run the point and record how it ended; train.py's exit status."""
    started = datetime.now(UTC)
    try:
        with ExitStack() as stack:  # what run() opens is closed before a failure is recorded
            info = run(settings, started, stack)
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        record_failure(settings, str(exc), started)
        return exc.code
    except Exception as exc:  # a crash: the traceback goes to the log, the reason to run.json
        traceback.print_exc()
        record_failure(settings, f"{type(exc).__name__}: {str(exc).strip()[:300]}", started)
        return 1
    if info["failure"]:
        print(f"error: {info['failure']}", file=sys.stderr)
    return EXIT_STATUS[info.status]
