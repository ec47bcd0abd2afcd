"""Training building blocks: devices, strategy, precision, model, optimizer and
learning-rate schedule, the epoch recorder, software checks and versions.

TensorFlow is imported inside the functions so that importing this module (for
`--help`, for tests of the pure helpers) stays fast. The Keras used everywhere is
tf-keras (Keras 2) unless the point asks for Keras 3 (`keraschoice.use_keras`; what differs
is in dlscale.train.frameworks.keras3.keras3): Keras 3's `fit` fails under
MultiWorkerMirroredStrategy with this TensorFlow (docs/frameworks.md), and Horovod knows
only Keras 2.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dlscale.core import models
from dlscale.core.contract import read_epochs
from dlscale.core.errors import RunError  # noqa: F401 (the callers' name for it)
from dlscale.core.files import append_jsonl, write_jsonl_atomic
from dlscale.core.vocabulary import scaled_lr
from dlscale.train import keraschoice
from dlscale.train.cluster import patient_coordination
from dlscale.train.telemetry import cpu_flags

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


# the CPU flags (Linux's /proc/cpuinfo) of bfloat16 instructions: x86's AVX-512 BF16 and
# AMX, Arm's BF16 extension. Without them bfloat16 is emulated, slower than float32 (a
# third of config/fast.yaml's CPU time in Eigen's bfloat16 kernel on an AVX2 CPU)
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def resolve_precision(precision: str, device: str, flags: frozenset[str] | None = None) -> str:
    """`mixed_auto`: bfloat16 where the hardware has it (GPUs of compute capability 8.0
    and newer, CPUs with bfloat16 instructions), float16 with loss scaling on older GPUs,
    float32 on CPUs without them (`flags`: the CPU's, default this machine's)."""
    if precision != "mixed_auto":
        return precision
    if device == "cpu":
        flags = cpu_flags() if flags is None else flags
        return "mixed_bfloat16" if flags & BF16_FLAGS else "float32"
    if keraschoice.trains_on_jax():  # JAX names it as a string: "9.0"
        import jax

        found = jax.devices("gpu")
        capability = tuple(int(n) for n in str(getattr(
            found[0], "compute_capability", "0.0")).split(".")[:2]) if found else (0, 0)
        return "mixed_bfloat16" if capability >= (8, 0) else "mixed_float16"
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    capability = tf.config.experimental.get_device_details(gpus[0]).get(
        "compute_capability", (0, 0)) if gpus else (0, 0)
    return "mixed_bfloat16" if tuple(capability) >= (8, 0) else "mixed_float16"


def synthetic_dataset(shape: tuple[int, int, int], num_classes: int, batch: int, seed: int,
                      numpy: bool = False):
    """One fixed batch of random uint8 images, repeated: the model's speed without any
    input pipeline, to check that the real pipeline keeps up. `numpy`: as an endless
    iterator of numpy arrays (Keras 3 on JAX, without TensorFlow)."""
    if numpy:
        import itertools

        import numpy as np

        rng = np.random.default_rng(seed)
        images = rng.integers(0, 256, (batch, *shape), dtype=np.uint8)
        return itertools.repeat((images, rng.integers(0, num_classes, batch)))
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
        patient_coordination()
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
    keras = keraschoice.keras()
    optimizers = getattr(keras.optimizers, "legacy", keras.optimizers) if legacy else \
        keras.optimizers
    if name == "sgd":
        return optimizers.SGD(rate, momentum=momentum)
    if name == "adam":
        return optimizers.Adam(rate)
    raise RunError(f"unknown optimizer '{name}': expected sgd or adam", 2)


# --- model ------------------------------------------------------------------------------

def simple_cnn(keras, x, num_classes: int):
    """The course's warm-up CNN: two 5x5 convolution + max-pool blocks, a dense layer."""
    for filters in (32, 64):
        x = keras.layers.Conv2D(filters, 5, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    return keras.layers.Dense(num_classes)(keras.layers.Flatten()(x))


def mlp(keras, x, num_classes: int):
    """JSC's MNIST network: Flatten, Dense(512, relu), Dense(classes)."""
    x = keras.layers.Dense(512, activation="relu")(keras.layers.Flatten()(x))
    return keras.layers.Dense(num_classes)(x)


def build_model(name: str, input_shape: tuple[int, int, int], num_classes: int,
                image_size: int | None = None, model_from: str | None = None):
    """uint8 images in, resized (when `image_size` differs from the input's) and
    normalised on the device, softmax in float32 (also under mixed precision).

    The resize is data.resize: on_device: bilinear in float32, as the study's
    `tf.image.resize` (half-pixel centres), not rounded, whatever the precision policy.
    `name` is a model of the models table (dlscale.core.models: a keras.applications
    model with weights=None, torchvision's by its name on torch, or one of the functions
    above); with `model_from`, the model
    a user's function builds (dlscale.train.usermodel), labelled `name`."""
    keras = keraschoice.keras()

    inputs = keras.Input(shape=input_shape, dtype="uint8", name="image")
    x = inputs
    if image_size and tuple(input_shape[:2]) != (image_size, image_size):
        x = keras.layers.Resizing(image_size, image_size, interpolation="bilinear",
                                  dtype="float32", name="resize")(x)
        input_shape = (image_size, image_size, input_shape[2])
    x = keras.layers.Rescaling(1.0 / 255, name="rescale")(x)
    if model_from:
        from dlscale.train import usermodel

        user = usermodel.build(model_from, input_shape, num_classes)
        if usermodel.ends_in_softmax(user):  # probabilities already: float32, as below
            outputs = keras.layers.Activation("linear", dtype="float32",
                                              name="probabilities")(user(x))
            return keras.Model(inputs, outputs, name=name)
        logits = user(x)
    elif (spec := models.table().get(name)) and spec.builder == models.TORCHVISION:
        import torchvision

        from dlscale.train.frameworks.torch.torchloop import module_layer

        logits = module_layer(keras, x, getattr(torchvision.models, name)(
            weights=None, num_classes=num_classes), name)
    elif spec and spec.builder != models.APPLICATIONS:
        logits = globals()[spec.builder](keras, x, num_classes)
    else:  # a keras.applications model (one of a newer Keras too: gradients --write)
        factory = getattr(keras.applications, name, None)
        if factory is None or not name[:1].isupper():
            raise RunError(f"unknown model '{name}': expected {' or '.join(models.own())} or a "
                           "keras.applications name such as ResNet50V2", 2)
        backbone = factory(weights=None, input_shape=input_shape, classes=num_classes,
                           classifier_activation=None)
        logits = backbone(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(inputs, outputs, name=name)


def create_step_variables(model) -> None:
    """Create, after compile and in the strategy's scope, the variables that tf-keras
    (Keras 2) otherwise creates in the first training step: the optimizer's (its step
    count, momentum) and the compiled loss's and metrics'. A tf.function that creates
    variables on its first call is traced twice, once creating them and once without, and
    the first epoch paid both traces, each one copy of the model's graph per replica
    (docs/benchmarks.md). Keras 3 builds both before its first step itself."""
    if keraschoice.keras_version() == 3:
        return
    import tensorflow as tf

    optimizer = model.optimizer
    if hasattr(optimizer, "build"):
        optimizer.build(model.trainable_variables)
    else:  # Keras' legacy optimizers (Horovod's): the same, under their older name
        optimizer._create_all_weights(model.trainable_variables)
    probabilities = tf.zeros([1, *model.output_shape[1:]])
    model.compiled_loss.build(probabilities)
    model.compiled_metrics.build(probabilities, tf.zeros([1], tf.int64))  # labels: one int


def warmup_schedule(base_lr: float, target_lr: float, warmup_steps: int):
    """Linear ramp from base_lr to target_lr over warmup_steps, then constant (Goyal et
    al.'s gradual warm-up). A schedule, not a callback, so resuming from a backup
    continues at the right rate: it depends only on the optimizer's step count. In
    keras.ops under Keras 3 (so that it runs on JAX too), in TensorFlow under Keras 2."""
    keras = keraschoice.keras()
    if keraschoice.keras_version() == 3:
        ops = keras.ops
        as_float, minimum = (lambda x: ops.cast(x, "float32")), ops.minimum
    else:
        import tensorflow as tf

        as_float, minimum = (lambda x: tf.cast(x, tf.float32)), tf.minimum

    class Warmup(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            if warmup_steps <= 0:
                return as_float(target_lr)
            fraction = minimum(as_float(step) / warmup_steps, 1.0)
            return base_lr + (target_lr - base_lr) * fraction

        def get_config(self):
            return {"base_lr": base_lr, "target_lr": target_lr, "warmup_steps": warmup_steps}

    return Warmup()


# --- records ----------------------------------------------------------------------------

def epoch_recorder(path: Path, steps: int, global_batch: int, lr_of, write: bool,
                   sampler=None, on_first=None):
    """Keras callback appending one JSON object per finished epoch to `path`, with the
    epoch's telemetry summary when a `sampler` (dlscale.train.telemetry.Sampler) runs.

    An epoch whose loss or metrics are NaN or infinite sets `saw_nan` and stops training
    there. This is the run's stop on NaN; Keras' TerminateOnNaN would stop a step after
    the loss goes bad, but it reads the loss after every step, which makes Keras call
    every callback's step hooks (BackupAndRestore then assigns a variable per step), a
    cost of every step (docs/benchmarks.md, "Training overhead").

    On the first epoch of a (possibly resumed) fit it rewrites the file with only the
    epochs before the one starting, so a run restored from a backup has no duplicates,
    and calls `on_first(epoch index)`: only then is it known where a resume began.
    """
    keras = keraschoice.keras()

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
            "OMP_NUM_THREADS", "GLIBC_TUNABLES"]
    keys += ["LOADEDMODULES"] + sorted(k for k in os.environ if k.startswith("DLSCALE_"))
    return {"host": socket.gethostname(),
            "env": {k: os.environ[k] for k in keys if k in os.environ}}


def versions() -> dict:
    """The software a run trained with. On JAX, TensorFlow only where it is installed
    (Keras 3 then loads it to seed it; dlscale reads and trains without it)."""
    if keraschoice.without_tensorflow():
        tf = sys.modules.get("tensorflow")
    else:
        import tensorflow as tf
    build = tf.sysconfig.get_build_info() if tf is not None else {}
    keras = keraschoice.keras()
    keras_version = (getattr(keras, "__version__", None)
                     or f"built into TensorFlow {tf.__version__}")
    horovod = sys.modules.get("horovod")  # loaded by the Horovod backend, if it runs
    jax = sys.modules.get("jax") if keraschoice.trains_on_jax() else None  # Keras 3's JAX backend
    torch = sys.modules.get("torch") if keraschoice.trains_on_torch() else None
    return {"tensorflow": getattr(tf, "__version__", None),
            "keras": f"{keras.__name__.split('.')[0]} {keras_version}",
            "jax": getattr(jax, "__version__", None),
            "cuda_build": build.get("cuda_version"), "cudnn_build": build.get("cudnn_version"),
            "horovod": getattr(horovod, "__version__", None),
            "torch": getattr(torch, "__version__", None),
            "python": ".".join(map(str, sys.version_info[:3]))}


