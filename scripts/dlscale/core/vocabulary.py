"""Names, choices and defaults that several parts of dlscale share, written once.

argparse in the scripts, the rules, the analysis and the plots read them from here; the
choices and defaults of config keys come from the schema. Importing this module is
cheap: no pandas, no TensorFlow.
"""

from __future__ import annotations

from dlscale.core import schema

# choices and defaults: the schema's (scripts/dlscale/core/schema.yaml), read once here
PRECISIONS = schema.choices("precision")
STRATEGIES = schema.choices("strategy")
DEVICES = schema.choices("training", "device")
LR_SCALINGS = schema.choices("training", "lr_scaling")
OPTIMIZERS = schema.choices("training", "optimizer")
LOOPS = schema.choices("training", "loop")  # Keras' fit, or the IDRIS course's custom loop
# Keras 2 (tf-keras) or Keras 3, and Keras 3's backend (docs/frameworks.md)
KERAS_VERSIONS = schema.choices("keras")
KERAS_BACKENDS = schema.choices("backend")
# MultiWorkerMirroredStrategy's collectives: auto is NCCL on GPUs, ring on CPUs
COMMUNICATIONS = schema.choices("training", "communication")
DEFAULTS = {name: schema.defaults(name) for name in ("data", "training", "analysis")}
# Records held for shuffling: 4096 x 49 KB = 200 MB at 128 px, which keeps the reader
# under 1.5 GB of RSS (docs/benchmarks.md).
SHUFFLE_BUFFER = DEFAULTS["data"]["shuffle_buffer"]

CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer",
                   "dog", "frog", "horse", "ship", "truck")

# every per-run table has these columns (parse_logs.py writes them; a run that failed
# before its first epoch has one row with them empty); aggregation needs them, but for
# the metrics, which a log may lack (a regression model logs no accuracy): empty then
EPOCH_METRICS = ("loss", "accuracy")
EPOCH_COLUMNS = ("model", "gpus", "epoch", "seconds", *EPOCH_METRICS, "images_per_epoch")
EPOCH_REQUIRED = tuple(c for c in EPOCH_COLUMNS if c not in EPOCH_METRICS)

# sweep.knobs' batch per GPU: of commands and dlscale's own points (dlscale.plan.knobs)
BATCH_KNOB = "batch_per_gpu"


def knob_text(value) -> str:
    """A knob's value as a command and a table are given it: true and false in lower case
    (YAML's, and what a script's flags take; numpy's too, a table read back), any other
    as written."""
    return str(value).lower() if isinstance(value, bool) or type(value).__name__ == "bool_" \
        else str(value)

# the plots: name -> (scaling.csv column, title, axis label with its unit, error column)
PLOTS = {
    "epoch_time": ("epoch_time_s", "Epoch time", "epoch time [s]", "epoch_time_ci95"),
    "throughput": ("images_per_s", "Training throughput", "throughput [images/s]",
                   "images_per_s_ci95"),
    "speedup": ("speedup", "Speedup", "speedup over 1 GPU [x]", "speedup_ci95"),
    "efficiency": ("efficiency", "Parallel efficiency", "parallel efficiency [speedup / GPUs]",
                   None),
    "accuracy": ("final_accuracy", "Accuracy after training", "final training accuracy", None),
    "utilisation": ("cpu_percent", "Host CPU and GPU use", "utilisation [%]", None),
}
COST = "cost"  # epoch time against GPU-hours per epoch: the fastest and the cheapest point
KNOBS = "knobs"  # throughput and memory per GPU against each knob (sweep.knobs)
OVERVIEW = "overview"  # all of the above but the knobs in one figure
PLOT_NAMES = (*PLOTS, COST, KNOBS, OVERVIEW)
# why it scales (dlscale.reporting.explain): the step split per GPU count, the model's prediction
WHY_PLOTS = ("where_the_time_goes", "prediction")
# what a compared study's scaling.csv must hold to be drawn beside this one
COMPARED_COLUMNS = ("series", "nodes", "gpus", "epoch_time_s", "images_per_s", "speedup",
                    "efficiency", "final_accuracy")

# per-epoch telemetry summaries (dlscale.train.telemetry.Sampler.summary) carried from
# epochs.jsonl into the tables; GPU ones exist only where NVML saw GPUs
TELEMETRY_FIELDS = ("cpu_percent", "rss_mb_peak", "gpu_util_percent", "gpu_mem_mb_peak",
                    "energy_j", "j_per_image")
# run.json's system description as columns (system_<name>) of the tables and systems.csv
SYSTEM_FIELDS = ("host", "node", "cpu_model", "cpu_threads", "memory_gb", "gpu_model",
                 "gpu_count", "gpu_memory_gb", "gpu_driver", "cuda_driver", "tensorflow",
                 "keras", "jax", "cuda_build", "cudnn_build", "horovod", "container", "modules",
                 "slurm_partition")
# what the user forced to run again ("*", or run folders): Snakemake's process tells the
# points' launchers through their environment (rulefunctions.note_forced)
FORCED_ENV = "DLSCALE_FORCED"
# outside SLURM, the cores Snakemake granted a point shared by its workers (launch.py
# --threads): each worker's thread count, where no SLURM_CPUS_PER_TASK says it
THREADS_ENV = "DLSCALE_THREADS"
# real / synthetic throughput under this: the report flags the point input-bound
INPUT_BOUND_RATIO = 0.9


def scaled_lr(base_lr: float, replicas: int, lr_scaling: str) -> float:
    """The learning rate of a point: base x replicas (linear scaling) or base (none)."""
    return base_lr * (replicas if lr_scaling == "linear" else 1)
