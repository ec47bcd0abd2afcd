"""Training building blocks: devices, cluster, model, learning-rate schedule, records.

TensorFlow is imported inside the functions so that importing this module (for
`--help`, for tests of the pure helpers) stays fast. The Keras used everywhere is
tf-keras (Keras 2): Keras 3's `fit` fails under MultiWorkerMirroredStrategy with this
TensorFlow (docs/keras.md), and one Keras for every strategy keeps the records and the
log format the same.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dlscale import cli as K
from dlscale import slurm
from dlscale.contract import EPOCHS, SETTINGS, read_epochs
from dlscale.errors import RunError  # noqa: F401 (the callers' name for it)
from dlscale.files import append_jsonl, jsonl_problem, write_json_atomic, write_jsonl_atomic
from dlscale.vocabulary import SMALL_MODELS, scaled_lr

# --- cluster -----------------------------------------------------------------------

def slurm_tf_config(env: dict[str, str]) -> dict:
    """TF_CONFIG for the task `srun` started: one worker per task, ports distinct per
    task (so that several tasks, or several nodes sharing one address, never collide)."""
    hosts = slurm.hostnames(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
    per_node = slurm.expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE")
                                     or env["SLURM_TASKS_PER_NODE"])
    if len(per_node) != len(hosts):
        raise RunError(f"SLURM lists {len(hosts)} nodes ({', '.join(hosts)}) but tasks "
                       f"per node for {len(per_node)}")
    base = int(env.get("DLSCALE_PORT_BASE") or 12000 + int(env.get("SLURM_JOB_ID", 0)) % 1000 * 50)
    workers, rank = [], 0
    for host, count in zip(hosts, per_node):
        for _ in range(count):
            workers.append(f"{host}:{base + rank}")
            rank += 1
    return {"cluster": {"worker": workers},
            "task": {"type": "worker", "index": int(env["SLURM_PROCID"])}}


def worker_identity() -> tuple[int, int, int]:
    """(task index, number of workers, local index on the node) from TF_CONFIG or SLURM."""
    if os.environ.get("TF_CONFIG"):
        config = json.loads(os.environ["TF_CONFIG"])
        index = int(config["task"]["index"])
        return index, len(config["cluster"]["worker"]), int(os.environ.get("SLURM_LOCALID", 0))
    if "SLURM_PROCID" in os.environ and "SLURM_STEP_ID" in os.environ:
        return (int(os.environ["SLURM_PROCID"]), int(os.environ.get("SLURM_NTASKS", 1)),
                int(os.environ.get("SLURM_LOCALID", 0)))
    return 0, 1, 0


# --- devices and strategy ------------------------------------------------------------

def cuda_visible_devices() -> str:
    """CUDA_VISIBLE_DEVICES as error messages quote it."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")


def setup_devices(device: str, replicas_per_worker: int, several_processes: bool,
                  local_index: int) -> list[str]:
    """Make the devices this worker trains on visible; return their names.

    several_processes: the run has one process per worker (MultiWorkerMirroredStrategy,
    Horovod) rather than one process holding every replica (MirroredStrategy).
    cpu: `replicas_per_worker` logical CPU devices in a single process, or the one CPU
    per process (MultiWorkerMirroredStrategy and Horovod train one replica per process
    on CPUs).
    gpu: the first N visible GPUs, or, with one process per GPU, GPU number `local_index`.
    Fails before any model is built when fewer GPUs are visible than asked for.
    """
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    visible = cuda_visible_devices()
    if device == "cpu":
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        cpu = tf.config.list_physical_devices("CPU")[0]
        if not several_processes and replicas_per_worker > 1:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration()] * replicas_per_worker)
        count = 1 if several_processes else replicas_per_worker
        return [f"/device:CPU:{i}" for i in range(count)]
    if several_processes and replicas_per_worker == 1 and len(gpus) > 1:
        if local_index >= len(gpus):
            raise RunError(f"worker {local_index} on this node has no GPU: TensorFlow sees "
                           f"{len(gpus)} GPU(s), CUDA_VISIBLE_DEVICES={visible}")
        gpus = [gpus[local_index]]
        tf.config.set_visible_devices(gpus, "GPU")
    if len(gpus) < replicas_per_worker:
        raise RunError(
            f"{replicas_per_worker} GPU(s) asked for but TensorFlow sees {len(gpus)} "
            f"(CUDA_VISIBLE_DEVICES={visible}); use device: cpu to run replicas on CPUs")
    for gpu in gpus[:replicas_per_worker]:
        tf.config.experimental.set_memory_growth(gpu, True)
    return [f"/device:GPU:{i}" for i in range(replicas_per_worker)]


def resolve_precision(precision: str, device: str) -> str:
    """`mixed_auto`: bfloat16 where the hardware has it (GPUs of compute capability 8.0
    and newer, and CPUs), float16 with loss scaling on older GPUs."""
    if precision != "mixed_auto":
        return precision
    if device == "cpu":
        return "mixed_bfloat16"
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    capability = tf.config.experimental.get_device_details(gpus[0]).get(
        "compute_capability", (0, 0)) if gpus else (0, 0)
    return "mixed_bfloat16" if tuple(capability) >= (8, 0) else "mixed_float16"


def synthetic_dataset(shape: tuple[int, int, int], num_classes: int, batch: int, seed: int):
    """One fixed batch of random uint8 images, repeated: the model's speed without any
    input pipeline, to check that the real pipeline keeps up."""
    import tensorflow as tf

    generator = tf.random.Generator.from_seed(seed)
    images = tf.cast(generator.uniform((batch, *shape), 0, 256, tf.int32), tf.uint8)
    labels = generator.uniform((batch,), 0, num_classes, tf.int64)
    return tf.data.Dataset.from_tensors((images, labels)).repeat()


def resolve_communication(communication: str, device: str) -> str:
    """auto: NCCL on GPUs, ring on CPUs (NCCL needs GPUs)."""
    if communication == "auto":
        return "nccl" if device == "gpu" else "ring"
    if communication == "nccl" and device == "cpu":
        raise RunError("communication nccl needs GPUs, but the device is cpu: use ring", 2)
    return communication


def make_strategy(kind: str, devices: list[str], device: str, communication: str = "auto"):
    import tensorflow as tf

    if kind == "mirrored":
        return tf.distribute.MirroredStrategy(devices=devices)
    if kind == "multiworker":
        implementation = getattr(tf.distribute.experimental.CommunicationImplementation,
                                 resolve_communication(communication, device).upper())
        options = tf.distribute.experimental.CommunicationOptions(implementation=implementation)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    raise RunError(f"unknown strategy '{kind}': expected mirrored or multiworker", 2)


# --- the plan of a run -------------------------------------------------------------------

@dataclass(frozen=True)
class RunPlan:
    global_batch: int
    steps: int            # per epoch
    lr: float             # after scaling
    warmup_steps: int
    xla: bool
    xla_note: str | None


def plan_run(*, batch_per_gpu: int, replicas: int, train_images: int,
             steps_per_epoch: int | None, base_lr: float, lr_scaling: str,
             warmup_epochs: float, xla: bool, device: str, devices_in_process: int) -> RunPlan:
    """Global batch = batch per GPU x replicas; steps = the training images once (capped);
    lr = base x replicas (linear) or base; XLA off over several logical CPU devices."""
    global_batch = batch_per_gpu * replicas
    steps = train_images // global_batch
    if steps_per_epoch:
        steps = min(steps, steps_per_epoch)
    if steps < 1:
        raise RunError(f"global batch {global_batch} ({batch_per_gpu} x {replicas}) is "
                       f"larger than the {train_images} training images", 2)
    lr = scaled_lr(base_lr, replicas, lr_scaling)
    note = None
    if xla and device == "cpu" and devices_in_process > 1:
        # XLA compiles the step for one device; with several logical CPU devices the
        # replicas' variables live elsewhere (an XLA known issue). Real GPUs are fine.
        xla, note = False, "XLA is off: it does not run over several logical CPU devices"
    return RunPlan(global_batch, steps, lr, round(warmup_epochs * steps), xla, note)


def make_optimizer(name: str, rate, momentum: float = 0.0, legacy: bool = False):
    """sgd (with momentum) or adam, at `rate` (a number or a schedule); legacy: Keras'
    legacy optimizer classes, which Horovod 0.28's callbacks need."""
    keras = K.keras()
    optimizers = getattr(keras.optimizers, "legacy", keras.optimizers) if legacy else \
        keras.optimizers
    if name == "sgd":
        return optimizers.SGD(rate, momentum=momentum)
    if name == "adam":
        return optimizers.Adam(rate)
    raise RunError(f"unknown optimizer '{name}': expected sgd or adam", 2)


# --- model ------------------------------------------------------------------------------

def build_model(name: str, input_shape: tuple[int, int, int], num_classes: int,
                image_size: int | None = None, model_from: str | None = None):
    """uint8 images in, resized (when `image_size` differs from the input's) and
    normalised on the device, softmax in float32 (also under mixed precision).

    The resize is data.resize: on_device: bilinear in float32, as the study's
    `tf.image.resize` (half-pixel centres), not rounded, whatever the precision policy.
    `name` is a keras.applications model (weights=None), SimpleCNN, the course's warm-up
    CNN (two 5x5 convolution + max-pool blocks and a dense softmax), or MLP, the network
    JSC trains on MNIST (Flatten, Dense(512), Dense(classes)); with `model_from`, the model
    a user's function builds (dlscale.usermodel), labelled `name`."""
    keras = K.keras()

    inputs = keras.Input(shape=input_shape, dtype="uint8", name="image")
    x = inputs
    if image_size and tuple(input_shape[:2]) != (image_size, image_size):
        x = keras.layers.Resizing(image_size, image_size, interpolation="bilinear",
                                  dtype="float32", name="resize")(x)
        input_shape = (image_size, image_size, input_shape[2])
    x = keras.layers.Rescaling(1.0 / 255, name="rescale")(x)
    if model_from:
        from dlscale import usermodel

        user = usermodel.build(model_from, input_shape, num_classes)
        if usermodel.ends_in_softmax(user):  # probabilities already: float32, as below
            outputs = keras.layers.Activation("linear", dtype="float32",
                                              name="probabilities")(user(x))
            return keras.Model(inputs, outputs, name=name)
        logits = user(x)
    elif name == "MLP":  # JSC's MNIST network: Flatten, Dense(512, relu), Dense(classes)
        x = keras.layers.Flatten()(x)
        x = keras.layers.Dense(512, activation="relu")(x)
        logits = keras.layers.Dense(num_classes)(x)
    elif name == "SimpleCNN":
        for filters in (32, 64):
            x = keras.layers.Conv2D(filters, 5, padding="same", activation="relu")(x)
            x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Flatten()(x)
        logits = keras.layers.Dense(num_classes)(x)
    else:
        factory = getattr(keras.applications, name, None)
        if factory is None or not name[:1].isupper():
            raise RunError(f"unknown model '{name}': expected {' or '.join(SMALL_MODELS)} or a "
                           "keras.applications name such as ResNet50V2", 2)
        backbone = factory(weights=None, input_shape=input_shape, classes=num_classes,
                           classifier_activation=None)
        logits = backbone(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name=name)


def warmup_schedule(base_lr: float, target_lr: float, warmup_steps: int):
    """Linear ramp from base_lr to target_lr over warmup_steps, then constant (Goyal et
    al.'s gradual warm-up). A schedule, not a callback, so resuming from a backup
    continues at the right rate: it depends only on the optimizer's step count."""
    keras = K.keras()
    import tensorflow as tf

    class Warmup(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            if warmup_steps <= 0:
                return tf.constant(target_lr, tf.float32)
            fraction = tf.minimum(tf.cast(step, tf.float32) / warmup_steps, 1.0)
            return base_lr + (target_lr - base_lr) * fraction

        def get_config(self):
            return {"base_lr": base_lr, "target_lr": target_lr, "warmup_steps": warmup_steps}

    return Warmup()


# --- records ----------------------------------------------------------------------------

def epoch_recorder(path: Path, steps: int, global_batch: int, lr_of, write: bool,
                   sampler=None, on_first=None):
    """Keras callback appending one JSON object per finished epoch to `path`, with the
    epoch's telemetry summary when a `sampler` (dlscale.telemetry.Sampler) runs.

    An epoch whose loss or metrics are NaN or infinite sets `saw_nan` and stops training
    there. This is the run's stop on NaN; Keras' TerminateOnNaN would stop a step after
    the loss goes bad, but it reads the loss after every step, which makes Keras call
    every callback's step hooks (BackupAndRestore then assigns a variable per step): about
    1 ms per step here, 5 % of SimpleCNN's epoch (docs/benchmarks.md, issue 26).

    On the first epoch of a (possibly resumed) fit it rewrites the file with only the
    epochs before the one starting, so a run restored from a backup has no duplicates,
    and calls `on_first(epoch index)`: only then is it known where a resume began.
    """
    keras = K.keras()

    class EpochRecorder(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.first_epoch = None
            self.saw_nan = False
            self._start = 0.0

        def on_epoch_begin(self, epoch, logs=None):
            if self.first_epoch is None:
                self.first_epoch = epoch
                if on_first is not None:
                    on_first(epoch)
                if write:
                    write_jsonl_atomic(path, [r for r in read_epochs(path) if r["epoch"] <= epoch])
            self._start = time.perf_counter()
            self._sampled = sampler.now() if sampler else None

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self._start
            logs = logs or {}
            record = {"epoch": epoch + 1, "seconds": round(seconds, 4), "steps": steps,
                      "images": steps * global_batch,
                      "lr": float(lr_of(self.model))}
            for key, value in logs.items():
                record[key] = float(value)
            if not all(math.isfinite(v) for k, v in record.items() if k in logs):
                self.saw_nan = True
                self.model.stop_training = True
            if sampler:
                record.update(sampler.summary(self._sampled, sampler.now(), record["images"]))
            if write:
                append_jsonl(path, record)

    return EpochRecorder()


CONTAINER_MARKS = ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER")  # set inside by both


def software_problem(modules, container, env=None) -> str | None:
    """Why the software stack asked for is not the one this process runs in, or None:
    every module of `modules` must be loaded (LOADEDMODULES, as environment-modules and
    Lmod set it; a name without a version matches any version), and with a `container`
    the process must run inside one."""
    env = os.environ if env is None else env
    if modules:
        loaded = [m for m in env.get("LOADEDMODULES", "").split(":") if m]
        if not loaded:
            return (f"software.modules asks for {', '.join(modules)}, but no environment "
                    "module is loaded in the job: its shell has no `module` command (set "
                    "BASH_ENV to the site's module init, README 'Site software') or the "
                    "workflow was not run with --sdm env-modules")
        missing = [m for m in modules
                   if not any(x == m or x.startswith(f"{m}/") for x in loaded)]
        if missing:
            return (f"module {missing[0]} is not loaded in the job (LOADEDMODULES: "
                    f"{':'.join(loaded)}): `module load {missing[0]}` failed")
    if container and not any(env.get(k) for k in CONTAINER_MARKS):
        return (f"software.container is {container}, but the job does not run inside a "
                "container: run the workflow with --sdm apptainer")
    return None


def environment_facts() -> dict:
    """Where the run happened: host, SLURM allocation and GPU ids when present."""
    keys = ["SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_NNODES",
            "SLURM_NTASKS", "SLURM_CPUS_PER_TASK", "SLURM_PROCID", "SLURM_LOCALID",
            "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_JOB_PARTITION", "CUDA_VISIBLE_DEVICES",
            "OMP_NUM_THREADS"]
    keys += ["LOADEDMODULES"] + sorted(k for k in os.environ if k.startswith("DLSCALE_"))
    return {"host": socket.gethostname(),
            "env": {k: os.environ[k] for k in keys if k in os.environ}}


def versions() -> dict:
    import tensorflow as tf
    build = tf.sysconfig.get_build_info()
    keras = K.keras()
    keras_version = (getattr(keras, "__version__", None)
                     or f"built into TensorFlow {tf.__version__}")
    horovod = sys.modules.get("horovod")  # loaded by the Horovod backend, if it runs
    return {"tensorflow": tf.__version__,
            "keras": f"{keras.__name__.split('.')[0]} {keras_version}",
            "cuda_build": build.get("cuda_version"), "cudnn_build": build.get("cudnn_version"),
            "horovod": getattr(horovod, "__version__", None),
            "python": ".".join(map(str, sys.version_info[:3]))}


# --- time limit ---------------------------------------------------------------------------

class DeadlineReached(Exception):
    """Raised as an epoch begins when it would not end before the job's time limit. An
    exception, not stop_training: a normal end of `fit` makes BackupAndRestore delete the
    backup that the rerun resumes from."""

    def __init__(self, epoch: int, longest: float, deadline: float):
        super().__init__(f"epoch {epoch}")
        self.epoch, self.longest, self.deadline = epoch, longest, deadline


# Set by launch.py for the training it starts: the job's end (time.time() scale), so that
# its watchdog and train.py's guard count from the same moment.
JOB_END_ENV = "DLSCALE_JOB_END"


def job_deadline(time_limit_min: float | None, started: float,
                 notes: list[str] | None = None) -> float | None:
    """When this process must be done (time.time() scale): $DLSCALE_JOB_END when launch.py
    set it, else the SLURM job's end inside a job, else start + --time-limit-min, else
    None (no limit). When squeue cannot say, the reason goes to `notes` and the
    --time-limit-min rule applies."""
    try:
        return float(os.environ[JOB_END_ENV])
    except (KeyError, ValueError):
        pass
    job_id = os.environ.get("SLURM_JOB_ID")
    if job_id:
        try:
            left = slurm.time_left(job_id)
        except slurm.SlurmError as exc:
            left = None
            if notes is not None:
                notes.append(f"the time-limit guard cannot read the job's end ({exc}): "
                             "a time limit reached mid-epoch loses that epoch")
        if left is not None:
            return time.time() + left
    return started + time_limit_min * 60 if time_limit_min else None


# Seconds kept at the end of a job for what follows the last epoch: the evaluation, the
# records, the process's exit and Snakemake's job step. Under load that took 13 s on the
# test cluster (train.py done at 14:27:08, the job step at 14:27:21), and SLURM marks a
# job that reaches its limit TIMEOUT, which makes Snakemake drop its outputs.
END_OF_JOB_RESERVE_S = 30.0
# launch.py's watchdog stops a training still running this many seconds before the end
# (an epoch longer than the time left): less than the reserve above, so that a training
# that stopped itself at an epoch boundary has 10 s to evaluate and write its records;
# then KILL_GRACE_S, the record and the job step's end fit in what is left.
WATCHDOG_RESERVE_S = 20.0


def deadline_stop(deadline: float, agree, reserve: float = END_OF_JOB_RESERVE_S):
    """Keras callback that ends training at an epoch boundary when the next epoch, taken
    as 1.5 x the longest so far, plus `reserve` seconds for the end of the job, would
    end after `deadline`. `agree(flag)` makes every worker take the same decision."""
    keras = K.keras()

    class DeadlineStop(keras.callbacks.Callback):
        # decided at the end of an epoch, raised as the next begins: by then Keras has
        # printed the finished epoch's line and BackupAndRestore has saved it
        def __init__(self):
            super().__init__()
            self.longest, self._start, self.stop = 0.0, 0.0, None

        def on_epoch_begin(self, epoch, logs=None):
            if self.stop is not None:
                raise self.stop
            self._start = time.time()

        def on_epoch_end(self, epoch, logs=None):
            self.longest = max(self.longest, time.time() - self._start)
            late = time.time() + 1.5 * self.longest + reserve > deadline
            if agree(late):
                self.stop = DeadlineReached(epoch + 1, self.longest, deadline)

    return DeadlineStop()


# --- resuming -------------------------------------------------------------------------------

def describe_change(old: dict, new: dict) -> str:
    changed = [k for k in new if old.get(k) != new.get(k)]
    return ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in changed)


def completed_epochs(backup: Path) -> int:
    """The epochs an earlier attempt finished, as its backup holds them (0: none): Keras'
    BackupAndRestore saves the last finished epoch's index (ckpt_saved_epoch, -1 unused),
    the custom loop the count (epoch)."""
    import tensorflow as tf

    folder = backup / "chief" if (backup / "chief").is_dir() else backup
    latest = tf.train.latest_checkpoint(str(folder)) if folder.is_dir() else None
    if latest is None:
        return 0
    reader = tf.train.load_checkpoint(latest)
    for name, done in (("ckpt_saved_epoch", lambda v: v + 1), ("epoch", lambda v: v)):
        key = f"{name}/.ATTRIBUTES/VARIABLE_VALUE"
        if reader.has_tensor(key):
            return max(int(done(reader.get_tensor(key))), 0)
    return 0


def checkpoint_problem(backup: Path) -> str | None:
    """Why the newest checkpoint in a backup folder cannot be restored (every tensor is
    read once), or None; an empty or missing folder has none."""
    if not backup.is_dir() or not any(p.is_file() for p in backup.rglob("*")):
        return None
    import tensorflow as tf

    folders = sorted({p.parent for p in backup.rglob("checkpoint")}) or [backup]
    for folder in folders:
        try:
            latest = tf.train.latest_checkpoint(str(folder))
            if latest is None:
                return f"{folder} names no checkpoint"
            reader = tf.train.load_checkpoint(latest)
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
        except Exception as exc:  # DataLossError, NotFoundError, a parse error ...
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return f"checkpoint {folder.relative_to(backup.parent)} cannot be read ({first[:160]})"
    return None


def state_problem(state: Path, backup: Path) -> str | None:
    """What makes a saved state unusable, or None: settings that cannot be read, records
    with a cut or damaged line or a gap, a checkpoint that cannot be restored."""
    settings = state / SETTINGS
    if settings.exists():
        try:
            json.loads(settings.read_bytes())
        except (OSError, ValueError) as exc:
            return f"{SETTINGS} cannot be read ({type(exc).__name__})"
    if problem := jsonl_problem(state / EPOCHS):
        return problem
    numbers = [r.get("epoch") for r in read_epochs(state / EPOCHS)]
    if numbers != list(range(1, len(numbers) + 1)):
        return f"{EPOCHS} holds epochs {numbers}, not 1 to {len(numbers)}"
    return checkpoint_problem(backup)


def move_aside(state: Path, prefix: str) -> Path:
    aside = state.parent / f"{prefix}-{time.strftime('%Y%m%dT%H%M%S')}"
    state.rename(aside)
    return aside


def prepare_state(state: Path, settings: dict, epochs: int, backup: Path | None = None
                  ) -> str | None:
    """Make `state` ready for a run with `settings`; return a note for train.log.

    A state that cannot be used (`state_problem`: unreadable settings, damaged records,
    a checkpoint that does not restore) is moved aside to state.corrupt-<time>/ and the
    run starts over: a crash loop on every rerun helps no one.
    Same settings: the backup is kept (the run resumes), unless it already holds more
    finished epochs than `epochs` asks for (RunError: that would silently drop them).
    Other settings: the old state is moved aside to superseded-<time>/ and the run
    starts over."""
    saved_path = state / SETTINGS
    note = None
    if state.is_dir() and (problem := state_problem(state, backup or state / "backup")):
        aside = move_aside(state, f"{state.name}.corrupt")
        note = f"the saved state cannot be used ({problem}): starting over; it is in {aside}"
    if state.is_dir() and any(state.iterdir()):
        try:
            saved = json.loads(saved_path.read_bytes())
        except (OSError, ValueError):  # missing, not UTF-8, not JSON: not resumable
            saved = {}
        if {k: saved.get(k) for k in settings} != settings:
            aside = move_aside(state, "superseded")
            what = describe_change(saved, settings) if saved else "no settings recorded"
            note = (f"the saved state was made with other settings ({what}): starting over; "
                    f"the old state is in {aside}")
        else:
            finished = len(read_epochs(state / EPOCHS))
            if finished > epochs:
                raise RunError(f"{finished} epochs of this run are already finished in {state} "
                               f"but --epochs is {epochs}: ask for at least {finished}, or move "
                               f"{state} away to start over", 2)
    state.mkdir(parents=True, exist_ok=True)
    write_json_atomic(saved_path, settings)  # a kill while writing keeps the old settings
    return note
