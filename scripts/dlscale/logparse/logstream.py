"""One stream of a log (a task's or rank's lines, after srun's, mpirun's or horovodrun's
prefix) parsed into runs, line by line; the streams of a job combined into its runs."""

from __future__ import annotations

import re

from dlscale.logparse.loglines import (
    ALIASES,
    HEADER,
    HOROVOD_TOTAL,
    PROGRESS,
    RESULT_PATTERNS,
    TEST_PRINT,
    TF_CNN_TOTAL,
    ParsedLog,
    parse_result_line,
    same_size,
    same_values,
    settings_in,
)

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

def stream_order(name: str) -> tuple:
    """Unprefixed first, then tasks and ranks by number."""
    return (name != "", int(name.split()[-1] or 0) if name else 0)
