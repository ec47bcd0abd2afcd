"""Which Keras a process trains with, chosen before anything imports it: Keras 2 (tf-keras)
or Keras 3 on TensorFlow, JAX or PyTorch (docs/frameworks.md). `use_keras` sets the environment that
TensorFlow, Keras and JAX read at import; `keras()` is the chosen Keras module; JAX is
kept out of a process that trains on TensorFlow (it would only slow its start), and
`import_framework` imports the framework without what a training never uses.
`default_strategy` and `framework_problem` say which strategy a point of a Keras and
backend trains with, and which it cannot: decided here once, for planning and train.py."""

from __future__ import annotations

import gc
import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

# which Keras this process trains with: "2" (tf-keras, the default) or "3"; set by
# use_keras before TensorFlow, Keras or JAX is imported
KERAS_ENV = "DLSCALE_KERAS"


def use_keras(version: int, backend: str = "tensorflow", host_devices: int = 1,
              compile_cache: Path | None = None) -> None:
    """Choose the Keras of this process before anything imports it (docs/frameworks.md):
    Keras 2 (tf-keras) or Keras 3 on `backend`. On JAX, `host_devices` > 1 shows that many
    CPU devices (XLA's host platform), the way TensorFlow gets logical CPU devices, and
    `compile_cache` is JAX's persistent compilation cache (JAX_COMPILATION_CACHE_DIR,
    unless you set it): what the run compiles is kept there, and what an earlier run on
    the same devices compiled is loaded instead of compiled. Every compilation is kept
    (JAX keeps only those over 1 s by default: on CPUs each weight initializer's takes
    less, and together more than the training step's; docs/benchmarks.md), so that a run
    like an earlier one compiles nothing, however fast the machine."""
    os.environ[KERAS_ENV] = str(version)
    if version == 3:
        os.environ["TF_USE_LEGACY_KERAS"] = "0"  # tf.keras is Keras 3 too (users' models)
        os.environ["KERAS_BACKEND"] = backend
        if backend == "jax" and host_devices > 1:
            flag = f"--xla_force_host_platform_device_count={host_devices}"
            os.environ["XLA_FLAGS"] = " ".join(
                [f for f in os.environ.get("XLA_FLAGS", "").split()
                 if not f.startswith("--xla_force_host_platform_device_count")] + [flag])
        if backend == "jax" and compile_cache:
            os.environ.setdefault(CACHE_ENV, str(Path(compile_cache).absolute()))
            os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    quiet_tensorflow()


CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"


def compile_cache_entries() -> int | None:
    """How many compiled programs JAX's persistent cache holds (one `*-cache` file each),
    or None where this process trains without one."""
    folder = os.environ.get(CACHE_ENV) if trains_on_jax() else None
    if not folder:
        return None
    path = Path(folder)
    return sum(1 for _ in path.glob("*-cache")) if path.is_dir() else 0


JAX_KEPT_OUT = ("JAX is kept out of this process: its Keras trains on TensorFlow "
                "(training.backend: jax trains on JAX)")


class _KeepOut(importlib.abc.MetaPathFinder):
    """`import` of these packages fails with the reason, as if they were not installed."""

    def __init__(self, packages: tuple[str, ...], reason: str):
        self.packages, self.reason = packages, reason

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.packages:
            raise ModuleNotFoundError(self.reason, name=name)
        return None


class _KeepJaxOut(_KeepOut):
    def __init__(self):
        super().__init__(("jax", "jaxlib"), JAX_KEPT_OUT)


def keep_jax_out() -> None:
    """TensorFlow's import imports JAX where it is installed (tf.lite's `try: import
    jax`), a cost of each start in a process that never uses it (docs/benchmarks.md,
    "Tests and CI"). Before TensorFlow
    is imported, `import jax` in this process fails with the reason; TensorFlow goes on
    without. Once TensorFlow is imported there is nothing to save, and nothing is done
    (a test process that imports both keeps both)."""
    if ("tensorflow" in sys.modules or "jax" in sys.modules
            or any(isinstance(finder, _KeepJaxOut) for finder in sys.meta_path)):
        return
    sys.meta_path.insert(0, _KeepJaxOut())


# What Keras and TensorFlow import only to take other kinds of input (a pandas DataFrame, a
# SciPy sparse matrix) or to draw (keras.visualization: Matplotlib), each behind its own
# `try: import ... except ImportError`. A dlscale training feeds its own datasets and
# draws nothing, so these are kept out while the framework is imported: a shorter start
# (docs/benchmarks.md, "Tests and CI"). JAX needs SciPy: not kept out there.
OPTIONAL_AT_IMPORT = ("pandas", "scipy", "matplotlib")


def import_framework():
    """Import this process's TensorFlow (unless its Keras trains on JAX) and Keras, with
    OPTIONAL_AT_IMPORT kept out for that time only, and return the Keras module. Keras
    then takes them as absent, as where they are not installed; after the call they
    import as usual (your model's module may use them). A package imported before is
    left alone (its submodules must stay importable).

    Python's cyclic garbage collector is paused for the import, which makes about a
    million objects and almost no garbage, and what the import made is then frozen
    (`gc.freeze`): it lives to the end of the process, and later collections, many while
    TensorFlow traces the model, no longer walk it (docs/benchmarks.md)."""
    quiet_tensorflow()
    jax = trains_on_jax()
    kept = tuple(p for p in OPTIONAL_AT_IMPORT
                 if p not in sys.modules and not (jax and p == "scipy"))
    if trains_on_torch():
        kept = ()  # torch's own imports take them where installed (torch._dynamo: scipy)
    finder = _KeepOut(kept, "kept out while Keras and TensorFlow are imported: a dlscale "
                      "training neither feeds it to Keras nor draws")
    collecting = gc.isenabled()
    gc.disable()
    sys.meta_path.insert(0, finder)
    try:
        if not without_tensorflow():
            import tensorflow  # noqa: F401
        return keras()
    finally:
        sys.meta_path.remove(finder)
        gc.freeze()
        if collecting:
            gc.enable()


def seed(value: int) -> None:
    """keras.utils.set_random_seed: Python's, NumPy's and Keras's own seeds, and
    TensorFlow's wherever TensorFlow is installed (Keras imports it for that, for tf.data
    pipelines). A process that trains on JAX reads its input without TensorFlow
    (dlscale.data.shardreader), so there TensorFlow is kept out of the call: importing
    it only to seed it cost each JAX point TensorFlow's start (docs/benchmarks.md, "Tests
    and CI"). Keras then takes TensorFlow as absent in that process; where something
    imported it before (your model's module), it is seeded as Keras does."""
    chosen = keras()
    if not without_tensorflow() or "tensorflow" in sys.modules:
        chosen.utils.set_random_seed(value)
        return
    finder = _KeepOut(("tensorflow",), "TensorFlow is not needed to seed this process")
    sys.meta_path.insert(0, finder)
    try:
        chosen.utils.set_random_seed(value)
    finally:
        sys.meta_path.remove(finder)


def keras_version() -> int:
    return 3 if os.environ.get(KERAS_ENV) == "3" else 2


def trains_on_jax() -> bool:
    """Whether this process's Keras (as use_keras chose it) is Keras 3 on JAX."""
    return keras_version() == 3 and os.environ.get("KERAS_BACKEND") == "jax"


def without_tensorflow() -> bool:
    """Whether this process trains without TensorFlow: Keras 3 on JAX or PyTorch, its input
    read by dlscale's own reader (numpy batches)."""
    return keras_version() == 3 and os.environ.get("KERAS_BACKEND") in ("jax", "torch")


def trains_on_torch() -> bool:
    """Whether this process's Keras (as use_keras chose it) is Keras 3 on PyTorch."""
    return keras_version() == 3 and os.environ.get("KERAS_BACKEND") == "torch"


def quiet_tensorflow() -> None:
    """Keep TensorFlow's C++ start-up chatter out of logs unless the user asked for it,
    and JAX out of a process that does not train on it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if not trains_on_jax():
        keep_jax_out()
    if keras_version() == 3:
        return
    # Keras 2 (docs/frameworks.md): tf-keras with TensorFlow 2.21; TensorFlow 2.15 (the
    # Horovod environment) has Keras 2 built in and fails if asked for tf_keras.
    if importlib.util.find_spec("tf_keras") is not None:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    else:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)


def keras():
    """The Keras use_keras chose. Keras 3: `import keras`. Keras 2 in either environment:
    tf-keras with TensorFlow 2.21 (the main one), or TensorFlow 2.15's own tf.keras, which
    is Keras 2 (the Horovod environment, where horovod.tensorflow.keras works on tf.keras
    and a second Keras copy would not mix)."""
    quiet_tensorflow()
    if keras_version() == 3:
        import keras as keras3

        return keras3
    try:
        import tf_keras
    except ImportError:
        from tensorflow import keras as tf_keras
    return tf_keras


def tensorflow_installed() -> bool:
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken install
        return False


# Keras 3's TensorBoard callback writes its event files with tf.summary, on every backend
TENSORBOARD_NEEDS_TF = ("training.tensorboard writes its event files with TensorFlow "
                        "(Keras' TensorBoard callback), which {where}: set it to false "
                        "(training.profile_steps traces without it)")


def without_tensorflow_problem(points, software: dict, shard_size: int,
                               native_size: int | None) -> str | None:
    """Why the study cannot run where TensorFlow is not installed, known at planning (one
    line), or None: only Keras 3 on JAX or PyTorch reads and trains without it, and preparation
    needs it to resize (data.resize: prepare) and to decode an image folder (whose images
    have no size of their own: `native_size` None). Jobs that load software of their own
    (software.modules, a container) may have it: not judged here."""
    if software.get("modules") or software.get("container") or tensorflow_installed():
        return None
    for p in points:
        if not p.command and (p.keras == 2 or p.backend == "tensorflow"):
            return (f"point {p.key} trains with TensorFlow (Keras {p.keras}, backend "
                    f"{p.backend}), which is not installed here: train with keras 3 and "
                    "backend jax, or install TensorFlow (requirements.txt)")
        if not p.command and p.tensorboard:
            return f"point {p.key}: " + TENSORBOARD_NEEDS_TF.format(
                where="is not installed here (or install it: requirements.txt)")
    if native_size is None:
        return ("data.dataset folder: preparation decodes your images with TensorFlow, "
                "which is not installed here: install it (requirements.txt)")
    if shard_size != native_size:
        return (f"data.resize prepare: preparation resizes to {shard_size} px with "
                "TensorFlow, which is not installed here: set data.resize: on_device (the "
                "model resizes) or install TensorFlow (requirements.txt)")
    return None


def default_strategy(nodes: int, keras: int, backend: str, workers: int = 1) -> str:
    """A point's strategy when the sweep names none (and train.py's without --strategy:
    the one place it is decided): JAX's keras.distribution.DataParallel, else mirrored
    in one process on one node and multiworker across nodes or processes; PyTorch's
    DistributedDataParallel (ddp) on torch."""
    if keras == 3 and backend == "jax":
        return "dataparallel"
    if backend == "torch":
        return "ddp"
    return "multiworker" if nodes > 1 or workers > 1 else "mirrored"


KERAS3_ISSUE = "keras-team/keras#20585"  # Keras 3's fit under MultiWorkerMirroredStrategy


def framework_problem(keras: int, backend: str, chosen: str, nodes: int, loop: str,
                      batch_per_gpu=None, tensorboard: bool = False) -> str | None:
    """Why a point of this Keras, backend, strategy, nodes and loop cannot train, or None
    (docs/frameworks.md): known at planning, so that no job fails on it."""
    if backend in ("jax", "torch") and keras == 2:
        return (f"backend {backend} runs Keras 3 only: set training.keras (or sweep.keras) "
                "to 3")
    if (chosen == "ddp") != (backend == "torch"):
        return ("strategy ddp is PyTorch's DistributedDataParallel: it needs keras 3 and "
                "backend torch" if chosen == "ddp" else
                f"strategy {chosen} is not PyTorch's: backend torch trains with "
                "DistributedDataParallel (strategy ddp, or no strategy)")
    if chosen == "dataparallel" and backend != "jax":
        return ("strategy dataparallel is keras.distribution.DataParallel on JAX: it needs "
                "keras 3 and backend jax")
    if keras == 2:
        return None
    if chosen == "horovod":
        return "Horovod trains tf-keras (Keras 2) only: use keras 2 for horovod points"
    if batch_per_gpu == "auto":
        return ("batch_per_gpu auto searches with tf-keras (Keras 2) only, not yet with "
                "Keras 3: give batch_per_gpu as a number")
    if loop == "custom":
        return ("the custom training loop is written for tf-keras (Keras 2): use loop fit "
                "with Keras 3")
    if backend == "torch":
        return (TENSORBOARD_NEEDS_TF.format(where="PyTorch's environment (.venv-torch) does "
                                            "not have") if tensorboard else None)
    if backend == "jax":
        if chosen != "dataparallel":
            return (f"strategy {chosen} is TensorFlow's: Keras 3 on JAX trains with "
                    "keras.distribution.DataParallel (strategy dataparallel, or no strategy)")
        return None
    if chosen != "mirrored" or nodes > 1:
        return (f"Keras 3 on TensorFlow trains under MirroredStrategy on one node: its fit "
                f"fails under MultiWorkerMirroredStrategy ({KERAS3_ISSUE}); use keras 2 "
                "for multi-node or multiworker points")
    return None
