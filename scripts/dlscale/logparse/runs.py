"""A run of a log and one stream's runs, shared by every format: `ParsedLog` (a run, its
epochs in an `EpochTable`), `Stream` (one task's or rank's lines, offered to the formats
in their declared order: dlscale.logparse.formats), `StreamFormat` (the face of a format
that reads a stream), and the user's patterns, which any format's lines may need.

A 200 MB log can hold millions of epochs, or a hundred thousand runs: a run's epochs are
columns of doubles, not a dict per epoch.
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from math import nan as NAN

from dlscale.logparse.lines import SPLIT

# metric names as printed -> as recorded, whatever the format
ALIASES = {"acc": "accuracy", "val_acc": "val_accuracy"}


class LogError(ValueError):
    """A log holds no epoch at all; the message names the file (and its last lines)."""

    def __init__(self, message: str, settings: dict | None = None):
        super().__init__(message)
        self.settings = settings or {}  # what the log stated before it ended


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
        # each column's kind: float, int or bool, or None while it has no value (its NaN
        # are None then, unless absent)
        self.kinds: dict[str, type | None] = {}
        self.unset = 0  # how many columns have no value so far
        self.lines = array("q")  # each row's log line (`ended`), 0 where not known

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
            kind = kinds.get(name)  # None: a column only ever None so far
            if value != value:  # NaN: logged so (a float's), or a missing field
                if kind is None:
                    if self.special.get((name, row)) != self.ABSENT:
                        record[name] = None
                    continue
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
        self.add(epoch, record)

    def add(self, epoch: int, record: dict, line: int = 0) -> None:
        """An epoch's record (replacing any before), and the log line where it ended (0:
        not known; an epoch there keeps its line)."""
        row = self.index.get(epoch)
        columns = self.columns
        if row is None and record.keys() == columns.keys():  # the common case: a new
            row = self.index[epoch] = len(self.index)        # epoch with the same fields
            self.lines.append(line)
            kinds = self.kinds
            for name, value in record.items():
                if value is None:
                    value = NAN
                    if kinds[name] is float:  # (a column never set: None implied)
                        self.special[name, row] = self.NONE
                elif self.unset and kinds[name] is None:
                    self.first_value(name, value)
                columns[name].append(value)
            return
        if not self.index:  # the first epoch: its fields are the columns
            self.index[epoch] = 0
            self.lines.append(line)
            for name, value in record.items():
                columns[name] = array("d", [NAN if value is None else value])
                self.kinds[name] = kind = kind_of(value)
                self.unset += kind is None
            return
        if row is None:
            row = self.index[epoch] = len(self.index)
            self.lines.append(line)
            for name, values in columns.items():
                values.append(NAN)
                self.special[name, row] = self.ABSENT
        else:
            if line:
                self.lines[row] = line
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
            self.kinds[name] = None
            self.unset += 1
        if value is None:
            values[row] = NAN
            if self.kinds[name] is float:
                self.special[name, row] = self.NONE
            else:
                self.special.pop((name, row), None)
            return
        if self.kinds[name] is None:
            self.first_value(name, value)
        self.special.pop((name, row), None)
        values[row] = value

    def keep_slower(self, epoch: int, seconds: float, line: int) -> None:
        """Another worker's line for an epoch that is there: its time where slower, its
        line where later (the slowest worker's time counts; the epoch ends at its last
        line)."""
        row = self.index[epoch]
        if seconds > self.columns["seconds"][row]:
            self.set(epoch, "seconds", seconds, row)
        if line > self.lines[row]:
            self.lines[row] = line

    def ended(self) -> dict[int, int]:
        """epoch -> the log line where its result (its last worker's) came, where known."""
        lines = self.lines
        return {epoch: lines[row] for epoch, row in self.index.items() if lines[row]}

    def first_value(self, name: str, value) -> None:
        """A column's first value: its kind, and its rows so far None where not absent."""
        self.unset -= 1
        self.kinds[name] = kind = kind_of(value)
        if kind is float:
            for row in range(len(self.columns[name])):
                self.special.setdefault((name, row), self.NONE)

    def compact(self) -> None:
        """Once no epoch will be added: each column's room for more given back."""
        for name, values in self.columns.items():
            self.columns[name] = array("d", values)
        self.lines = array("q", self.lines)


def kind_of(value) -> type | None:
    return None if value is None else bool if isinstance(value, bool) else (
        int if isinstance(value, int) else float)


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
    if run.images_per_s is None:
        run.images_per_s = other.images_per_s
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
        return self.new_run(number) if run.epochs or run.images_per_s is not None else run

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
            return
        for read in self.rest:
            if read(number, text):
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
        runs = [r for r in self.runs if r.epochs or r.cut or r.images_per_s is not None]
        for reader in self.readers:
            runs = reader.settle(runs)
        return runs
