"""Parse Keras training output into runs of epoch records, whatever the Keras version.

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

import hashlib
import os
import pickle
import re
from array import array
from collections import deque
from dataclasses import dataclass, field
from math import nan as NAN
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
HEADER = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
PROGRESS = re.compile(r"^\s*(\d+)/(\d+|Unknown)\s*(?:\[[=>.]*\]|[━─\u2501\u2500]+)?\s*-?\s*(.*)$")
SCALE = {"h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
ALIASES = {"acc": "accuracy", "val_acc": "val_accuracy"}
# metrics that mean the training accuracy, in the order one is taken as `accuracy` when a
# line has no metric of that name (Keras names a metric after how it was asked for)
ACCURACY_LIKE = ("sparse_categorical_accuracy", "categorical_accuracy", "binary_accuracy",
                 "sparse_top_k_categorical_accuracy", "top_k_categorical_accuracy")
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
             re.compile(r"\bhvd\.size\(\)\s*[:=]\s*(\d+)")],
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
                           r"MirroredStrategy|Number of|Batch size|Devices:")


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


class EpochTable:
    """A run's finished epochs by number, stored as a table: one column of doubles per
    field, not a dict per epoch (a 200 MB log can hold millions of epochs; a dict and its
    floats cost about 700 bytes each, a row here about 100). A field that an epoch lacks
    or holds as None is NaN in its column and named in `special`; a NaN that was logged
    is only NaN. Reads give each epoch as a dict of its own: a change goes through `set`."""

    ABSENT, NONE = 0, 1

    def __init__(self):
        self.index: dict[int, int] = {}  # epoch -> row, in the order epochs first came
        self.columns: dict[str, array] = {}
        self.special: dict[tuple[str, int], int] = {}  # (field, row) -> ABSENT or NONE
        self.kinds: dict[str, type] = {}  # int and bool columns are read back as such

    def __len__(self) -> int:
        return len(self.index)

    def __bool__(self) -> bool:
        return bool(self.index)

    def __contains__(self, epoch) -> bool:
        return epoch in self.index

    def __iter__(self):
        return iter(self.index)

    def keys(self):
        return self.index.keys()

    def items(self):
        return ((epoch, self.row(row, epoch)) for epoch, row in self.index.items())

    def get(self, epoch: int, default=None) -> dict | None:
        row = self.index.get(epoch)
        return default if row is None else self.row(row, epoch)

    def __getitem__(self, epoch: int) -> dict:
        return self.row(self.index[epoch], epoch)

    def row(self, row: int, epoch: int | None = None) -> dict:
        """A row as the epoch's record ({"epoch": epoch, field: value...})."""
        record = {} if epoch is None else {"epoch": epoch}
        kinds = self.kinds
        for name, values in self.columns.items():
            value = values[row]
            kind = kinds.get(name)
            if value != value:  # NaN: logged so (a float's), or a missing field
                if kind is not float:
                    record[name] = None  # counts, flags: never NaN when logged
                    continue
                special = self.special.get((name, row))
                if special == self.ABSENT:
                    continue
                if special == self.NONE:
                    record[name] = None
                    continue
            record[name] = value if kind is float else kind(value)
        return record

    def __setitem__(self, epoch: int, record: dict) -> None:
        row = self.index.get(epoch)
        columns = self.columns
        if row is None and record.keys() == columns.keys():  # the common case: a new
            row = self.index[epoch] = len(self.index)        # epoch with the same fields
            kinds = self.kinds
            for name, value in record.items():
                if value is None:
                    value = NAN
                    if kinds.get(name) is float:
                        self.special[name, row] = self.NONE
                columns[name].append(value)
            return
        if row is None:
            row = self.index[epoch] = len(self.index)
            for name, values in columns.items():
                values.append(NAN)
                self.special[name, row] = self.ABSENT
        else:
            for name, values in columns.items():
                values[row] = NAN
                self.special[name, row] = self.ABSENT
        for name, value in record.items():
            self.set(epoch, name, value, row)

    def set(self, epoch: int, name: str, value, row: int | None = None) -> None:
        """One field of an epoch that is there."""
        if row is None:
            row = self.index[epoch]
        values = self.columns.get(name)
        if values is None:
            values = self.columns[name] = array("d", [NAN]) * len(self.index)
            self.special.update(((name, r), self.ABSENT) for r in range(len(self.index)))
        self.special.pop((name, row), None)
        if value is None:
            values[row] = NAN
            self.special[name, row] = self.NONE
            return
        if name not in self.kinds:
            self.kinds[name] = bool if isinstance(value, bool) else (
                int if isinstance(value, int) else float)
        values[row] = value


@dataclass
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
    ended: dict[int, int] = field(default_factory=dict)  # epoch: line of its last result
    last: int = 0                # the highest finished epoch
    _open: int | None = None     # the epoch whose header came last, while unfinished
    _copies: int = 1             # how many times the open epoch's header came
    _pending: int = 0            # result lines still expected for the last epoch
    _copies_seen: int = 1        # result lines seen for the last epoch
    _late: int = 0               # result lines of the last epoch still possible after the
                                 # next epoch's header (workers print in any order)
    order: list[int] = field(default_factory=list)  # the epochs, as they first finished

    def rows(self) -> list[dict]:
        return list(self.iter_rows())

    def iter_rows(self):
        """The epochs in order, each a dict made as it is asked for."""
        table = self.epochs
        for epoch in sorted(table.index):
            yield table.row(table.index[epoch], epoch)

    def result(self, record: dict, number: int) -> None:
        epoch = self._open if self._open is not None else self.last + 1
        if epoch not in self.epochs:
            self.order.append(epoch)
        record["epochs_total"] = self.epochs_total  # the record is the caller's to give
        self.epochs[epoch] = record
        self.ended[epoch] = number
        self.last = max(self.last, epoch)
        self._pending, self._open, self._copies_seen = self._copies - 1, None, 1


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
    """A metric's name as recorded (None: not a name), remembered in NAMES, where the
    caller looks first."""
    NAMES[name] = ALIASES.get(name, name) if NAME.fullmatch(name) is not None else None
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
            name = name.strip()
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
                metrics += not canonical.startswith("seconds")
            continue
        for part in token.split():
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
                record[f"seconds_per_{key}"] = value
    if not recognised:
        return None
    if metrics < 1:
        return None  # no metric: predict()'s line, or not Keras at all
    if "seconds" not in record and seconds_from_epoch_token is None:
        return None
    if seconds_from_epoch_token is not None:  # tf-keras' ms/epoch is the precise one
        record["seconds"], record["seconds_resolution"] = seconds_from_epoch_token
    count = int(done)
    per = record.get(f"seconds_per_{record.get('unit', 'step')}")
    if record["seconds"] == 0 and per:  # Keras 3's "0s": the time per step x the steps
        record["seconds"] = per * count  # (the printed 0s stays its resolution's bound)
    for prefix in ("", "val_"):  # another accuracy's name: `accuracy` all the same
        if f"{prefix}accuracy" not in record:
            like = next((f"{prefix}{n}" for n in ACCURACY_LIKE if f"{prefix}{n}" in record),
                        None)
            if like is not None:
                record[f"{prefix}accuracy"] = record[like]
    unit = record.pop("unit", "step")
    record["steps"] = count if unit == "step" else None
    record["samples"] = count if unit == "sample" else None
    return record


# Prefixes that launchers put before each line; the stream is the task or rank. srun
# --label: "0: " (right-aligned when there are 10 or more tasks); OpenMPI's mpirun
# --tag-output: "[1,0]<stdout>:" (job, rank), after a date with --timestamp-output;
# horovodrun: "[0]<stdout>:" (rank). mpirun and horovodrun tag each piece of output as it
# comes, not each line: a progress bar's updates each carry the tag, and a piece of
# another rank or channel can sit in the middle of a line (tests/data/horovod-progress).
_TAG = (r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?"
        r"\[(?:(\d+),)?(\d+)\]<(stdout|stderr|stddiag)>: ?")
MPI_TAG = re.compile("^" + _TAG)
MPI_TAG_ANY = re.compile(_TAG)
SPLIT = re.compile(r"[\r\x08]+")


STREAMS: dict[str, str] = {}  # a prefix's number -> its stream's name, made once


def split_stream(line: str) -> tuple[str, str]:
    """(stream, text) of a line without an mpirun tag (those: `tagged_pieces`): the task
    srun's --label names ("" for none), and the line without the label."""
    first = line[:1]
    if first.isdigit() or first == " ":  # srun --label: "0: ", "12: "
        label, colon, text = line.partition(": ")
        label = label.lstrip(" ")
        if colon and label.isdigit() and label.isascii():
            name = STREAMS.get(label)
            if name is None:
                name = STREAMS[label] = f"task {label}"
            return name, text
    return "", line


def tagged_pieces(line: str) -> list[tuple[str, str, str]] | None:
    """(stream, channel, text) of each tagged piece of a line that begins with an
    mpirun or horovodrun tag (most such lines are one piece); None for any other line."""
    first = MPI_TAG.match(line)
    if first is None:
        return None
    tags = [first]
    if line.find("]<std", first.end()) >= 0:
        tags += MPI_TAG_ANY.finditer(line, first.end())
    ends = [m.start() for m in tags[1:]] + [len(line)]
    return [(f"rank {m.group(2)}", m.group(3), line[m.end():end])
            for m, end in zip(tags, ends)]


class StreamParser:
    """The runs of one stream (one task's lines, or a log without prefixes), fed one line
    at a time."""

    def __init__(self, path: str, patterns: dict[str, re.Pattern] | None):
        self.path, self.patterns = path, patterns
        self.runs = [ParsedLog(path)]

    def new_run(self, number: int) -> ParsedLog:
        self.runs.append(ParsedLog(self.path, line=number))
        return self.runs[-1]

    def fresh_run(self, number: int) -> ParsedLog:
        """The current run if it has no result yet, else a new one: settings or a
        throughput after results begin the next run."""
        run = self.runs[-1]
        return self.new_run(number) if run.epochs or run.images_per_s is not None else run

    def feed(self, number: int, text: str) -> None:
        # progress bars overwrite themselves with \r or \b: keep the last state
        if "\r" in text or "\x08" in text:
            segments = [seg for seg in SPLIT.split(text) if seg.strip()]
            if not segments:
                return
            text = segments[-1]
        run = self.runs[-1]
        if (header := HEADER.match(text)) is not None:
            self.header(run, number, int(header.group(1)), int(header.group(2)))
            return
        if self.patterns and (record := self.custom(number, text)) is not None:
            if isinstance(record, float):
                self.fresh_run(number).images_per_s = record
            else:
                run.result(record, number)
            return
        # most lines of a long log are epoch lines: they are tried first
        progress = PROGRESS.match(text)
        if progress is not None and (record := parse_result_line(text, progress)) is not None:
            self.result(run, record, number)
            return
        if "/sec" in text and (total := throughput(text)) is not None:
            run = self.fresh_run(number)
            run.images_per_s, gpus = total
            if gpus is not None:
                run.settings["gpus"] = gpus
            return
        warn = None if not self.patterns else (
            lambda message, at=number:
            self.runs[-1].warnings.append(f"{self.path}:{at}: {message}"))
        if found := settings_in(text, self.patterns, warn):
            self.fresh_run(number).settings.update(found)
            return
        if (printed := TEST_PRINT.match(text)) is not None and (run.epochs or run._open):
            name, value = printed.group(1).lower(), float(printed.group(2))
            run.test[f"test_{ALIASES.get(name, name)}"] = value / (100 if printed.group(3)
                                                                   else 1)

    def custom(self, number: int, text: str) -> dict | float | None:
        """What the user's result patterns read from a line: an epoch's record, a run's
        images/s, or None."""
        found = {}
        for key in RESULT_PATTERNS:
            regex = self.patterns.get(key)
            if regex is not None and (m := regex.search(text)) is not None:
                try:
                    found[key] = float(m.group(1))
                except (TypeError, ValueError):
                    self.runs[-1].warnings.append(
                        f"{self.path}:{number}: pattern {key} matched {m.group(1)!r}, which is "
                        "not a number: ignored")
        if "epoch_time" in found:
            return {"seconds": found["epoch_time"], "loss": found.get("loss"),
                    "accuracy": found.get("accuracy"), "steps": None, "samples": None,
                    "loss_unknown": "loss" not in found}  # not logged, not NaN
        return found.get("images_per_s")

    def header(self, run: ParsedLog, number: int, epoch: int, total: int) -> None:
        if run._open == epoch and run.epochs_total == total:
            # the same header again while the epoch runs: every worker prints its own, or
            # a training cut inside the epoch began it again (a resume); the result lines
            # that follow tell which (see `result`)
            run._copies += 1
            return
        if run._pending and run._open is None and run.last == epoch - 1:
            # epoch k's header came more than once and its result once so far: the other
            # workers' lines for it may still come after this header (`result`)
            run._late, run._pending = run._pending, 0
        if run.epochs and (total != run.epochs_total or epoch == 1):
            run = self.new_run(number)
        elif run.epochs and epoch <= run.last:
            run.warnings.append(
                f"{self.path}:{number}: epoch {epoch} comes again after epoch {run.last}: "
                "taken as a resume from an older backup, the later result replaces the "
                "earlier")
        if run._open is not None and run._open != epoch:
            run.warnings.append(f"{self.path}:{number}: epoch {run._open} has no result "
                                "line before the next epoch begins")
        run._open, run.epochs_total, run._copies = epoch, total, 1

    @staticmethod
    def result(run: ParsedLog, record: dict, number: int) -> None:
        if run._open is not None and not run._late:  # the common case: the epoch's line
            run.result(record, number)
            return
        last = run.epochs.get(run.last)
        if run._open is not None:
            if (run._late and last is not None and run._open == run.last + 1
                    and same_values(last, record) and same_size(last, record)):
                # a slower worker's line for the epoch before, after a faster worker's
                # next header (workers print in any order; their metrics are global)
                run._late -= 1
                run._copies_seen += 1
                run.streams = max(run.streams, run._copies_seen)
                run.epochs.set(run.last, "seconds", max(last["seconds"], record["seconds"]))
                run.ended[run.last] = number
                return
            if run._late:
                # epoch k began more than once and ended once: one worker whose run was
                # cut inside epoch k and resumed it, not several workers
                run.warnings.append(
                    f"{run.path}:{number}: epoch {run.last} began {run._late + 1} "
                    "times and ended once: taken as a run resumed inside that epoch")
                run._late = 0
            run.result(record, number)
            return
        if last is not None and ((run._pending and same_size(last, record))
                                 or same_values(last, record)):
            # another worker's line for the same epoch (after the header each printed, or
            # with the same values: MultiWorkerMirroredStrategy reports global metrics)
            run._pending = max(0, run._pending - 1)
            run._copies_seen += 1
            run.streams = max(run.streams, run._copies_seen)
            run.epochs.set(run.last, "seconds",  # the slowest counts
                           max(last["seconds"], record["seconds"]))
            run.ended[run.last] = number
        elif last is not None and (run.epochs_total is not None
                                   or (record["steps"], record["samples"])
                                   != (last["steps"], last["samples"])):
            # after the epochs without a header, or over another number of batches:
            # evaluate()'s line, not an epoch
            run.test = {f"test_{k}": v for k, v in record.items() if k in ("loss", "accuracy")}
        else:
            run.result(record, number)

    def cut(self, text: str) -> None:
        """The text after the last newline: a result line there was not finished."""
        last = self.runs[-1]
        if text.strip() and PROGRESS.match(SPLIT.split(text)[-1]):
            last.cut, last.cut_epoch = True, last._open or last.last + 1

    def finish(self) -> list[ParsedLog]:
        last = self.runs[-1]
        if last._open is not None:
            last.cut, last.cut_epoch = True, last._open
        return [r for r in self.runs if r.epochs or r.cut or r.images_per_s is not None]


def throughput(text: str) -> tuple[float, int | None] | None:
    """(images/s, GPUs when stated) of a benchmark's total line, or None."""
    if (m := HOROVOD_TOTAL.search(text)) is not None:
        return float(m.group(2)), int(m.group(1))
    if (m := TF_CNN_TOTAL.match(text)) is not None:
        return float(m.group(1)), None
    return None


def combine(streams: dict[str, list[ParsedLog]]) -> list[ParsedLog]:
    """One list of runs from the runs of several streams (tasks): run i of the job is run
    i of every stream; an epoch's time is the slowest stream's, its other values the first
    stream's (rank 0, the chief). Streams without epochs only state settings."""
    order = sorted(streams, key=stream_order)
    with_epochs = [streams[name] for name in order if streams[name]]
    if len(with_epochs) <= 1:
        return with_epochs[0] if with_epochs else []
    combined = []
    count = max(len(runs) for runs in with_epochs)
    for index in range(count):
        parts = [runs[index] for runs in with_epochs if index < len(runs)]
        run = parts[0]
        for other in parts[1:]:
            if run.epochs_total is not None and other.epochs_total is None:
                # no epoch header in this rank's lines while the chief's epochs have one:
                # its results are evaluate()'s (Horovod's examples train with verbose=0
                # on every rank but 0, then each rank evaluates), never epochs
                if not run.test and other.epochs:
                    last = other.epochs[other.last]
                    run.test = {f"test_{k}": last[k] for k in ("loss", "accuracy")
                                if last.get(k) is not None}
                run.settings = {**other.settings, **run.settings}
                run.warnings += other.warnings
                continue
            mine, theirs = run.epochs, other.epochs
            seconds = theirs.columns["seconds"]
            for epoch, row in theirs.index.items():
                if epoch in mine:
                    kept = mine.columns["seconds"][mine.index[epoch]]
                    if seconds[row] > kept:
                        mine.set(epoch, "seconds", seconds[row])
                else:
                    mine[epoch] = theirs.row(row)  # (its fields: the key is the epoch)
            for epoch, number in other.ended.items():
                run.ended[epoch] = max(run.ended.get(epoch, 0), number)
            run.settings = {**other.settings, **run.settings}
            run.test = run.test or other.test
            if run.images_per_s is None:
                run.images_per_s = other.images_per_s
            run.warnings += other.warnings
            run.last = max(run.last, other.last)
            if other.cut:
                run.cut = True
                run.cut_epoch = min(filter(None, [run.cut_epoch, other.cut_epoch]))
        run.streams = sum(part.streams for part in parts)
        run.line = min(part.line for part in parts)
        combined.append(run)
    if len({len(runs) for runs in with_epochs}) > 1:
        combined[0].warnings.append(
            f"{combined[0].path}: the tasks hold different numbers of runs ("
            + ", ".join(f"{name or 'unprefixed'}: {len(streams[name])}" for name in order
                        if streams[name]) + "): runs are matched in order")
    return combined


def lines_of(text: str):
    """(line, ended) pairs of a text: ended is False for the text after the last newline."""
    lines = text.split("\n")
    for line in lines[:-1]:
        yield line, True
    yield lines[-1], False


# A line longer than this is compacted as it is read (lines_in): progress bars that
# rewrite themselves with \r or \b make one "line" of a whole epoch's updates, and
# only its first segment (a launcher's prefix) and its last one are ever read.
LONG_LINE = 1 << 16


def compact(line: bytes) -> bytes:
    """A line's first segment and its last non-blank one (see LONG_LINE), found from
    the ends: no list of its segments is made."""
    cuts = [i for i in (line.find(b"\r"), line.find(b"\x08")) if i >= 0]
    if not cuts:
        return line
    head = min(cuts)
    end = len(line)
    while end > head:
        start = max(line.rfind(b"\r", head, end), line.rfind(b"\x08", head, end))
        if line[start + 1:end].strip():
            return line[:head] + b"\r" + line[start + 1:end]
        end = start
    return line[:head] + b"\r"


def lines_in(path, size: int = 1 << 20):
    """(line, ended) pairs of a file, read a chunk at a time: memory bounded by the
    longest line after compaction (LONG_LINE), not by the file."""
    lines = Lines()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(size), b""):
            for line in lines.add(chunk):
                yield line, True
    yield lines.rest(), False


class Lines:
    """Byte chunks (a file's, or a pipe's as they come) as finished lines of text."""

    def __init__(self):
        self.pending = b""

    def add(self, chunk: bytes) -> list[str]:
        """The lines that `chunk` finished."""
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        if len(self.pending) > LONG_LINE:
            self.pending = compact(self.pending)
        return [decode(compact(raw) if len(raw) > LONG_LINE else raw) for raw in lines]

    def rest(self) -> str:
        """The text after the last newline."""
        return decode(self.pending)


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class LogReader:
    """A log read one line at a time, as parse_lines reads a file or dlscale.command
    reads a command's output while it runs. Lines a launcher prefixed (srun --label,
    mpirun --tag-output) go to the parser of their task."""

    def __init__(self, path: str = "<log>", patterns: dict[str, re.Pattern] | None = None):
        self.path, self.patterns = path, patterns
        self.parsers: dict[str, StreamParser] = {}
        self.tail: deque[str] = deque(maxlen=3)  # the last lines, for a log without epochs
        self.number = 0
        self.binary = False  # NUL bytes: not a text log
        # text of a tagged line whose newline has not come yet, per (rank, channel)
        self.pieces: dict[tuple[str, str], list[str]] = {}

    def feed(self, line: str, ended: bool = True) -> None:
        """The next line; `ended` False for text after the last newline of a log that
        was cut (a line that is not finished)."""
        self.number += 1
        if "\x00" in line:
            self.binary = True
        if "\x1b" in line:
            line = ANSI.sub("", line)
        if line and not line.isspace():
            self.tail.append(line)  # stripped when quoted
        pieces = tagged_pieces(line) if "]<std" in line else None
        if pieces is None:
            stream, text = split_stream(line)
            pieces = [(stream, "", text)]
        if len(pieces) == 1 and not self.pieces:  # the common case, without a call more
            stream, _channel, text = pieces[0]
            parser = self.parsers.get(stream)
            if parser is not None and ended:
                parser.feed(self.number, text)
            else:
                self.dispatch(stream, text, ended)
            return
        # every piece but the last waits for the rest of its line (its newline comes in
        # a later piece of the same rank and channel); the newline ends the last one
        *waiting, (stream, channel, text) = pieces
        for key_stream, key_channel, piece in waiting:
            self.pieces.setdefault((key_stream, key_channel), []).append(piece)
        text = "".join(self.pieces.pop((stream, channel), [])) + text
        self.dispatch(stream, text, ended)
        if not ended:  # the log ends: what other ranks had begun is cut too
            for (key_stream, _channel), parts in list(self.pieces.items()):
                self.dispatch(key_stream, "".join(parts), False)
            self.pieces.clear()

    def dispatch(self, stream: str, text: str, ended: bool) -> None:
        parser = self.parsers.get(stream)
        if parser is None:
            parser = self.parsers[stream] = StreamParser(self.path, self.patterns)
        if ended:
            parser.feed(self.number, text)
        else:
            parser.cut(text)

    def current(self) -> ParsedLog | None:
        """The run being read in the first task that has finished epochs (rank 0's, or
        the log's without prefixes), as it stands: for a live view, nothing changed."""
        for name in sorted(self.parsers, key=stream_order):
            run = self.parsers[name].runs[-1]
            if run.epochs:
                return run
        return None

    def runs(self) -> list[ParsedLog]:
        """Every run read (see parse_lines); once, at the end."""
        finished = {name: parser.finish() for name, parser in self.parsers.items()}
        runs = combine(finished)
        # settings that only streams without results stated (a job script's header on
        # unprefixed lines before `srun --label` tasks print the epochs) hold for every run
        stated: dict[str, int] = {}
        for name in sorted(self.parsers, key=stream_order):
            if not finished[name]:
                for run in self.parsers[name].runs:
                    stated.update(run.settings)
        for run in runs:
            run.settings = job_gpus({**stated, **run.settings})
        if not any(r.epochs or r.images_per_s is not None for r in runs):
            if self.binary:
                raise LogError(f"{self.path} is binary (it holds NUL bytes): expected a "
                               "text log")
            last = " | ".join(quoted(t.strip()) for t in self.tail)
            stated = job_gpus({k: v for p in self.parsers.values() for r in p.runs
                               for k, v in r.settings.items()})
            raise LogError(f"{self.path}: no finished epoch found (expected Keras lines such "
                           "as '196/196 - 45s - loss: 1.76 - accuracy: 0.35', or a "
                           "benchmark's total images/s)"
                           + (f"; its last lines: {last}" if last else "; it is empty"),
                           stated)
        return runs


def stream_order(name: str) -> tuple:
    """Unprefixed first, then tasks and ranks by number."""
    return (name != "", int(name.split()[-1] or 0) if name else 0)


def printable(text: str) -> str:
    """Text from a log made safe to quote in a message or table: control characters
    (an escape sequence, a bell) written as Python escapes (\x1b), tabs as spaces."""
    text = text.replace("\t", " ")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def quoted(line: str, width: int = 120) -> str:
    """A line of a log as a message quotes it: printable, cut to `width` characters."""
    line = printable(line)
    return line if len(line) <= width else line[:width - 3] + "..."


def parse_lines(lines, path: str = "<log>",
                patterns: dict[str, re.Pattern] | None = None) -> list[ParsedLog]:
    """Every run in a log given as (line, ended) pairs, in one pass; LogError when none
    has a finished epoch. Lines a launcher prefixed (srun --label, mpirun --tag-output)
    are parsed per task and the tasks' runs combined (`combine`); the same line printed
    by every worker of an unprefixed log counts once (`streams` says how many)."""
    reader = LogReader(path, patterns)
    for line, ended in lines:
        reader.feed(line, ended)
    return reader.runs()


def parse_runs(text: str, path: str = "<log>",
               patterns: dict[str, re.Pattern] | None = None) -> list[ParsedLog]:
    """Every run in a log's text, in order (see parse_lines)."""
    return parse_lines(lines_of(text), path, patterns)


def parse_text(text: str, path: str = "<log>") -> ParsedLog:
    """The one run of a log (a dlscale train.log); LogError if it holds several."""
    runs = parse_runs(text, path)
    if len(runs) > 1:
        starts = ", ".join(str(r.line) for r in runs)
        raise LogError(f"{path} holds {len(runs)} runs (starting at lines {starts}): "
                       "expected one")
    return runs[0]


def read_text(path) -> str:
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        return handle.read()




def parse_file(path: str) -> ParsedLog:
    return parse_text(read_text(path), str(path))


def parse_file_runs(path: str, patterns: dict[str, re.Pattern] | None = None,
                    cache: str | None = None) -> list[ParsedLog]:
    """Every run in a log file (see parse_lines). With `cache` (a folder), what was found
    is kept there and read back while the file keeps its size and mtime and the patterns
    are the same: a long log is parsed once, not by planning and by its rule again."""
    if cache is None:
        return parse_lines(lines_in(path), str(path), patterns)
    real = os.path.realpath(path)
    status = os.stat(real)
    stamp = (PARSED_FORMAT, real, status.st_size, status.st_mtime_ns,
             sorted((k, getattr(r, "pattern", str(r))) for k, r in (patterns or {}).items()))
    kept = Path(cache) / f"{hashlib.sha256(real.encode()).hexdigest()[:20]}.pickle"
    try:
        with open(kept, "rb") as handle:
            kept_stamp, found = pickle.load(handle)
    except Exception:  # noqa: BLE001 (none yet, or from another version: parse again)
        kept_stamp = found = None
    if kept_stamp == stamp and isinstance(found, (list, LogError)):
        if isinstance(found, LogError):
            raise found
        for run in found:
            run.path = str(path)
        return found
    try:
        found = parse_lines(lines_in(path), str(path), patterns)
    except LogError as exc:
        keep(kept, stamp, exc)
        raise
    keep(kept, stamp, found)
    return found


# The shape of what parse_file_runs keeps: a change to ParsedLog or EpochTable bumps it.
PARSED_FORMAT = 1


def keep(path: Path, stamp: tuple, found) -> None:
    """Write a parse's result for parse_file_runs' cache; a cache that cannot be written
    is only not kept. A name of its own per process: SLURM's job steps plan side by side."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as handle:
            pickle.dump((stamp, found), handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
