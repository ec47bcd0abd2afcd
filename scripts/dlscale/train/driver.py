"""The training driver behind scripts/train.py: settings -> backend -> data -> model ->
fit -> the run record.

Written records: state/train.log (what Keras prints, teed), state/epochs.jsonl (the epoch
recorder), and at the end run.json through `contract.RunRecord`, which moves the live
records into the run folder. A problem that stops the run is a RunError (exit status in
its `code`); every other ending is a status of the record.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback
import warnings
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from dlscale.core.contract import (
    EPOCHS,
    EXIT_STATUS,
    MODEL_FILE,
    RUN_JSON,
    STATE,
    TELEMETRY,
    TENSORBOARD,
    TRAIN_LOG,
    RunRecord,
    Status,
    read_epochs,
)
from dlscale.core.errors import RunError, disk_full
from dlscale.core.files import tee_stdout, unshare
from dlscale.jobs import phases
from dlscale.train import keraschoice
from dlscale.train.cluster import worker_identity
from dlscale.train.resume import completed_epochs, prepare_state
from dlscale.train.runinputs import Run, backup_dir, input_facts, inputs, synthetic_speed
from dlscale.train.settings import Settings, resume_key
from dlscale.train.telemetry import describe_system
from dlscale.train.timelimit import DeadlineReached, deadline_stop, job_deadline
from dlscale.train.window import close_window, open_window, profile_note, profile_window


def run(settings: Settings, started: datetime, stack: ExitStack) -> dict:
    """Train and evaluate; return the run record (status completed, failed, out_of_memory
    or timeout). Raises RunError when the run cannot start or go on."""
    from dlscale.train import training

    if problem := training.software_problem(settings.modules, settings.container):
        raise RunError(problem, 2)
    from dlscale.train.keraschoice import framework_problem

    strategy = resolve_strategy(settings)
    cached = keraschoice.compile_cache_entries()  # JAX's compiled programs kept before
    if problem := framework_problem(settings.keras, settings.backend, strategy,
                                    settings.nodes, settings.loop,
                                    tensorboard=settings.tensorboard):
        raise RunError(problem, 2)
    keraschoice.import_framework()  # here, so that its cost is its phase's (no
    # TensorFlow where Keras trains on JAX: dlscale's own reader reads the shards)
    from dlscale.data.tfrecords import load_manifest
    from dlscale.train.strategies import make_backend

    # Keras 3 warns that fit does not shuffle a tf.data input: dlscale's shuffles itself
    warnings.filterwarnings("ignore", "`shuffle=True` was passed", UserWarning)
    phases.mark("imports")

    backend = make_backend(strategy, settings)
    manifest = load_manifest(settings.data_dir)
    state, state_note, resuming = open_state(settings, backend, manifest, stack)
    say = print if backend.chief else (lambda *a, **k: None)
    backend.setup()
    sampler = start_telemetry(settings, backend, stack)
    plan = training.plan_run(batch_per_gpu=settings.batch_per_gpu, replicas=backend.replicas,
                             train_images=manifest["splits"]["train"]["count"],
                             steps_per_epoch=settings.steps_per_epoch, base_lr=settings.base_lr,
                             lr_scaling=settings.lr_scaling, warmup_epochs=settings.warmup_epochs,
                             xla=settings.xla, device=settings.device,
                             devices_in_process=len(backend.devices))
    if backend.kind == "dataparallel":  # JAX compiles every step; it has no choice
        plan = dataclasses.replace(plan, xla=True, xla_note=None if settings.xla else
                                   "XLA is on: JAX compiles every step (xla: false asks "
                                   "TensorFlow only)")
    elif backend.kind == "ddp":  # PyTorch's steps: eager, or torch.compile's (--compile)
        plan = dataclasses.replace(plan, xla=False, xla_note="XLA is off: a torch point "
                                   "runs its steps eagerly, or torch.compile's (sweep.knobs "
                                   "compile)" if settings.xla else None)
    r = Run(settings, backend, plan, manifest,
            training.resolve_precision(settings.precision, settings.device), state)
    notes: list[str] = []  # what went wrong beside the training: run.json and train.log
    if note := profile_note(settings, plan.steps):
        notes.append(note)
    if os.environ.get(SLOW_STEP_ENV):
        notes.append(f"slowed for a test: {SLOW_STEP_ENV}={os.environ[SLOW_STEP_ENV]} s "
                     "of sleep after every step")
    deadline = job_deadline(settings.time_limit_min, started.timestamp(), notes)
    backup = r.backup

    def announce(epoch: int) -> None:  # what the resume did, once the first epoch begins
        if resuming and epoch:
            say(f"dlscale train: resuming from the backup in {backup} at epoch {epoch + 1}")
        elif resuming:
            say(f"dlscale train: the backup in {backup} held no finished epoch: starting "
                "at epoch 1")

    done = completed_epochs(backup) if resuming else 0  # the order goes on from there
    window = open_window(settings, backend, plan.steps, resumed_at=done)
    model, recorder, callbacks = build(r, deadline, sampler, announce, window)
    phases.mark("model")
    train_input, test_input = inputs(r, done)
    train_ds, test_ds = backend.datasets(slow_input(train_input, notes), test_input,
                                         plan.global_batch)
    phases.mark("data")
    for line in filter(None, [summary(r), state_note, *notes, plan.xla_note]):
        say(f"dlscale train: {line}")
    train = trainer(r, model, train_ds, callbacks)
    phases.mark("first_step")
    t0 = time.perf_counter()
    status, reason = fit(train, settings, r.precision)
    fit_seconds = time.perf_counter() - t0
    phases.mark("last_step")
    if resuming and recorder.first_epoch is None and status is Status.COMPLETED:
        say(f"dlscale train: the backup in {backup} holds all {settings.epochs} epochs (the "
            "last attempt ended after its training): nothing to train again")
    if status is Status.COMPLETED and recorder.saw_nan:
        status, reason = Status.FAILED, "loss became NaN or infinite; training was stopped"
    test = {}
    if status is Status.COMPLETED and not settings.synthetic:
        with warnings.catch_warnings():  # Keras 3 warns at the end of a finite test set
            warnings.filterwarnings("ignore", "Your input ran out of data", UserWarning)
            test = backend.evaluate(model, test_ds, manifest)
        if backend.test_note:
            notes.append(backend.test_note)
        say(f"dlscale train: test loss {test['loss']:.4f}, test accuracy {test['accuracy']:.4f}")
    elif reason:
        say(f"dlscale train: {reason}")
    if status is Status.COMPLETED and settings.save_model:
        backend.save_model(model, settings.out / MODEL_FILE)
    synthetic = (synthetic_speed(r, model, test_ds)
                 if status is Status.COMPLETED and settings.synthetic_check_steps else None)
    breakdown = close_window(settings, backend, window, model, status is Status.COMPLETED)
    if sampler:
        sampler.stop()
        if sampler.error:
            notes.append(f"telemetry stopped sampling: {sampler.error}")
            say(f"dlscale train: warning: {notes[-1]}")
    phases.mark("evaluated")
    info = record(r, started, status, reason, test, fit_seconds, read_epochs(state / EPOCHS),
                  resumed_at=resumed_at(resuming, recorder, settings.epochs), note=state_note,
                  notes=notes)
    info.update(backend.peak_memory())  # the chief's (its GPUs', or its process's on CPUs)
    info["telemetry"] = ({"file": TELEMETRY, "interval_s": settings.telemetry_interval,
                          "gpu_note": sampler.gpu_note} if sampler else None)
    info["synthetic_images_per_s"] = synthetic
    info["compile_cache"] = (None if cached is None else  # added 0: nothing compiled anew
                             {"dir": os.environ[keraschoice.CACHE_ENV], "entries_before": cached,
                              "entries_added": keraschoice.compile_cache_entries() - cached})
    info["breakdown"] = breakdown
    if backend.chief:
        phases.finish(info, settings.out)
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
    from dlscale.train.telemetry import Sampler

    sampler = Sampler(settings.out / TELEMETRY, settings.telemetry_interval,
                      gpus=settings.device == "gpu").start()
    stack.callback(sampler.stop)
    return sampler


def build(r: Run, deadline, sampler=None, on_first=None, window=None):
    """The compiled model in the backend's scope, its epoch recorder and its callbacks."""
    from dlscale.train import training

    settings, backend, plan = r.settings, r.backend, r.plan
    keras = keraschoice.keras()
    keraschoice.seed(settings.seed)
    keras.mixed_precision.set_global_policy(r.precision)
    schedule = training.warmup_schedule(settings.base_lr, plan.lr, plan.warmup_steps)
    recorder = training.epoch_recorder(r.state / EPOCHS, plan.steps, plan.global_batch,
                                       backend.lr_of(schedule), backend.chief, sampler, on_first)
    with backend.scope():
        model = training.build_model(settings.model, r.image_shape, r.manifest["num_classes"],
                                     settings.image_size, settings.model_from)
        callbacks = (backend.callbacks(recorder, str(r.backup), plan)
                     if settings.loop == "fit"
                     else [recorder]) + chief_callbacks(settings, backend, plan.steps)
        callbacks += slow_steps() + ([window] if window else [])
        if deadline is not None:  # last: it stops training after the backup is saved
            callbacks.append(deadline_stop(deadline, backend.agree))
        model.compile(optimizer=backend.optimizer(plan, schedule), metrics=["accuracy"],
                      loss="sparse_categorical_crossentropy", jit_compile=plan.xla)
        training.create_step_variables(model)  # the training step is then traced once
    return model, recorder, callbacks


def trainer(r: Run, model, train_ds, callbacks: list):
    """The training loop to run: Keras' fit, the custom loop, or PyTorch's."""
    settings, backend, plan = r.settings, r.backend, r.plan
    if backend.kind == "ddp":
        from dlscale.train import training
        from dlscale.train.frameworks.torch.torchloop import TorchLoop

        loop = backend.loop = TorchLoop(backend, model, plan, settings, training.warmup_schedule(
            settings.base_lr, plan.lr, plan.warmup_steps), r.backup)
        return lambda: loop.train(train_ds, settings.epochs, callbacks, backend.chief)
    if settings.loop == "custom":
        from dlscale.train.frameworks.tensorflow.customloop import CustomLoop

        loop = CustomLoop(backend, model, plan, r.backup)
        return lambda: loop.train(train_ds, settings.epochs, callbacks, backend.chief)
    return lambda: model.fit(train_ds, epochs=settings.epochs, steps_per_epoch=plan.steps,
                             verbose=2 if backend.chief else 0, callbacks=callbacks)


def chief_callbacks(settings, backend, steps_per_epoch: int) -> list:
    """TensorBoard event files and a profiler trace of --profile-steps, from the chief:
    Keras' own on TensorFlow, dlscale's window on JAX and PyTorch (dlscale.train.window)."""
    if not backend.chief or not (settings.tensorboard or settings.profile_steps):
        return []
    ours = bool(settings.profile_steps) and keraschoice.without_tensorflow()
    out = []
    if settings.tensorboard or not ours:  # Keras' own: event files, TensorFlow's profile
        out.append(keraschoice.keras().callbacks.TensorBoard(
            log_dir=str(settings.out / TENSORBOARD),
            profile_batch=0 if ours else settings.profile_steps or 0))
    if ours:
        out.append(profile_window(settings, steps_per_epoch))
    return out


# Tests only: seconds of sleep after every training step, so that a study is measurably
# slower than its history on any machine (tests/workflow/test_history_workflow.py);
# run.json notes it
SLOW_STEP_ENV = "DLSCALE_TEST_SLOW_STEP_S"


# Tests only: seconds of sleep in the input pipeline before every training batch, so that
# a point is input-bound on any machine (tests/workflow/test_why_workflow.py)
SLOW_INPUT_ENV = "DLSCALE_TEST_SLOW_INPUT_S"


def slow_input(train_input, notes: list[str]):
    """The training input function, its batches slowed by SLOW_INPUT_ENV's seconds."""
    delay = float(os.environ.get(SLOW_INPUT_ENV) or 0)
    if delay <= 0:
        return train_input
    notes.append(f"slowed for a test: {SLOW_INPUT_ENV}={delay} s of sleep before every batch")
    if keraschoice.without_tensorflow():  # numpy batches from dlscale's reader
        return lambda context: (time.sleep(delay) or batch for batch in train_input(context))
    import tensorflow as tf

    def slow(*batch):
        done = tf.py_function(lambda: time.sleep(delay) or 0, [], tf.int32)
        with tf.control_dependencies([done]):
            return tf.nest.map_structure(tf.identity, batch)

    return lambda context: train_input(context).map(slow)


def slow_steps() -> list:
    delay = float(os.environ.get(SLOW_STEP_ENV) or 0)
    if delay <= 0:
        return []
    return [keraschoice.keras().callbacks.LambdaCallback(
        on_train_batch_end=lambda *_: time.sleep(delay))]


def open_state(settings, backend, manifest: dict, stack: ExitStack):
    """The chief readies the run's state (resume only with the same settings) and tees
    stdout into its train.log; returns (state folder, note for the log, resuming)."""
    from dlscale.core.contract import MANIFEST

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


def summary(r: Run) -> str:
    settings, backend, plan, manifest = r.settings, r.backend, r.plan, r.manifest
    facts = input_facts(settings, backend, manifest)
    keras = f"Keras 3 on {settings.backend}" if settings.keras == 3 else "Keras 2"
    return (f"{settings.model} on {backend.replicas} replica(s) [{keras}, {backend.kind}, "
            f"{settings.loop}: "
            f"{', '.join(backend.devices)} x {backend.size} worker(s)], global batch "
            f"{plan.global_batch}, lr {plan.lr:g}, {plan.steps} steps/epoch of "
            f"{manifest['splits']['train']['count']} images "
            f"({facts['resize']} resize to {facts['image_size']} px, read from "
            f"{facts['train_input']}), "
            f"{r.precision}, "
            f"xla {'on' if plan.xla else 'off'}{', synthetic input' if settings.synthetic else ''}")


def fit(train, settings, precision: str):
    """Run the training loop; (status, reason) of how it ended."""
    try:
        train()
    except DeadlineReached as stop:
        left = max(0.0, stop.deadline - time.time())
        return Status.TIMEOUT, (
            f"stopped after epoch {stop.epoch} of {settings.epochs}: the next epoch (up to "
            f"{1.5 * stop.longest:.0f} s) would not end within the {left:.0f} s left before "
            "the time limit; a rerun continues from the last epoch, with more time")
    except Exception as exc:
        from dlscale.train.frameworks.keras3.keras3 import out_of_memory

        tf = sys.modules.get("tensorflow")  # JAX trains without it
        oom = (tf is not None and isinstance(exc, tf.errors.ResourceExhaustedError)
               or out_of_memory(exc))
        if (oom or isinstance(exc, OSError)) and (full := disk_full(exc)):
            return Status.FAILED, full
        if not oom:
            raise
        return Status.OUT_OF_MEMORY, (
            f"out of memory with {settings.batch_per_gpu} images per GPU ({precision}, "
            f"{settings.model}): lower batch_per_gpu, or set batch_per_gpu: auto to find the "
            f"largest that fits ({str(exc).strip().splitlines()[0][:200]})")
    return Status.COMPLETED, None


def record(r: Run, started: datetime, status: Status, reason, test: dict,
           fit_seconds: float, records: list[dict], *, resumed_at, note,
           notes: list[str]) -> RunRecord:
    """The run record of a run that got as far as training."""
    from dlscale.train import training

    settings, backend, plan, manifest = r.settings, r.backend, r.plan, r.manifest
    return RunRecord.ending(
        status, reason, settings.planned(), backend.facts(),
        replicas=backend.replicas, device_kind=settings.device,
        global_batch=plan.global_batch, optimizer=settings.optimizer, loop=settings.loop,
        model_file=MODEL_FILE if settings.save_model and status is Status.COMPLETED
        else None,
        tensorboard=TENSORBOARD if settings.tensorboard or settings.profile_steps else None,
        profile_steps=list(settings.profile_steps) if settings.profile_steps else None,
        base_lr=settings.base_lr, lr_scaling=settings.lr_scaling, lr=plan.lr,
        warmup_epochs=settings.warmup_epochs, momentum=settings.momentum,
        precision=r.precision, precision_asked=settings.precision, xla=plan.xla,
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
        **training.environment_facts(), versions=(versions := training.versions()),
        keras=getattr(keraschoice.keras(), "__version__", None), backend=settings.backend,
        system=describe_system(versions), state_note=note, notes=notes,
        started=started.isoformat(timespec="seconds"),
        command=[Path(sys.argv[0]).name, *sys.argv[1:]])


def resolve_strategy(settings: Settings) -> str:
    """--strategy, or for auto (train.py run by hand) the sweep's default for this
    process's workers: SLURM's tasks, or a TF_CONFIG's cluster."""
    if settings.strategy != "auto":
        return settings.strategy
    from dlscale.train.keraschoice import default_strategy
    tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS", os.environ.get("SLURM_NTASKS", 1)))
    workers = 2 if os.environ.get("TF_CONFIG") else tasks
    return default_strategy(settings.nodes, settings.keras, settings.backend, workers)


def chief_process() -> bool:
    """Whether this process writes the records (rank or task 0), known without TensorFlow."""
    for name in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if name in os.environ:
            return os.environ[name] == "0"

    return worker_identity()[0] == 0


def record_failure(settings: Settings, reason: str, started: datetime) -> None:
    """run.json for a run that stopped with an error before it could describe itself."""
    from dlscale.train.training import environment_facts

    if not chief_process() or (settings.out / RUN_JSON).exists():
        return
    phases.finish(RunRecord.ending(
        Status.FAILED, reason, settings.planned(), environment_facts(),
        epochs_completed=len(read_epochs(settings.out / STATE / EPOCHS)),
        started=started.isoformat(timespec="seconds"),
        command=[Path(sys.argv[0]).name, *sys.argv[1:]]), settings.out)


def main(settings: Settings) -> int:
    """Run the point and record how it ended; train.py's exit status."""
    started = datetime.now(UTC)
    # on JAX one process per node holds its devices
    keraschoice.use_keras(settings.keras, settings.backend,
                host_devices=settings.gpus // settings.nodes if settings.device == "cpu" else 1,
                compile_cache=settings.compile_cache)
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
