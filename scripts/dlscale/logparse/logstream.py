"""One stream of a log (a task's or rank's lines, after srun's, mpirun's or horovodrun's
prefix) parsed into runs, line by line; the streams of a job combined into its runs."""

from __future__ import annotations

import ast
import re

from dlscale.logparse.lanes import (
    Lane,
    absorb,
    begin,
    close,
    lane_of,
    merge_copies,
    open_epoch,
    settle,
    test_of,
)
from dlscale.logparse.loglines import (
    ALIASES,
    HEADER,
    HOROVOD_TOTAL,
    PROGRESS,
    RESULT_PATTERNS,
    TEST_PRINT,
    TF_CNN_TOTAL,
    ParsedLog,
    bar_state,
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
TORCHRUN = re.compile(r"\[(?:default|rank)(\d+)\]:")
MPI_TAG_ANY = re.compile(_TAG)
SPLIT = re.compile(r"[\r\x08]+")


STREAMS: dict[str, str] = {}  # a prefix's number -> its stream's name, made once
HEADERS: dict[str, tuple[int, int] | tuple[()]] = {}  # a line -> its (epoch, total), or ()


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


def split_torchrun(line: str) -> tuple[str, str]:
    """(stream, text) of a line `torchrun --tee` prefixed with its worker's local rank
    (`[default0]:`, or `[rank0]:` with --log-line-prefix-template); ("", line) else."""
    m = TORCHRUN.match(line)
    return ("", line) if m is None else (f"rank {m.group(1)}", line[m.end():])


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
        self.pending: tuple | None = None  # a bar's epoch: (epoch, of, record, line)

    def new_run(self, number: int) -> ParsedLog:
        settle(self.runs[-1])
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
            if "%|" in text:  # tqdm's bars: each epoch's last state (loglines.bar_state)
                for segment in segments:
                    self.bar(number, segment)
            text = segments[-1]
        elif text.startswith("Epoch ") and "%|" in text:
            self.bar(number, text)
            return
        run = self.runs[-1]
        if text.startswith("Epoch ") or text[:1].isspace():
            header = HEADERS.get(text)
            if header is None:  # (a long log repeats its runs' headers: remembered)
                m = HEADER.match(text)
                header = (int(m.group(1)), int(m.group(2))) if m is not None else ()
                if len(HEADERS) > 10_000:
                    HEADERS.clear()
                if len(text) < 64:  # (a long line is no header: not kept)
                    HEADERS[text] = header
            if header:
                self.header(run, number, *header)
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
        if text.startswith(TRAINER_TOTAL) and (summary := trainer_total(text)) is not None:
            run = self.fresh_run(number)
            run.images_per_s, facts, epochs = summary
            run.facts.update(facts)
            if epochs is not None:
                run.settings["epochs"] = epochs
            return
        warn = None if not self.patterns else (
            lambda message, at=number:
            self.runs[-1].warnings.append(f"{self.path}:{at}: {message}"))
        if found := settings_in(text, self.patterns, warn):
            self.fresh_run(number).settings.update(found)
            return
        if (printed := TEST_PRINT.match(text)) is not None and (run.epochs or run.lanes):
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
        lanes = run.lanes
        # the common case, one worker's next epoch: `begin` inlined here, and
        # ParsedLog.result in `result`, since a call more a line costs a long log's parse
        # about 2 % (bench_parse.py's runs shape, 50 MB, 7 runs of each side by side)
        if len(lanes) == 1 and total == run.epochs_total:
            lane = lanes[0]
            if lane.open is None and lane.last == epoch - 1:
                lane.open, lane.began, lane.since = epoch, 1, number
                return
        if run.epochs.index and total != run.epochs_total:
            run = self.new_run(number)
        lanes = run.lanes
        for lane in lanes:  # the worker whose next epoch this is
            if lane.open is None and lane.last == epoch - 1:
                return begin(run, lane, epoch, total, number)
        if epoch == 1 and lanes:
            finished = [lane for lane in lanes if lane.last]
            if not finished or (len(finished) > 1 and not all(
                    lane.open is None and lane.last == total for lane in finished)):
                # another worker's first epoch (every worker prints its own), or a run
                # cut inside epoch 1 begun again: `settle` tells which
                lanes.append(Lane())
                return begin(run, lanes[-1], epoch, total, number)
            run = self.new_run(number)  # the epoch count restarts: the next run
            lanes = run.lanes
        if not lanes:
            lanes.append(Lane())
            return begin(run, lanes[0], epoch, total, number)
        for lane in lanes:
            if lane.open == epoch:  # begun again before its result: a resume inside it
                lane.began += 1
                return
        lane = max(lanes, key=lambda lane: lane.last)
        if lane.last >= epoch:
            run.warnings.append(
                f"{self.path}:{number}: epoch {epoch} comes again after epoch {lane.last}: "
                "taken as a resume from an older backup, the later result replaces the "
                "earlier")
        if lane.open is not None:
            run.warnings.append(f"{self.path}:{number}: epoch {lane.open} has no result "
                                "line before the next epoch begins")
        begin(run, lane, epoch, total, number)

    def result(self, run: ParsedLog, record: dict, number: int) -> None:
        lanes = run.lanes
        if len(lanes) == 1 and (lane := lanes[0]).open is not None and lane.began == 1 and (
                run.epochs.index or len(self.runs) == 1):  # the common case: one worker's
            epoch = lane.open                               # epoch ends (see `header`)
            record["epochs_total"] = run.epochs_total
            run.epochs.add(epoch, record, number)
            if epoch > run.last:
                run.last = epoch
            run._seen = 1
            lane.open, lane.last, lane.began = None, epoch, 0
            return
        began = [lane for lane in lanes if lane.open is not None]
        last = run.epochs.get(run.last)
        if began:
            if last is not None and not same_size(last, record) and any(
                    lane.open is None and lane.last == run.epochs_total for lane in lanes):
                # a worker that finished its epochs evaluates while others still train
                run.test = test_of(record)
            elif not run.epochs and (earlier := self.copies_before(run, record)):
                earlier.test = test_of(record)  # the copies before still evaluating
            else:
                close(run, lane_of(run, began, record), record, number)
            return
        if last is not None and same_values(last, record):
            # another worker's line for the same epoch without a header of its own
            # (MultiWorkerMirroredStrategy reports global metrics): the slowest counts
            run._seen += 1
            run.streams = max(run.streams, run._seen)
            run.epochs.keep_slower(run.last, record["seconds"], number)
        elif last is not None and (run.epochs_total is not None
                                   or not same_size(last, record)):
            # after the epochs without a header, or over another number of batches:
            # evaluate()'s line, not an epoch
            run.test = test_of(record)
        else:
            run.result(record, number)

    def copies_before(self, run: ParsedLog, record: dict) -> ParsedLog | None:
        """The run before `run` when it was several workers' and `record` (the first
        result of `run`) is over another number of batches: their evaluate()."""
        if len(self.runs) < 2 or self.runs[-1] is not run:
            return None
        earlier = self.runs[-2]
        kept = earlier.epochs.get(earlier.last)
        if earlier.streams > 1 and kept is not None and not same_size(kept, record):
            return earlier
        return None

    def bar(self, number: int, text: str) -> None:
        """A tqdm bar's state: its epoch's result is its last state at 100%, kept until
        another epoch's bar begins or the stream ends (`finish`)."""
        if not text.startswith("Epoch ") or (state := bar_state(text)) is None:
            return
        epoch, total, record = state
        if self.pending is not None and self.pending[0] != epoch:
            self.bar_result()
        if record is not None:
            self.pending = (epoch, total, record, number)

    def bar_result(self) -> None:
        epoch, total, record, number = self.pending
        self.pending = None
        run = self.runs[-1]
        if run.epochs.index and (epoch == 1 or total != run.epochs_total):
            run = self.new_run(number)  # the epoch count restarts: the next run
        run.epochs_total = total
        run.result(record, number, epoch)

    def cut(self, text: str) -> None:
        """The text after the last newline: a result line there was not finished."""
        last = self.runs[-1]
        if text.strip() and PROGRESS.match(SPLIT.split(text)[-1]):
            last.cut, last.cut_epoch = True, open_epoch(last) or last.last + 1

    def finish(self) -> list[ParsedLog]:
        if self.pending is not None:
            self.bar_result()
        last = self.runs[-1]
        settle(last)
        if (epoch := open_epoch(last)) is not None:
            last.cut, last.cut_epoch = True, epoch
        runs = [r for r in self.runs if r.epochs or r.cut or r.images_per_s is not None]
        return merge_copies(runs)


def throughput(text: str) -> tuple[float, int | None] | None:
    """(images/s, GPUs when stated) of a benchmark's total line, or None."""
    if (m := HOROVOD_TOTAL.search(text)) is not None:
        return float(m.group(2)), int(m.group(1))
    if (m := TF_CNN_TOTAL.match(text)) is not None:
        return float(m.group(1)), None
    return None


TRAINER_TOTAL = ("{'train_runtime'", '{"train_runtime"')


def trainer_total(text: str) -> tuple[float, dict, int | None] | None:
    """A Hugging Face Trainer's closing line, the only time it prints: `{'train_runtime':
    '0.4332', 'train_samples_per_second': '1182', 'train_steps_per_second': '73.87',
    'train_loss': '2.302', 'epoch': '2'}` (numbers as text since transformers 5, as
    numbers before). (samples/s, facts, whole epochs or None), or None."""
    try:
        found = ast.literal_eval(text.strip())
        values = {key: float(value) for key, value in found.items()}
        rate, seconds = values["train_samples_per_second"], values["train_runtime"]
    except (ValueError, SyntaxError, TypeError, KeyError, AttributeError, MemoryError):
        return None
    facts = {"train_seconds": seconds, "log_format": "hf-trainer"}
    if "train_loss" in values:
        facts["train_loss"] = values["train_loss"]
    epoch = values.get("epoch")
    return rate, facts, int(epoch) if epoch is not None and epoch == int(epoch) else None


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
            absorb(run, other)
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
