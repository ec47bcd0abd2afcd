"""The grammar of Keras' printed lines (epoch results, progress bars, stated settings) and of
tqdm's epoch bars (below); dlscale.logparse.keraslog reads whole logs with it.

Understood (tests/unit/test_keraslog.py has each, and real captured logs):
  verbose=2, Keras 2 (2021):   196/196 - 45s - loss: 1.7626 - accuracy: 0.3536
  verbose=2, Keras 2.11-2.13:  25/25 - 14s - loss: 2.1255 - accuracy: 0.2195 - 14s/epoch
                               - 544ms/step (one line)
  verbose=2, tf-keras 2.21:    4/4 - 1s - loss: 2.3112 - accuracy: 0.1133 - 878ms/epoch - 219ms/step
  verbose=2, Keras 3:          8/8 - 9s - 1s/step - accuracy: 0.0918 - loss: 2.6331
  verbose=1, Keras 2:          600/600 [====] - 2s 3ms/step - loss: 0.3 - acc: 0.9
  verbose=1, TF 1.x:           60000/60000 [====] - 8s 131us/sample - loss: 0.2 - acc: 0.94
  verbose=1, Keras 3:          8/8 ━━━━━━━━━━━━━━━━━━━━ 9s 1s/step - accuracy: 0.0918 - loss: 2.6
ANSI escape codes (Keras 3 colours its bars even in files) are removed first;
progress-bar updates (with ETA, or overwritten through \r and \b) are skipped.
`acc`/`val_acc` are reported as `accuracy`/`val_accuracy`.

A log is a sequence of runs (one job's .out often holds several): a new run starts
where the epoch count restarts (`Epoch 1/N` after finished epochs, or another N) or a
run's settings are stated again after finished epochs. Settings come from lines that
state them (SETTINGS below: the echoed command line, `Num_replicas: 2`, `Batch_size:
4096`, `Model ResNet50 2 GPUs`, TensorFlow's `Using MirroredStrategy with devices (...)`,
`Number of devices: 4`, Horovod's size) and from user patterns. A run resumed after a
cut (`Epoch k/N` right after epoch k-1) stays one run; an earlier epoch coming back
inside a run is taken as a resume from an older backup, with a warning naming the line.
A last line without its end (no newline, or stopping inside a `name: value` pair)
leaves that epoch unfinished: the run is cut and the epoch not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dlscale.logparse.epochtable import EpochTable

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
HEADER = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
PROGRESS = re.compile(r"^\s*(\d+)/(\d+|Unknown)\s*(?:\[[=>.]*\]|[━─\u2501\u2500]+)?\s*-?\s*(.*)$")
SCALE = {"h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
ALIASES = {"acc": "accuracy", "val_acc": "val_accuracy"}
# metrics that mean the training accuracy, in the order one is taken as `accuracy` when a
# line has no metric of that name (Keras names a metric after how it was asked for)
ACCURACY_LIKE = ("sparse_categorical_accuracy", "categorical_accuracy", "binary_accuracy",
                 "sparse_top_k_categorical_accuracy", "top_k_categorical_accuracy")
VAL_ACCURACY_LIKE = tuple(f"val_{name}" for name in ACCURACY_LIKE)
PER = {"step": "seconds_per_step", "sample": "seconds_per_sample", "epoch": "seconds_per_epoch"}
# what a script prints after evaluate(): "Test accuracy: 0.87", "test loss = 0.41"
TEST_PRINT = re.compile(r"^\s*test[ _](loss|accuracy|acc)\s*[:=]\s*"
                        r"(-?(?:nan|inf|\d+(?:\.\d+)?(?:e[-+]?\d+)?))\s*(%?)\s*$",
                        re.IGNORECASE)


class LogError(ValueError):
    """A log holds no epoch at all; the message names the file (and its last lines)."""

    def __init__(self, message: str, settings: dict | None = None):
        super().__init__(message)
        self.settings = settings or {}  # what the log stated before it ended


# setting -> patterns with one group (the value); the same setting stated again after a
# run's epochs begins the next run. batch_per_gpu from the command line is the study's
# --batch_size (per GPU); Batch_size: in a header is the global batch.
SETTINGS: dict[str, list[re.Pattern]] = {
    "gpus": [re.compile(r"--(?:n_gpus|num_gpus|gpus)[= ](\d+)\b"),
             re.compile(r"^\s*Num_replicas:\s*(\d+)\s*$"),
             re.compile(r"^\s*Model\s+\S+\s+(\d+)\s+GPUs?\b"),
             re.compile(r"Number of devices:\s*(\d+)"),
             re.compile(r"^\s*Number of [GC]PUs:\s*(\d+)\s*$"),  # Horovod's benchmark
             re.compile(r"\b[Hh]orovod size:?\s*(\d+)"),
             re.compile(r"\bhvd\.size\(\)\s*[:=]\s*(\d+)"),
             # PyTorch Lightning's rank 0: "All distributed processes registered.
             # Starting with 2 processes"
             re.compile(r"processes registered\. Starting with (\d+) processes")],
    "global_batch": [re.compile(r"^\s*Batch_size:\s*(\d+)\s*$"),
                     re.compile(r"^\s*Batch size:\s*(\d+) global\s*$")],  # tf_cnn_benchmarks
    "batch_per_gpu": [re.compile(r"--batch[_-]size[= ](\d+)\b"),
                      re.compile(r"^\s*Batch size:\s*(\d+)\s*$")],  # Horovod's benchmark
    "epochs": [re.compile(r"--epochs[= ](\d+)\b")],
}
MIRRORED = re.compile(r"Using MirroredStrategy with devices \((.*)\)")
DEVICES = re.compile(r"^\s*Devices:\s*\[(.*)\]\s*$")  # tf_cnn_benchmarks' header
# Benchmarks that report throughput, not epochs: a run's images/s over all its GPUs.
# Horovod's synthetic benchmarks: "Total img/sec on 2 GPU(s): 2976.1 +-4.3" (after its
# warm-up, per-iteration and per-GPU lines); tf_cnn_benchmarks: "total images/sec: 1656.82"
# (its per-step "images/sec:" lines are per worker and not used).
HOROVOD_TOTAL = re.compile(r"Total img/sec on (\d+) [GC]PU\(s\):\s*(\d+(?:\.\d+)?)")
TF_CNN_TOTAL = re.compile(r"^\s*total images/sec:\s*(\d+(?:\.\d+)?)\s*$")


# User patterns that read results, not settings: a custom loop's epoch line (its seconds,
# and the loss and accuracy on the same line) and a benchmark's total images/s.
RESULT_PATTERNS = ("epoch_time", "loss", "accuracy", "images_per_s")


def compile_patterns(patterns: dict[str, str] | None, where: str = "patterns") -> dict:
    """User patterns (JUBE/ReFrame style): a regex with exactly one group, the value.
    Compiled with RE2, whose matching time is linear in the line (a Python regex such as
    '(a+)+$' can take hours on one long line). ValueError naming the key and the pattern
    for one that RE2 does not accept or that has no group or several."""
    import re2

    options = re2.Options()
    options.log_errors = False  # the error is ours to report, in one line
    compiled = {}
    for key, text in (patterns or {}).items():
        try:
            regex = re2.compile(text, options)
        except re2.error as exc:
            why = exc.args[0].decode(errors="replace") if exc.args and isinstance(
                exc.args[0], bytes) else str(exc)
            raise ValueError(f"{where}.{key}: '{text}' is not a regular expression RE2 "
                             f"accepts ({why}; RE2 has no lookarounds or backreferences)"
                             ) from None
        if regex.groups != 1:
            raise ValueError(
                f"{where}.{key}: '{text}' has {regex.groups or 'no'} group"
                f"{'s' if regex.groups != 1 else ''}: expected exactly one, the value, e.g. "
                "'Num_replicas: (\\d+)' (make other groups non-capturing: (?:...))")
        compiled[key] = regex
    if compiled.keys() & {"loss", "accuracy"} and "epoch_time" not in compiled:
        raise ValueError(f"{where}: loss and accuracy are read from the lines epoch_time "
                         "matches: give epoch_time too")
    return compiled


# Every line that SETTINGS or MIRRORED can match holds one of these: most lines are
# looked at once, not once per pattern.
SETTINGS_HINT = re.compile(r"--|_replicas|Model|devices|orovod size|hvd\.size|Batch_size|"
                           r"MirroredStrategy|Number of|Batch size|Devices:|Starting with")


def settings_in(line: str, patterns: dict | None = None, warn=None) -> dict[str, int]:
    """The run settings a line states, as integers; a user pattern whose group matched
    something that is not a number is said through `warn(message)`, not dropped silently."""
    found = {}
    if SETTINGS_HINT.search(line) is not None:
        for key, regexes in SETTINGS.items():
            for regex in regexes:
                if (m := regex.search(line)) is not None:
                    found[key] = int(m.group(1))
                    break
        if (m := MIRRORED.search(line) or DEVICES.match(line)) is not None:
            # the devices of one worker: the job's count only where nothing states that
            # (`job_gpus`), since each worker of a multi-worker job prints its own
            found["devices"] = len(re.findall(r"'[^']*'|\"[^\"]*\"", m.group(1)))
    for key, regex in (patterns or {}).items():
        if key in RESULT_PATTERNS:
            continue
        if (m := regex.search(line)) is not None:
            try:
                found[key] = int(float(m.group(1)))
            except (TypeError, ValueError):
                if warn is not None:
                    warn(f"pattern {key} matched {m.group(1)!r}, which is not a number: "
                         "ignored")
    return found


def job_gpus(settings: dict[str, int]) -> dict[str, int]:
    """A run's settings with its GPU count decided: what a line stated for the whole job
    (Number of devices:, Horovod's size, --n_gpus...) over one worker's device list."""
    if "devices" in settings:
        settings = dict(settings)
        devices = settings.pop("devices")
        settings.setdefault("gpus", devices)
    return settings


def settings_sequence(text: str, patterns: dict[str, re.Pattern] | None = None
                      ) -> list[dict[str, int]]:
    """Settings per run from a file that holds only them (a job's .err): a setting
    stated again begins the next run's."""
    runs: list[dict[str, int]] = [{}]
    for line in ANSI.sub("", text).splitlines():
        for key, value in settings_in(line, patterns).items():
            if key in runs[-1]:
                runs.append({})
            runs[-1][key] = value
    return [job_gpus(run) for run in (runs if runs[-1] else runs[:-1])]


@dataclass(slots=True)
class ParsedLog:
    """One run of a log."""
    path: str
    epochs: EpochTable = field(default_factory=EpochTable)
    epochs_total: int | None = None
    cut: bool = False            # the log ends inside an epoch
    cut_epoch: int | None = None
    settings: dict[str, int] = field(default_factory=dict)  # stated in the log
    line: int = 1                # where the run begins
    warnings: list[str] = field(default_factory=list)
    streams: int = 1             # workers whose lines the run holds (see parse_runs)
    test: dict[str, float] = field(default_factory=dict)  # evaluate()'s loss and accuracy
    images_per_s: float | None = None  # a benchmark's total throughput (no epochs)
    facts: dict = field(default_factory=dict)  # a run's values beyond settings (mllog)
    last: int = 0                # the highest finished epoch
    lanes: list = field(default_factory=list)  # one Lane per worker whose lines the
                                 # stream holds (logstream.StreamParser)
    apart: bool = False          # those workers were not in step: copies training alone
    _seen: int = 1               # result lines seen for the last epoch of a log without
                                 # epoch headers (each worker prints its own)

    def rows(self) -> list[dict]:
        return list(self.iter_rows())

    def iter_rows(self):
        """The epochs in order, each a dict made as it is asked for."""
        table = self.epochs
        for epoch in sorted(table.index):
            yield table.row(table.index[epoch], epoch)

    def result(self, record: dict, number: int, epoch: int | None = None) -> None:
        """An epoch's record (`epoch`, else the one after the last) replacing any before."""
        if epoch is None:
            epoch = self.last + 1
        record["epochs_total"] = self.epochs_total  # the record is the caller's to give
        self.epochs.add(epoch, record, number)
        self.last = max(self.last, epoch)
        self._seen = 1


def same_size(kept: dict, record: dict) -> bool:
    """Whether a result line counts as many batches (or samples) as an epoch's."""
    return (kept["steps"], kept["samples"]) == (record["steps"], record["samples"])


def same_values(kept: dict, record: dict) -> bool:
    """Whether a result line repeats an epoch's values (everything but its times)."""
    return all(kept.get(k) == v for k, v in record.items() if not k.startswith("seconds"))


# One part of a result line: a metric ("loss: 0.5"), a time per step/sample/epoch
# ("12ms/step") or a duration ("3s"). Metric parts, most of a line, are split at their
# colon and their names remembered (NAMES), which costs far less than a regex per part:
# a 200 MB log is millions of them.
NAME = re.compile(r"[A-Za-z_][\w./-]*")
TIME = re.compile(
    r"(?P<per>\d+(?:\.\d+)?)(?P<per_unit>s|ms|us|µs)/(?P<of>step|sample|epoch)"
    r"|(?P<took>\d+(?:\.\d+)?)(?P<took_unit>h|min|m|s|ms|us|µs)", re.IGNORECASE)
NAMES: dict[str, str | None] = {}  # a metric's name as printed -> as recorded (None: not one)
TIMED: set[str] = set()  # names among them that are times (seconds...), not metrics


TIMES: dict[str, tuple | bool] = {}  # a time part as printed -> parse_time's answer


def parse_time(part: str) -> tuple[str, float, float] | bool:
    """(what, seconds, resolution) of a time part: what is "took" for a duration ("3s"),
    else step, sample or epoch ("12ms/step"); False for anything else. Remembered: Keras
    prints whole units, so a long log repeats the same few hundred parts."""
    m = TIME.fullmatch(part)
    if m is None:
        found = False
    else:
        per, per_unit, of, took, took_unit = m.groups()
        if per is not None:
            found = (of, float(per) * SCALE[per_unit], SCALE[per_unit])
        else:
            found = ("took", float(took) * SCALE[took_unit], SCALE[took_unit])
    if len(TIMES) > 100_000:
        TIMES.clear()
    TIMES[part] = found
    return found


def metric_name(name: str) -> str | None:
    """A metric's name as recorded (None: not a name), remembered in NAMES (as printed,
    spaces around it included), where the caller looks first."""
    bare = name.strip()
    if len(NAMES) > 100_000:  # (a log of ever new names: bounded, as TIMES is)
        NAMES.clear()
    NAMES[name] = ALIASES.get(bare, bare) if NAME.fullmatch(bare) is not None else None
    if NAMES[name] is not None and NAMES[name].startswith("seconds"):
        TIMED.add(NAMES[name])
    return NAMES[name]


def parse_result_line(text: str, match: re.Match | None = None) -> dict | None:
    """The record of one finished-epoch line, or None for anything else (`match`:
    PROGRESS's match of the line, when the caller has it)."""
    match = match or PROGRESS.match(text)
    if not match or "ETA" in text:
        return None
    done, total, rest = match.groups()
    if total != "Unknown" and total != done and int(total) != int(done):
        return None  # a progress update that is not the end of the epoch
    record: dict = {}
    seconds_from_epoch_token = None
    metrics = 0
    recognised = True  # whether the last part was: a line cut inside a pair is unfinished
    for token in rest.split(" - "):
        if ":" in token:
            name, _, value = token.partition(":")
            canonical = NAMES.get(name, "")
            if canonical == "":
                canonical = metric_name(name)
            try:
                value = float(value)  # Keras' 0.1234, 1.2e-05, nan, inf (spaces allowed)
            except ValueError:
                value = None
            recognised = canonical is not None and value is not None
            if recognised:
                record[canonical] = value
                metrics += canonical not in TIMED
            continue
        for part in (token,) if " " not in token else token.split():
            time = TIMES.get(part)
            if time is None:
                time = parse_time(part)
            recognised = time is not False
            if not recognised:
                continue
            key, value, resolution = time
            if key == "epoch":
                seconds_from_epoch_token = (value, resolution)
            elif key == "took":
                if "seconds" not in record:
                    record["seconds"] = value
                    record["seconds_resolution"] = resolution  # Keras rounds to it
            else:
                record["unit"] = key
                record[PER[key]] = value
    if not recognised:
        return None
    if metrics < 1:
        return None  # no metric: predict()'s line, or not Keras at all
    if "seconds" not in record and seconds_from_epoch_token is None:
        return None
    if seconds_from_epoch_token is not None:  # tf-keras' ms/epoch is the precise one
        record["seconds"], record["seconds_resolution"] = seconds_from_epoch_token
    count = int(done)
    unit = record.pop("unit", "step")
    if record["seconds"] == 0:  # Keras 3's "0s": the time per step x the steps (the
        per = record.get(PER[unit])  # printed 0s stays its resolution's bound)
        if per:
            record["seconds"] = per * count
    # another accuracy's name: `accuracy` all the same
    if "accuracy" not in record:
        like = next((n for n in ACCURACY_LIKE if n in record), None)
        if like is not None:
            record["accuracy"] = record[like]
    if "val_" in rest and "val_accuracy" not in record:
        like = next((n for n in VAL_ACCURACY_LIKE if n in record), None)
        if like is not None:
            record["val_accuracy"] = record[like]
    record["steps"] = count if unit == "step" else None
    record["samples"] = count if unit == "sample" else None
    return record


# tqdm's epoch bars, as PyTorch Lightning draws them (and training loops that name
# their bar `Epoch k/N`), read as epochs:
#
#   Epoch 0: 100%|██████████| 8/8 [00:00<00:00, 105.31it/s, train_loss_step=2.300,
#       val_loss=2.300, val_acc=0.125, train_loss_epoch=2.320]
#
# A bar redraws itself through carriage returns (under `torchrun --tee` each redraw is a
# line of its own); an epoch's result is the bar's last state at 100% before the next
# epoch's bar begins or the log ends, validation included. Its time is the steps over
# tqdm's rate: Lightning's bar is not smoothed, so the rate is steps over the elapsed
# time, printed to 0.01 (the elapsed `00:00` is whole seconds). Lightning counts epochs
# from 0 (`Epoch 0`); a bar named `Epoch k/N` counts from 1 and states N. The metrics in
# its postfix: `*_epoch` before `*_step`, `train_` dropped, `acc` read as accuracy.
# Tests: tests/unit/test_pytorch_logs.py, on real captures (tests/data/pytorch).
# a bar's state: the epoch (and N), its percent, the steps done of all, the rate, postfix
BAR = re.compile(r"^Epoch (\d+)(?:/(\d+))?:\s+(\d+)%\|[^|]*\|\s*(\d+)/(\d+|\?)\s*"
                 r"\[[^\],]*(?:,\s*(\d+(?:\.\d+)?)(it/s|s/it))?(?:,\s*([^\]]*))?\]")
BAR_NAMES = {"loss": "loss", "acc": "accuracy", "accuracy": "accuracy",
         "val_loss": "val_loss", "val_acc": "val_accuracy", "val_accuracy": "val_accuracy"}


def bar_state(text: str) -> tuple[int, int | None, dict | None] | None:
    """(epoch counted from 1, epochs in all or None, the epoch's record when the bar is at
    100% with a rate, else None) of a bar's state; None for any other text."""
    m = BAR.match(text)
    if m is None:
        return None
    epoch, total, percent, done, steps, rate, unit, postfix = m.groups()
    epoch = int(epoch) + (0 if total else 1)
    total = int(total) if total else None
    if percent != "100" or done != steps or rate is None or float(rate) == 0:
        return epoch, total, None
    count, rate = int(done), float(rate)
    seconds = count / rate if unit == "it/s" else count * rate
    record: dict = {"seconds": seconds,
                    # the rate's last printed digit
                    "seconds_resolution": seconds * 0.005 / rate if unit == "it/s"
                    else count * 0.005}
    record.update(metrics(postfix or ""))
    record.update({"seconds_per_step": seconds / count, "steps": count, "samples": None})
    if "loss" not in record:
        record["loss_unknown"] = True
    return epoch, total, record


def metrics(postfix: str) -> dict[str, float]:
    """The metrics of a bar's postfix (`train_loss_step=2.3, val_acc=0.125, v_num=0`)."""
    found: dict[str, tuple[int, float]] = {}
    for pair in postfix.split(","):
        name, equals, value = pair.strip().partition("=")
        if not equals:
            continue
        rank = 2 if name.endswith("_epoch") else 1 if name.endswith("_step") else 3
        base = name.removesuffix("_epoch").removesuffix("_step").removeprefix("train_")
        canonical = BAR_NAMES.get(base)
        try:
            number = float(value)
        except ValueError:
            continue
        # a plain name, else the epoch's mean, else the last step's
        if canonical is not None and found.get(canonical, (0, 0.0))[0] < rank:
            found[canonical] = (rank, number)
    return {name: value for name, (_rank, value) in found.items()}
