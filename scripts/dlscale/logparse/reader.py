"""A log read into runs of epoch records: whole files (`parse_file_runs`, `parse_text`),
or a live output line by line (`LogReader`), with the parse of an external log kept for
the rules that read it again.

The log's lines (dlscale.logparse.lines) go to the stream their launcher's prefix names
(srun --label, mpirun --tag-output, torchrun --tee), each stream's to its formats in the
registry's order (dlscale.logparse.formats); the streams' runs are combined into the job's.
A log is a sequence of runs (one job's .out often holds several).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
from collections import deque
from pathlib import Path

from dlscale.logparse.formats import LAUNCH, LOG, STREAM
from dlscale.logparse.lines import (
    ANSI,
    Lines,
    lines_of,
    printable,
    quoted,
    split_stream,
    split_torchrun,
    stream_order,
    tagged_pieces,
    torchrun_pieces,
)
from dlscale.logparse.runs import (
    LogError,
    ParsedLog,
    Stream,
    absorb,
    batch_processes,
    job_gpus,
)
from dlscale.logparse.templates import EPOCH_WORD, FIELD

MARKS = tuple(fmt.MARK for fmt in LOG)  # the first line of a whole log's format begins so
SHORT_BAR = re.compile(r"\d+%\|[^|\r]*\|\s*(\d+)/(\d+)\s*\[")  # tqdm's state: done/total
might_say = LAUNCH.might_say  # (a name of this module's: every line asks it)


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


def read_file(path, patterns: dict[str, re.Pattern] | None = None,
              size: int = 1 << 20) -> list[ParsedLog]:
    """Every run in a log file (see parse_lines), read a chunk at a time: memory bounded
    by the longest line after compaction (lines.LONG_LINE), not by the file."""
    reader, lines = LogReader(str(path), patterns), Lines()
    feed = reader.feed
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(size), b""):
            for line in lines.add(chunk):
                feed(line)
    feed(lines.rest(), False)
    return reader.runs()


class LogReader:
    """A log read one line at a time, as parse_lines reads a file or dlscale.launch.command
    reads a command's output while it runs. Lines a launcher prefixed (srun --label,
    mpirun --tag-output) go to the parser of their task."""

    def __init__(self, path: str = "<log>", patterns: dict[str, re.Pattern] | None = None):
        self.path, self.patterns = path, patterns
        self.parsers: dict[str, Stream] = {}  # a stream's name -> its runs
        self.tail: deque[str] = deque(maxlen=3)  # the last lines, for a log without epochs
        self.number = 0
        self.binary = False  # NUL bytes: not a text log
        # text of a tagged line whose newline has not come yet, per (rank, channel)
        self.pieces: dict[tuple[str, str], list[str]] = {}
        # the readers of whole logs' formats (formats.LOG), once one's line came
        self.structured: dict[str, object] = {}
        self.watching = False  # one of them sees every line (runs.LogFormat.ALL_LINES)
        self.launch = LAUNCH.LaunchReader()  # what the lines say of the launch

    def feed(self, line: str, ended: bool = True) -> None:
        """The next line; `ended` False for text after the last newline of a log that
        was cut (a line that is not finished)."""
        self.number += 1
        if line.startswith("\ufeff"):  # a second log's byte order mark, where it was appended
            line = line[1:]
        if "\x00" in line:
            self.binary = True
        if "\x1b" in line:
            line = ANSI.sub("", line)
        if line and not line.isspace():
            self.tail.append(line)  # stripped when quoted
        if might_say(line):
            self.launch.feed(self.number, line)
        pieces = tagged_pieces(line) if "]<std" in line else None
        if pieces is None:
            # srun --label's "0: ", "12: " (split_stream), torchrun's "[default0]:", else
            # no stream
            # (torchrun's first: `[rank0]:  2.351` holds a colon and a space too)
            stream, text = (split_torchrun(line) if line.startswith("[") else
                            split_stream(line) if line.find(": ", 0, 12) > 0 else ("", line))
            if stream.startswith("rank") and "]:" in text and len(
                    found := torchrun_pieces(line)) > 1:
                pieces = found  # ranks' output joined on one line by torchrun's tee
            elif not self.pieces:  # the common case, without a call more
                parser = self.parsers.get(stream)
                if parser is not None and ended and not self.watching and not text.startswith(
                        MARKS):
                    parser.feed(self.number, text)
                else:
                    self.dispatch(stream, text, ended)
                return
            else:
                pieces = [(stream, "", text)]
        if len(pieces) == 1 and not self.pieces:
            stream, _channel, text = pieces[0]
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

    def structured_line(self, text: str) -> bool:
        """Whether a whole log's format took `text`: its reader is made at the format's
        first line it takes, and then sees its lines (or every line: ALL_LINES)."""
        for fmt in LOG:
            reader = self.structured.get(fmt.NAME)
            if reader is None:
                if not text.startswith(fmt.MARK) or not (reader := fmt.Reader()).read(
                        self.number, text):
                    continue
                self.structured[fmt.NAME] = reader
                self.watching = self.watching or reader.ALL_LINES
                return True
            if (reader.ALL_LINES or text.startswith(fmt.MARK)) and reader.read(self.number,
                                                                                 text):
                return True
        return False

    def dispatch(self, stream: str, text: str, ended: bool) -> None:
        if ended and (self.watching or text.startswith(MARKS)) and self.structured_line(text):
            return
        parser = self.parsers.get(stream)
        if parser is None:
            parser = self.parsers[stream] = Stream(self.path, self.patterns, STREAM)
        if ended:
            parser.feed(self.number, text)
        else:
            parser.cut(text)

    def current(self) -> ParsedLog | None:
        """The run being read in the first task that has finished epochs (rank 0's, or
        the log's without prefixes), or a whole log's format's, as it stands: for a live
        view, nothing changed."""
        for reader in self.structured.values():
            if (run := reader.current(self.path)) is not None and run.epochs:
                return run
        for name in sorted(self.parsers, key=stream_order):
            run = self.parsers[name].runs[-1]
            if run.epochs:
                return run
        return None

    def runs(self) -> list[ParsedLog]:
        """Every run read (see parse_lines), the GPU count of its launch where its lines
        state none (formats.launch); once, at the end."""
        return self.launch.apply(self.read_runs(), self.path,
                                 prefixes=sum(1 for name in self.parsers if name))

    def read_runs(self) -> list[ParsedLog]:
        finished = {name: parser.finish() for name, parser in self.parsers.items()}
        runs = combine(finished)
        for fmt in LOG:  # an MLPerf or DLLogger log: its runs (the others a cross-check)
            if (reader := self.structured.get(fmt.NAME)) is not None and (
                    found := reader.runs_of(self.path, runs)):
                return found
        # settings that only streams without results stated (a job script's header on
        # unprefixed lines before `srun --label` tasks print the epochs) hold for every run
        stated: dict[str, int] = {}
        for name in sorted(self.parsers, key=stream_order):
            if not finished[name]:
                for run in self.parsers[name].runs:
                    stated.update(run.settings)
        for run in runs:
            merged = {**stated, **run.settings}
            if "gpus" not in merged and "devices" in merged:  # one worker's: the launch
                run.facts["gpus_from"] = LAUNCH.DEVICE_LIST  # may multiply it by the workers
            elif found := batch_processes(merged):
                run.facts["gpus_from"] = found[1]
            run.settings = job_gpus(merged)
        if not any(r.epochs or r.rate is not None for r in runs):
            if self.binary:
                raise LogError(f"{self.path} is binary (it holds NUL bytes): expected a "
                               "text log")
            stated = job_gpus({k: v for p in self.parsers.values() for r in p.runs
                               for k, v in r.settings.items()})
            raise LogError(self.nothing_found(runs), stated)
        return runs

    def nothing_found(self, runs: list[ParsedLog]) -> str:
        """Why no run has a finished epoch: a run that never finished says why; else what
        was looked for, the lines most like an epoch's, and a pattern built from one."""
        last = " | ".join(quoted(t.strip()) for t in self.tail)
        ending = "; its last lines: " + last if last else "; it is empty"
        reasons = [r.facts["unfinished"] for r in runs if r.facts.get("unfinished")]
        bars = [bar for t in self.tail for bar in SHORT_BAR.findall(t)]
        if bars and int(bars[-1][0]) < int(bars[-1][1]):  # (a Trainer's steps: 394/1000)
            reasons.append(f"its progress bar stopped at {bars[-1][0]} of {bars[-1][1]}")
        if reasons:
            return (f"{self.path}: no finished epoch: the run never finished "
                    f"({'; '.join(reasons)}){ending}")
        message = (f"{self.path}: no finished epoch found: looked for Keras' lines ('196/196 - "
                   "45s - loss: 1.76 - accuracy: 0.35'), Lightning's and tqdm's epoch bars, "
                   "PyTorch's examples, a Trainer's dicts, MLPerf's and DLLogger's lines, a "
                   "benchmark's total images/s, and a line of the script's own that names an "
                   "epoch with a counter rising by one")
        shapes = [shape for parser in self.parsers.values() for reader in parser.readers
                  for shape in reader.line_shapes()]
        seen = epoch_like(shapes)
        if not seen:
            return message + ending
        shown = " | ".join(f"line {number}: {quoted(text, 100)}" for number, text, _ in seen)
        template = next(t for t in shapes if t.line == seen[0][0] and t.text == seen[0][1])
        if why := implausible(template):
            return (f"{message}; the lines most like an epoch's: {shown}; no pattern is "
                    f"suggested: line {seen[0][0]}'s shape {why}{ending}")
        example = printable(pattern_for(seen[0][1]))
        return (f"{message}; the lines most like an epoch's: {shown}; if one is, give its "
                "pattern in the log's entry, e.g. external_runs[].patterns: {epoch_time: "
                f"'{example}'}} (one group, the epoch's seconds; loss and accuracy may be "
                f"read from the same line){ending}")


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


def parse_file_runs(path: str, patterns: dict[str, re.Pattern] | None = None,
                    cache: str | None = None) -> list[ParsedLog]:
    """Every run in a log file (see parse_lines). With `cache` (a folder), what was found
    is kept there and read back while the file keeps its size and mtime and the patterns
    are the same: a long log is parsed once, not by planning and by its rule again."""
    if cache is None:
        return read_file(path, patterns)
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
        found = read_file(path, patterns)
    except LogError as exc:
        keep(kept, stamp, exc)
        raise
    keep(kept, stamp, found)
    return found


# The shape of what parse_file_runs keeps: a change to ParsedLog or EpochTable, or to what
# a file is read as (DLLogger's lines, read since format 3), bumps it. 4: epochs' lines as
# a column, ParsedLog with slots. 5: tqdm epoch bars and torchrun prefixes. 6: the lines
# in the table alone (no `ended` on ParsedLog). 7: MLLOG evaluations timed (eval_seconds).
# 8: one reader over a registry of formats (the classes kept moved to logparse.runs).
# 9: PyTorch's examples, a run's total time, a Trainer's logged dicts read as epochs.
# 10: a script's own epoch lines (formats.mined), unfinished runs, summaries' copies.
PARSED_FORMAT = 10


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


def combine(streams: dict[str, list[ParsedLog]]) -> list[ParsedLog]:
    """One list of runs from the runs of several streams (tasks): run i of the job is run
    i of every stream; an epoch's time is the slowest stream's, its other values the first
    stream's (rank 0, the chief). Streams without epochs only state settings."""
    order = sorted(streams, key=stream_order)
    with_epochs = [streams[name] for name in order if streams[name]]
    # a stream whose only run was cut before any result (SLURM's cancel line on the job's
    # own lines, beside the tasks'): the job's last run is unfinished, no worker of it
    ended = [runs[0] for runs in with_epochs if len(runs) == 1 and not runs[0].epochs
             and runs[0].rate is None]
    if ended and len(ended) < len(with_epochs):
        with_epochs = [runs for runs in with_epochs if runs[0] not in ended]
        last = with_epochs[0][-1]
        last.cut = True
        last.cut_epoch = last.last + 1
        last.facts.update({k: v for run in ended for k, v in run.facts.items()})
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


def epoch_like(shapes: list) -> list[tuple[int, str, str]]:
    """(line, text, shape) of the lines most like an epoch's in streams read to their
    end with nothing found: those naming an epoch, then those with a time, by count."""
    found = []
    for template in shapes:
        if not template.kinds:
            continue
        score = (template.epoch, "d" in template.kinds, template.count)
        found.append((score, template))
    found.sort(key=lambda f: f[0], reverse=True)
    return [(t.line, t.text, t.shape()) for score, t in found[:3] if score[0] or score[1]]


def implausible(template) -> str | None:
    """Why a pattern built from a template's line would not read the file as one run
    (None where it would): no time in it, a counter after the word epoch that repeats or
    drops (runs interleaved), times of different scales (a size, not a time)."""
    if "d" not in template.kinds:
        return "holds no time with its unit (a pattern on its last number reads a size)"
    if template.columns is None:
        return "is printed too often to be once an epoch"
    for index, kind in enumerate(template.kinds):
        if kind == "n" and EPOCH_WORD.search(template.literals[index]):
            values = template.columns[index]
            if any(b - a != 1 for a, b in zip(values, values[1:])):
                return ("has an epoch counter that does not rise by one (" + ", ".join(
                    f"{v:g}" for v in values[:6]) + "...): runs interleaved or restarted")
    times = sorted(template.columns[template.kinds.index("d")])
    if times and times[0] > 0 and times[-1] > 10 * times[0]:
        return f"has times from {times[0]:g} to {times[-1]:g} s: not one run's epochs"
    return None


def pattern_for(text: str) -> str:
    """A pattern for `external_runs[].patterns` built from a line: its fixed words, each
    field a number; the first time (else the last number) the group (epoch_time)."""
    found = list(FIELD.finditer(text))
    timed = [m for m in found if m["amount"]]
    group = (timed or found[-1:] or [None])[0]
    out, at = [], 0
    for m in found:
        out.append(re.escape(text[at:m.start()]).replace("\\ ", " "))
        out.append(r"([\d.]+)" if m is group else ".*?" if m["stamp"] else r"[\d.]+")
        if m is group and m["unit"]:
            out.append(re.escape(m.group(0)[len(m["amount"]):]).replace("\\ ", " "))
        at = m.end()
    out.append(re.escape(text[at:]).replace("\\ ", " "))
    return "".join(out).strip()
