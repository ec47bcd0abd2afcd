"""A run of a log and one stream's runs, shared by every format: `ParsedLog` (a run, its
epochs in an `EpochTable` of dlscale.logparse.epochtable), `Stream` (one task's or rank's
lines, offered to the formats in their declared order: dlscale.logparse.formats),
`StreamFormat` (the face of a format that reads a stream), and the user's patterns, which
any format's lines may need.

A 200 MB log can hold millions of epochs, or a hundred thousand runs: a run's epochs are
columns of doubles, not a dict per epoch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dlscale.logparse.epochtable import EpochTable
from dlscale.logparse.lines import SPLIT

# metric names as printed -> as recorded, whatever the format
ALIASES = {"acc": "accuracy", "val_acc": "val_accuracy"}


class LogError(ValueError):
    """A log holds no epoch at all; the message names the file (and its last lines)."""

    def __init__(self, message: str, settings: dict | None = None):
        super().__init__(message)
        self.settings = settings or {}  # what the log stated before it ended


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
    rate: float | None = None    # the run's logged throughput (a benchmark's total, a
                                 # Trainer's samples/s, an LLM's tokens/s): `unit`s a second
    unit: str = "images"         # what the run counts: images, samples or tokens
    per_gpu: bool = False        # `rate` is one GPU's (Tokens/s/GPU), not the run's
    facts: dict = field(default_factory=dict)  # a run's values beyond settings (mllog)
    last: int = 0                # the highest finished epoch
    lanes: list = field(default_factory=list)  # one Lane per worker whose lines the
                                 # stream holds (formats.keras)
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

    def rate_columns(self, gpus) -> dict:
        """The logged throughput as the tables' columns, by its unit: a benchmark's
        images/s as before; a token run's tokens/s of the run and of one GPU (one from
        the other with `gpus`, where known)."""
        if self.rate is None:
            return {}
        if self.unit != "tokens":
            return {"logged_images_per_s": self.rate}
        gpus = int(gpus) if gpus else None
        each = self.rate if self.per_gpu else (self.rate / gpus if gpus else None)
        total = self.rate if not self.per_gpu else (self.rate * gpus if gpus else None)
        return {"unit": "tokens", "tokens_per_s": total, "tokens_per_s_per_gpu": each}

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


def absorb(run: ParsedLog, other: ParsedLog) -> None:
    """`other`'s epochs, settings, test results and cut into `run`, another worker's of
    the same run: each epoch's time the slower one's, its values `run`'s (the facts stay
    `run`'s: the first worker's lines are the run's)."""
    mine, theirs = run.epochs, other.epochs
    seconds = theirs.columns.get("seconds")  # (none in a run cut before any epoch)
    for epoch, row in theirs.index.items():
        if epoch in mine:
            mine.keep_slower(epoch, seconds[row], theirs.lines[row])
        else:  # (its fields: the key is the epoch)
            mine.add(epoch, theirs.row(row), theirs.lines[row])
    run.settings = {**other.settings, **run.settings}
    run.test = run.test or other.test
    if run.rate is None:
        run.rate, run.unit, run.per_gpu = other.rate, other.unit, other.per_gpu
    elif other.rate is not None:  # each worker's own (a Trainer's summary on every rank)
        mine = run.rate if other.unit == run.unit else run.facts.get("samples_per_s")
        if mine is not None and other.rate != mine:
            unit = other.unit if other.unit == run.unit else "samples"
            run.warnings.append(f"{run.path}: another worker's throughput ({other.rate:g} "
                                f"{unit}/s) differs from the first's ({mine:g}): the "
                                "first worker's is the run's")
    run.warnings += other.warnings
    run.last = max(run.last, other.last)
    if other.cut:
        run.cut = True
        run.cut_epoch = min(filter(None, [run.cut_epoch, other.cut_epoch]))


# User patterns that read results, not settings: a custom loop's epoch line (its seconds,
# and the loss and accuracy on the same line) and a benchmark's total images/s.
RESULT_PATTERNS = ("epoch_time", "loss", "accuracy", "images_per_s")


# a progress bar's metric names (Lightning's: `train_loss_step`, `val_acc`) as recorded
BAR_NAMES = {"loss": "loss", "acc": "accuracy", "accuracy": "accuracy",
             "val_loss": "val_loss", "val_acc": "val_accuracy", "val_accuracy": "val_accuracy"}


def logged_metrics(pairs) -> dict[str, float]:
    """The metrics among a progress bar's (name, value) pairs: `*_epoch` before `*_step`,
    a plain name before both, `train_` dropped, `acc` read as accuracy; others (`v_num`,
    a learning rate) are no metric."""
    found: dict[str, tuple[int, float]] = {}
    for name, value in pairs:
        rank = 2 if name.endswith("_epoch") else 1 if name.endswith("_step") else 3
        base = name.removesuffix("_epoch").removesuffix("_step").removeprefix("train_")
        canonical = BAR_NAMES.get(base)
        try:
            number = float(value)
        except ValueError:
            continue
        if canonical is not None and found.get(canonical, (0, 0.0))[0] < rank:
            found[canonical] = (rank, number)
    return {name: value for name, (_rank, value) in found.items()}


def bar_record(steps: int, rate: float, unit: str) -> dict:
    """An epoch's record from a progress bar's finished state: its steps over its rate
    (`it/s`, or `s/it` where steps are slow), to the rate's last printed digit (0.01)."""
    seconds = steps / rate if unit == "it/s" else steps * rate
    return {"seconds": seconds,
            "seconds_resolution": seconds * 0.005 / rate if unit == "it/s" else steps * 0.005,
            "seconds_per_step": seconds / steps, "steps": steps, "samples": None}


def resolution(number: str) -> float:
    """The step of a printed number's last digit (0.01 for `2.27`)."""
    return 10.0 ** -len(number.partition(".")[2])


def share_total(run: ParsedLog, seconds: float, step: float, what: str, number: int) -> bool:
    """A run's total time given to its epochs, none of which has a time of its own, in
    even shares (`step`: the total's printed resolution); the run's `epoch_time_from`
    names `what` the total was and its line. False, and nothing changed, where an epoch
    has a time."""
    table = run.epochs
    if not table or any(table[epoch]["seconds"] is not None for epoch in table.index):
        return False
    count = len(table)
    for epoch in table.index:
        table.set(epoch, "seconds", seconds / count)
        table.set(epoch, "seconds_resolution", step / count)
    run.facts["epoch_time_from"] = (f"{what} ({seconds:g} s, line {number}) shared over its "
                                    f"{count} epochs")
    return True


class StreamFormat:
    """A format's reader of one stream (its face; dlscale.logparse.formats lists the
    formats): `read` takes a line that is the format's and returns True, or returns False
    at once for any other line (the next format is offered it). The rest are for a format
    that keeps state: the text after a cut log's last newline, the stream's end (what is
    pending becomes a result), a run's end, and the stream's runs at its end."""

    REDRAWN = False  # whether it reads every state of a line redrawn through \r, not
                     # only the last (tqdm's bars: several epochs can end on one line)

    def __init__(self, stream: Stream):
        self.stream = stream
        self.runs = stream.runs  # (the stream's list: it grows, it is never replaced)

    @classmethod
    def wanted(cls, patterns: dict | None) -> bool:
        """Whether a stream read with these user patterns needs this format."""
        return True

    def read(self, number: int, text: str) -> bool:
        return False

    def cut(self, text: str) -> bool:
        return False

    def flush(self) -> None:
        pass

    def ended(self, run: ParsedLog, last: bool) -> None:
        pass

    def settle(self, runs: list[ParsedLog]) -> list[ParsedLog]:
        return runs

    def line_shapes(self) -> list:
        """The line shapes (templates.Template) this reader kept of lines it read to the
        stream's end without taking: what the reader's refusal suggests a pattern from
        (formats.mined keeps them; others none)."""
        return []


class LogFormat:
    """A format whose lines are the whole log's, whichever stream prints them (MLPerf's
    MLLOG, DLLogger): from the first line that begins with its module's MARK, `read` is
    offered the format's lines (every line, with ALL_LINES: a framework's own lines beside
    them are a cross-check) and returns whether it took one; `runs_of` gives the log's
    runs at its end, the other formats' runs in hand (none: those stand); `current`, the
    run being read, for a live view."""

    ALL_LINES = False

    def read(self, number: int, text: str) -> bool:
        return False

    def runs_of(self, path: str, others: list[ParsedLog]) -> list[ParsedLog]:
        return []

    def current(self, path: str) -> ParsedLog | None:
        return None


class Stream:
    """The runs of one stream (one task's lines, or a log without prefixes), fed one line
    at a time: each line goes to the first format (in the registry's order) that reads
    it. A new run begins where a format says so (`new_run`, `fresh_run`)."""

    def __init__(self, path: str, patterns: dict[str, re.Pattern] | None, formats):
        self.path, self.patterns = path, patterns
        self.runs = [ParsedLog(path)]
        self.totals: list[tuple] = []  # (line, seconds, step, an average) no epoch took
        self.stated: list[tuple[int, dict]] = []  # (line, settings) as stated, in order
        self.read_at = 0  # the last line a format read
        self.readers = [fmt.Reader(self) for fmt in formats if fmt.Reader.wanted(patterns)]
        self.first = self.readers[0].read  # most lines of a long log are the first's
        self.rest = tuple(reader.read for reader in self.readers[1:])
        self.redrawn = [reader.read for reader in self.readers if reader.REDRAWN]

    def new_run(self, number: int) -> ParsedLog:
        for reader in self.readers:
            reader.ended(self.runs[-1], False)
        self.runs.append(ParsedLog(self.path, line=number))
        return self.runs[-1]

    def fresh_run(self, number: int) -> ParsedLog:
        """The current run if it has no result yet, else a new one: settings or a
        throughput after results begin the next run."""
        self.flush()  # an epoch still pending is this run's (a command echoed after it)
        run = self.runs[-1]
        return self.new_run(number) if run.epochs or run.rate is not None else run

    def feed(self, number: int, text: str) -> None:
        if "\r" in text or "\x08" in text:  # a redrawn line: its last state, and each
            states = [seg for seg in SPLIT.split(text) if seg.strip()]  # state to the
            if not states:                      # formats that read every one of them
                return
            for read in self.redrawn:
                for state in states[:-1]:
                    read(number, state)
            text = states[-1]
        if self.first(number, text):
            self.read_at = number
            return
        for read in self.rest:
            if read(number, text):
                self.read_at = number
                return

    def cut(self, text: str) -> None:
        """The text after the last newline of a log that was cut: unfinished."""
        for reader in self.readers:
            if reader.cut(text):
                return

    def flush(self) -> None:
        """What any format holds pending becomes a result (the stream ends, or a run's
        total comes)."""
        for reader in self.readers:
            reader.flush()

    def finish(self) -> list[ParsedLog]:
        self.flush()
        for reader in self.readers:
            reader.ended(self.runs[-1], True)
        runs = [r for r in self.runs if r.epochs or r.cut or r.rate is not None]
        for reader in self.readers:
            runs = reader.settle(runs)
        return runs


# --- a run's GPU count from what its lines stated (formats.stated, the reader) ----------
def batch_processes(settings: dict[str, int]) -> tuple[int, str] | None:
    """(processes, why) where a Trainer's banner gives them and nothing states the GPUs:
    its total batch over a device's batch times the accumulation."""
    if "accumulation" not in settings or "gpus" in settings:
        return None
    total, each, steps = (settings.get(k) for k in ("global_batch", "batch_per_gpu",
                                                   "accumulation"))
    if not (total and each and steps) or total % (each * steps):
        return None
    return total // (each * steps), (f"the Trainer's banner: Total train batch size {total} "
                                     f"= {each} a device x {steps} accumulated x "
                                     f"{total // (each * steps)} processes")


def job_gpus(settings: dict[str, int]) -> dict[str, int]:
    """A run's settings with its GPU count decided: what a line stated for the whole job
    (Number of devices:, Horovod's size, --n_gpus...) over one worker's device list, then a
    Trainer's banner (batch_processes)."""
    if "devices" in settings or "accumulation" in settings:
        settings = dict(settings)
        if found := batch_processes(settings):
            settings["gpus"] = found[0]
        settings.pop("accumulation", None)
        if "devices" in settings:
            settings.setdefault("gpus", settings.pop("devices"))
    return settings
