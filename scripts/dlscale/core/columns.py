"""The columns of the tables, declared once: name, unit, meaning, source and tables.

Like ReFrame's performance variables: each number the study reports is named here with
its unit and a one-line meaning, and where it comes from. The per-run table takes each
column with a `source` from run.json or epochs.jsonl (runtable); runs.csv holds the
columns with a `runs` role, in this order (analysis); scaling.csv its own, in this order;
docs/analysis.md carries the table columns_docs renders (`make docs`; a test compares them).
A log's table (`dlscale parse-log`) holds the per-run table's columns, LOG_COLUMNS, the facts
its formats set (LOG_FACTS) and the metrics the log printed, under their names.
Adding a column from run.json is its declaration here, the writer of the key, and a test.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dlscale.core.vocabulary import SYSTEM_FIELDS, TELEMETRY_FIELDS

CARRIED, COMPUTED = "carried", "computed"  # a column's role in runs.csv (Column.runs)


@dataclass(frozen=True)
class Column:
    name: str
    unit: str  # "" for labels and counts, "1" for ratios
    meaning: str
    measured: bool = False  # taken from the runs (else derived from other columns)
    since_v1: bool = True  # in every scaling.csv (else older studies' may lack it)
    # where the per-run table takes it from: "run.json:KEY" or "epochs.jsonl:KEY"; "" where
    # an analysis step computes it
    source: str = ""
    # runs.csv: CARRIED (the run's value, as its per-run table holds it), COMPUTED (from
    # the run's epochs), or "" (not in runs.csv)
    runs: str = ""


def _later(*columns: Column) -> tuple[Column, ...]:
    return tuple(replace(c, since_v1=False) for c in columns)


def _record(key: str) -> str:
    return f"run.json:{key}"


TELEMETRY_UNITS = {"cpu_percent": ("%", "host CPU, mean over the steady epochs"),
                   "rss_mb_peak": ("MiB", "peak resident memory of the chief"),
                   "gpu_util_percent": ("%", "GPU utilisation, mean over GPUs and samples"),
                   "gpu_mem_mb_peak": ("MiB", "peak GPU memory"),
                   "energy_j": ("J", "GPU energy per epoch, summed over GPUs"),
                   "j_per_image": ("J", "GPU energy per training image")}

SCALING = (
    Column("series", "", "the point's series (a model, or your label)", True, runs=CARRIED),
    Column("model", "", "the model", True, source=_record("model"), runs=CARRIED),
    Column("strategy", "", "tf.distribute strategy, Horovod, or dataparallel (JAX)", True,
           source=_record("strategy"), runs=CARRIED),
    Column("precision", "", "float32, mixed_float16 or mixed_bfloat16", True,
           source=_record("precision"), runs=CARRIED),
    Column("nodes", "", "nodes the point ran on", True, source=_record("nodes"), runs=CARRIED),
    Column("gpus", "", "GPUs over all nodes", True, source=_record("replicas"), runs=CARRIED),
    Column("global_batch", "images", "images per step over all GPUs", True,
           source=_record("global_batch"), runs=CARRIED),
    Column("repeats", "", "counted runs pooled", True),
    Column("epochs_used", "", "epochs entering epoch_time_s, over the repeats", True,
           runs=COMPUTED),
    Column("epoch_time_s", "s", "mean epoch time after skip_epochs", True, runs=COMPUTED),
    Column("epoch_time_std", "s", "standard deviation of those epochs", True),
    Column("epoch_time_ci95", "s", "half-width of the mean's 95 % confidence interval", True),
    Column("images_per_s", "images/s", "images per epoch / epoch_time_s", True, runs=COMPUTED),
    Column("final_accuracy", "1", "training accuracy of the last epoch", True, runs=COMPUTED),
    Column("test_accuracy", "1", "accuracy on the test split", True,
           source=_record("test_accuracy"), runs=CARRIED),
    Column("speedup", "1", "the base point's epoch time / this epoch time"),
    Column("efficiency", "1", "speedup / (gpus / base_gpus)"),
    Column("accuracy_delta", "1", "final_accuracy minus the base point's"),
    Column("test_accuracy_delta", "1", "test_accuracy minus the base point's"),
    Column("accuracy_flag", "", "accuracy_delta beyond accuracy_tolerance"),
    *_later(
        Column("scaling", "", "weak or strong", True, runs=CARRIED),
        Column("serial_fraction", "1", "Karp-Flatt serial fraction"),
        Column("gpu_hours_per_epoch", "GPU-h", "gpus x epoch_time_s / 3600"),
        Column("gpu_hours_per_100_epochs", "GPU-h", "100 x gpu_hours_per_epoch"),
        Column("cost_per_epoch", "price", "gpu_hours_per_epoch x gpu_hour_price"),
        Column("time_to_target_s", "s", "training time to the target accuracy", True,
               runs=COMPUTED),
        Column("target_reached", "", "runs that reached it, of all", True),
        *(Column(name, *TELEMETRY_UNITS[name], True, source=f"epochs.jsonl:{name}",
                 runs=COMPUTED) for name in TELEMETRY_FIELDS),
        Column("synthetic_images_per_s", "images/s", "throughput on synthetic input", True,
               source=_record("synthetic_images_per_s"), runs=CARRIED),
        Column("input_ratio", "1", "images_per_s / synthetic_images_per_s"),
        Column("input_bound", "", "input_ratio under the input-bound threshold"),
        Column("gpu_model", "", "the GPU model the runs reported", True),
        Column("job_s", "s", "the point's job, start to record", True, source=_record("job_s"),
               runs=CARRIED),
        Column("overhead_s", "s", "job_s minus the training", True,
               source=_record("overhead_s"), runs=CARRIED),
        Column("overhead_fraction", "1", "overhead_s / job_s"),
        Column("nccl_network", "", "the network NCCL's collectives used (its NCCL_DEBUG "
               "lines; GPU points over several nodes)", True, source="nccl.*.log",
               runs=CARRIED),
        Column("nccl_fallback", "", "sockets where the nodes have InfiniBand: what shows "
               "the InfiniBand", True, source="nccl.*.log", runs=CARRIED),
        Column("slurm_cluster", "", "the SLURM cluster a log's job script echoed "
               "(SLURM_CLUSTER_NAME); a label over two clusters' logs is a series per "
               "cluster", True, source=_record("slurm_cluster"), runs=CARRIED),
        Column("precision_note", "", "where torch disabled the run's autocast (its "
               "UserWarning: CUDA is not available): the run trained in float32 whatever "
               "its precision setting or knob says; a flag of the point", True,
               source=_record("precision_note"), runs=CARRIED),
        Column("unit", "", "what the runs count: images, or tokens (a language model's: "
               "its throughput is tokens_per_s, images_per_s stays empty)", True,
               source=_record("unit"), runs=CARRIED),
        Column("tokens_per_s", "tokens/s", "a token run's throughput over all its GPUs (one "
               "GPU's printed rate times the GPUs where the output gives one GPU's)", True,
               source=_record("tokens_per_s"), runs=CARRIED),
        Column("tokens_per_s_per_gpu", "tokens/s", "a token run's throughput per GPU (the "
               "run's over its GPUs where the output gives the run's)", True,
               source=_record("tokens_per_s_per_gpu"), runs=CARRIED),
        Column("memory_gib", "GiB", "peak memory per GPU: the output's (max reserved, a "
               "step line's memory), or a dlscale point's own counter (memory_from says "
               "which; on CPUs the process's peak resident memory); empty where unknown (a "
               "log's 0.00 on a CPU)", True,
               source=_record("memory_gib"), runs=CARRIED),
        Column("parameters", "", "a language model's parameters: its output's line "
               "(torchtitan's total parameters, the Trainer's trainable ones), else the "
               "command's or outside log's `parameters` setting", True,
               source=_record("parameters"), runs=CARRIED),
        Column("param_dtype", "", "the dtype a language model's parameters and gradients "
               "train in, where its output's launch states it (torchtitan's "
               "--training.dtype, a torch_dtype): 2 bytes a gradient where bf16 or fp16",
               True, source=_record("param_dtype"), runs=CARRIED),
        Column("step_time_s", "s", "a token run's time per step: the Trainer's 1 / "
               "train_steps_per_second, or the tokens of a step its output states over "
               "its tokens/s", True, source=_record("step_time_s"), runs=CARRIED),
        Column("time_to_solution_s", "s", "the run's whole training, warm-up and compile "
               "included: a Trainer's train_runtime, else its epochs' sum", True,
               source=_record("time_to_solution_s"), runs=COMPUTED),
        Column("cost_efficiency", "1", "throughput per GPU-hour relative to the series' "
               "base point (the chapter 15 cost-efficiency proxy)"),
        Column("price_per_million_tokens", "price", "gpus x gpu_hour_price / (tokens_per_s "
               "x 3600) x 10^6: a token run's price of a million tokens"),
        Column("flags", "", "what the report flags about the point"),
        Column("base_gpus", "", "GPUs of the series' base point: 1 GPU on one node, else "
               "its fewest GPUs (an MLPerf series from 8)"),
    ),
)
# runs.csv: one row per run; beside scaling.csv's columns (per run) it has these
RUNS = tuple(replace(c, runs=c.runs or CARRIED) for c in (
    Column("run", "", "the run: its folder below results/runs, or external/<entry>[#run]", True),
    Column("source", "", "dlscale (trained here) or external (a log you brought)", True),
    Column("repeat", "", "the repeat's number (seed = seed + repeat - 1)", True),
    Column("host", "", "the host the run's records name", True, source=_record("host")),
    Column("slurm_job_id", "", "the SLURM job that ran it; empty outside SLURM", True,
           source="run.json:env.SLURM_JOB_ID"),
    Column("dataset", "", "the dataset's name", True, source="run.json:dataset.name"),
    Column("device", "", "gpu or cpu (logical CPU devices)", True,
           source=_record("device_kind")),
    Column("backend", "", "the Keras backend that trained it: tensorflow, jax or torch", True,
           source=_record("backend")),
    Column("image_size", "px", "the model's input size", True, source=_record("image_size")),
    Column("resize", "", "on_device, prepare or none: where images got that size", True,
           source=_record("resize")),
    Column("images_per_epoch", "images", "steps x global batch, or train_images", True,
           source=_record("images_per_epoch")),
    Column("epochs_expected", "", "the epochs the run was planned with", True,
           source=_record("epochs"), runs=COMPUTED),
    Column("epochs_done", "", "the epochs it finished", True, runs=COMPUTED),
    Column("final_loss", "1", "training loss of the last epoch", True, runs=COMPUTED),
    Column("status", "", "completed, failed, out_of_memory, timeout or killed", True,
           source=_record("status")),
    Column("counted", "", "whether the run enters scaling.csv", True, runs=COMPUTED),
    Column("problem", "", "why it does not count, or empty", True, runs=COMPUTED),
    Column("log_check", "", "ok, or how the printed log differs from the records", True),
    Column("streams", "", "workers whose lines an external log held", True,
           source=_record("streams")),
    Column("gpus_logged", "", "the GPU count the log stated, where it differs", True),
    Column("gpus_from", "", "where an outside log's GPU count came from: config, log (its "
           "own lines), its launch (mpirun -np 16, srun -n 8, SLURM_NTASKS=8 ..., with "
           "the line; times one worker's devices where those are listed), or one worker's "
           "device list alone", True, runs=CARRIED),
    Column("epoch_time_from", "", "where an outside log's epoch times came from when its "
           "lines give none of their own: its total time line (PyTorch's examples) or a "
           "Trainer's train_runtime, shared evenly over its epochs, with its line; or the "
           "gap between the timestamps of a mined epoch line and the one before or after",
           True, runs=CARRIED),
    Column("logged_images_per_s", "images/s", "a benchmark's printed throughput", True,
           source=_record("logged_images_per_s")),
    Column("memory_from", "", "what memory_gib is: the output's line it was read from; for "
           "dlscale's points the chief's peak as its framework counts it on a GPU (torch's "
           "max_memory_reserved, TensorFlow's or JAX's peak), on CPUs the process's peak "
           "resident memory (ru_maxrss; for your command on CPUs, its largest process's, "
           "where its output gives none)", True, source=_record("memory_from")),
    Column("memory_note", "", "why memory_gib is unknown (a log's 0.00: no GPU counted it; "
           "a counter that could not be read)", True, source=_record("memory_note")),
    Column("knobs", "", "the sweep.knobs the run was made with, by name: each a column of "
           "its own (after series) with the run's value, in runs.csv and scaling.csv", True),
    Column("notes", "", "what went wrong beside the training", True, source=_record("notes"),
           runs=COMPUTED),
    *(Column(f"system_{name}", "", f"the run's system description: {name}", True,
             source=f"run.json:system.{name}") for name in SYSTEM_FIELDS),
))
# what SLURM's accounting says of a point's job (runs.csv; dlscale.jobs.slurm reads it)
ACCOUNTED = tuple(Column(*c, True, runs=CARRIED) for c in (
    ("sacct_state", "", "the job's final state"),
    ("sacct_elapsed_s", "s", "the job's elapsed time"),
    ("sacct_cpu_s", "s", "the job's CPU time"),
    ("sacct_max_rss_mb", "MiB", "largest resident memory of any step"),
    ("sacct_energy_j", "J", "energy of the allocation's nodes"),
    ("sacct_alloc_tres", "", "the allocation's trackable resources"),
))
# the per-run table (each run's epochs.csv, and results/tables/epochs.csv): one row per
# epoch; beside the columns above that have a source, it has these
EPOCHS = (
    Column("epoch", "", "the epoch's number, from 1", True, source="epochs.jsonl:epoch"),
    Column("seconds", "s", "the epoch's time", True, source="epochs.jsonl:seconds"),
    Column("steps", "", "the epoch's steps", True, source="epochs.jsonl:steps"),
    Column("samples", "images", "the epoch's images", True, source="epochs.jsonl:images"),
    Column("loss", "1", "the epoch's training loss", True, source="epochs.jsonl:loss"),
    Column("accuracy", "1", "the epoch's training accuracy", True,
           source="epochs.jsonl:accuracy"),
    Column("lr", "1", "the learning rate at the epoch's end", True, source="epochs.jsonl:lr"),
    Column("gpus_asked", "", "the replicas the run asked for", True,
           source=_record("gpus_asked")),
    Column("failure", "", "why the run ended without completing", True,
           source=_record("failure")),
    Column("train_input", "", "what the run trained on: the shards, or synthetic input", True,
           source=_record("train_input")),
    Column("eval_seconds", "s", "an outside log's evaluations after the epoch, where it times "
           "them (MLLOG's eval_start to eval_stop); never part of `seconds`", True,
           source="MLLOG eval_start, eval_stop"),
    Column("file", "", "the file the rows were read from: the run's train.log (its run.json "
           "where that cannot be read), or the outside log", True),
    Column("epochs_total", "", "the epochs the run was to train: run.json's, or the total "
           "an outside log states (`Epoch 3/10`)", True),
    Column("cut", "", "whether the run's log ends inside an epoch (that epoch left out)",
           True),
    Column("loss_unknown", "", "true where the epoch's line gave no loss (a command's or an "
           "outside log's own line)", True),
)
# a log's table (`dlscale parse-log`, parse_logs.py; an outside log's epochs.csv): beside
# the per-run table's columns, these; a metric a log prints under another name is a
# column of that name (`sparse_categorical_accuracy`, `test_top5`)
LOG_COLUMNS = (
    Column("log_run", "", "the run's number in its log, from 1 (a file may hold several)",
           True),
    Column("seconds_per_step", "s", "the time per step the epoch's line printed (Keras' "
           "`ms/step`, a progress bar's rate)", True),
    Column("seconds_per_sample", "s", "the time per sample Keras printed (`us/sample`)",
           True),
    Column("val_loss", "1", "the validation loss after the epoch", True),
    Column("val_accuracy", "1", "the validation accuracy after the epoch", True),
    Column("test_loss", "1", "the test loss the log printed after training", True),
)
# a log's facts (ParsedLog.facts: what a format says of a run beyond its settings), a
# column each in a log's table; gpus_from, epoch_time_from and log_check, which runs.csv
# carries, are declared above
LOG_FACTS = tuple(Column(name, unit, meaning, True, source=source)
                  for name, unit, meaning, source in (
    ("log_format", "", "the format that read the run where it is none of Keras' lines and "
     "bars: mllog, dllogger, hf-trainer (its summary) or mined", ""),
    ("epoch_line", "", "a mined run's epoch line: its shape, and the line it was first "
     "found on", ""),
    ("copies", "", "copies of each mined epoch line (one per worker or node): the slowest "
     "copy's time counts", ""),
    ("rate_scope", "", "whether a log's tokens/s is one GPU's or the run's, and why: its "
     "words (Tokens/s/GPU), its producer (torchtitan's tps is per device), a Trainer's "
     "num_input_tokens_seen (every rank's)", ""),
    ("rate_from", "", "the line (or the steps) a token run's throughput was read from", ""),
    ("samples_per_s", "samples/s", "the Trainer summary's train_samples_per_second, where "
     "the run's rate is its tokens/s", "Trainer train_samples_per_second"),
    ("steps_done", "steps", "the last step counter of a run counted in steps", ""),
    ("steps_skipped", "steps", "its first steps, left out of its rate as a warm-up", ""),
    ("mfu_percent", "%", "the model FLOPs utilisation the step lines print, their mean over "
     "the steps counted", ""),
    ("tflops", "TFLOP/s", "the TFLOP/s the step lines print, their mean over the steps "
     "counted", ""),
    ("lines_skipped", "lines", "lines of a mined log's shapes whose numbers could not be "
     "read (`1e999 s`): skipped and counted", ""),
    ("nodelist", "", "the node list a log's job script echoed (SLURM_JOB_NODELIST)", ""),
    ("restarts", "", "start lines of a mined run repeated by a restart (its attempts in "
     "one file): each epoch is timed from its last start", ""),
    ("clock_back", "", "a mined run's timestamps went back (daylight saving, a clock set) "
     "or paused: that epoch has no time", ""),
    ("unfinished", "", "why the log's last run did not finish: SLURM's cancel line, a "
     "Trainer stopped before its train_runtime, an epoch begun and not ended, its counter "
     "short of the total", ""),
    ("nodes_from", "", "where a log's node count came from: the launch that said it, with "
     "its line", ""),
    ("train_seconds", "s", "a Hugging Face Trainer's train_runtime",
     "Trainer train_runtime"),
    ("train_loss", "1", "the Trainer's train_loss: the mean loss of its training",
     "Trainer train_loss"),
    ("summary_copies", "", "copies of the Trainer's summary or a benchmark's total (one "
     "per node or rank), counted once",
     ""),
    ("summary_hosts", "", "the hosts those copies came from, where their lines name them",
     ""),
    ("platform", "", "MLPerf's submission_platform (`2xDSS8440x8A100-PCIE-40GB`)",
     "MLLOG submission_platform"),
    ("run_status", "", "MLPerf's run_stop status: success (at its target) or aborted",
     "MLLOG run_stop status"),
    ("train_samples", "samples", "MLPerf's train_samples: the training set's size",
     "MLLOG train_samples"),
    ("time_to_train_s", "s", "MLPerf's time to train: run_start to run_stop",
     "MLLOG run_start, run_stop"),
    ("checked_against", "", "what an MLLOG run's epochs were cross-checked against: "
     "MXNet's Time cost or the Keras lines (log_check says how it went)", ""),
    ("amp", "", "DLLogger's amp (or fp16) parameter: mixed precision on or off",
     "DLLogger PARAMETER amp, fp16"),
    ("summary_images_per_s", "images/s", "a run's own summary rate beside its epochs: "
     "DLLogger's train.total_ips, chapter 11's closing Training throughput (the epochs "
     "after the first)", "DLLogger train.total_ips; Training throughput"),
    ("summary_compute_images_per_s", "images/s", "DLLogger's summary train.compute_ips: "
     "the throughput of the compute alone", "DLLogger train.compute_ips"),
))

# breakdown.csv: one row per point (dlscale.reporting.explain), after scaling.csv's first six
# columns
BREAKDOWN = (
    Column("step_s", "s", "the point's step time: global_batch / images_per_s", True),
    Column("window_steps", "", "traced steps, over the repeats", True),
    Column("window_step_s", "s", "median wall time of a traced step", True),
    Column("compute_share", "1", "share of the traced steps' time covered by operations"),
    Column("communication_share", "1", "covered by collectives and no operation (exposed); "
           "empty where not separable"),
    Column("input_share", "1", "waiting for the input, under neither of those"),
    Column("other_share", "1", "the rest: host overhead, idle"),
    Column("comm_total_share", "1", "covered by collectives, hidden or not"),
    Column("wait_share", "1", "collectives waiting for the slowest replica (skew), per "
           "replica"),
    Column("transfer_share", "1", "collectives moving data once all replicas are in, per "
           "replica"),
    Column("slowest_replica", "", "the device the others waited for most often, where a "
           "trace names devices", True),
    Column("communication", "", "separable, not separable or none (one replica)", True),
    Column("dominant", "", "the largest of compute, communication, input and other"),
    Column("gradient_bytes", "bytes", "the model's trainable weights at their dtype", True),
    Column("allreduce_s", "s", "the gradient's all-reduce timed alone on the replicas", True),
    Column("bus_bandwidth_gbs", "GB/s", "its bus bandwidth: bytes / time x 2(n-1)/n"),
    Column("method", "", "how the parts were told apart", True),
    Column("xprof_check", "", "agrees or differs: xprof's own breakdown of the same steps; "
           "empty without xprof", True),
    Column("notes", "", "what the window could not take, and why; traced steps much "
           "slower than the epochs'", True),
)
# prediction.csv: one row per series and point, measured and the next two doublings
PREDICTION = (
    Column("series", "", "the series (one over all its node counts)"),
    Column("nodes", "", "nodes: measured, or as few as hold the GPUs at the most GPUs per "
           "node the series used"),
    Column("gpus", "", "GPUs"),
    Column("role", "", "fit, held out (predicted from the smaller points), or extrapolated "
           "(from every measured point)"),
    Column("measured_step_s", "s", "step_s where measured", True),
    Column("predicted_step_s", "s", "compute + the all-reduce's time beyond its hideable "
           "part + growth_s; a fit point's own step"),
    Column("predicted_step_low_s", "s", "the band's low end: the fastest of the other fits "
           "(the growth's other shape, the compute's other split) over (1 + the points' "
           "relative spread: 95 % interval of the epochs) and the corpus' margin"),
    Column("predicted_step_high_s", "s", "the band's high end: the slowest of those fits "
           "times the same factors"),
    Column("error", "1", "(predicted - measured) / measured step time"),
    Column("measured_efficiency", "1", "scaling.csv's efficiency", True),
    Column("predicted_efficiency", "1", "the model's speedup over the series' base point / "
           "(gpus / base gpus)"),
    Column("predicted_efficiency_low", "1", "the efficiency at the band's slow end"),
    Column("predicted_efficiency_high", "1", "the efficiency at the band's fast end"),
    Column("comm_s", "s", "predicted exposed communication per step"),
    Column("exposure", "1", "comm_s / the all-reduce's time"),
    Column("hideable", "1", "the share of compute that hides communication (the fit "
           "points' trace; 0 where no trace separates it)"),
    Column("growth_s", "s", "what else grows with the replica count, per step: a measured "
           "point's step beyond compute and exposed communication, carried past the "
           "largest at the rate the points show"),
    Column("growth_cause", "", "the growth's cause where the points' breakdown names it "
           "(input pipeline, wait for the slowest replica, other), else fitted from step "
           "times"),
    Column("latency_us", "us", "within a node: the ring's per-hop latency (alpha)"),
    Column("bus_bandwidth_gbs", "GB/s", "within a node: the ring's bus bandwidth"),
    Column("latency_inter_us", "us", "between nodes: the ring's per-hop latency"),
    Column("bus_bandwidth_inter_gbs", "GB/s", "between nodes: the ring's bus bandwidth"),
    Column("link_source", "", "measured (the points' timed all-reduce, or the network's "
           "probe between nodes), given (analysis.network), or fitted from step times (no "
           "latency or bandwidth claimed), per level; the row's links, as the four columns "
           "before it: a measured point's from the fit points, an extrapolation's from "
           "every point"),
    Column("gradient_bytes", "bytes", "the bytes all-reduced per step"),
    Column("verdict", "", "explained, or not explained (held-out error over the threshold)"),
    Column("note", "", "why a series or row is not predicted, or how it was"),
)

SCALING_COLUMNS = [c.name for c in SCALING if c.since_v1]
# runs.csv in this order: the run's name and origin, scaling.csv's per-run columns, the rest
RUNS_CSV = (*RUNS[:2], *(c for c in SCALING if c.runs), *RUNS[2:], *ACCOUNTED)
# carried into runs.csv as the per-run table holds them (empty where a log lacks them)
RUNS_CARRIED = tuple(c.name for c in RUNS_CSV if c.runs == CARRIED)
# run.json's keys as per-run table columns; a dotted key is a member of a run.json object
RECORD_KEYS = {c.name: c.source.split(":", 1)[1] for c in (*SCALING, *RUNS, *EPOCHS)
               if c.source.startswith("run.json:")}
# epochs.jsonl's keys as per-run table columns
EPOCH_KEYS = {c.source.split(":", 1)[1]: c.name for c in (*SCALING, *EPOCHS)
              if c.source.startswith("epochs.jsonl:")}
EXTRA_COLUMNS = [c.name for c in SCALING if not c.since_v1]  # older tables may lack them
MEASURED = [c.name for c in SCALING if c.measured]  # one value per point, from its runs
ACCOUNTED_COLUMNS = tuple(c.name for c in ACCOUNTED)

