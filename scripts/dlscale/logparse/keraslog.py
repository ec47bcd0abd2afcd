"""Read Keras training output into runs of epoch records, whatever the Keras version:
whole files (`parse_file_runs`, `parse_text`), or a live output line by line
(`LogReader`), with the parse of an external log kept for the rules that read it again.

The line grammar (Keras 2 and 3, verbose 1 and 2, TF 1.x; settings stated in headers) is
dlscale.logparse.loglines'; one task's or rank's stream is dlscale.logparse.logstream's. A log is a
sequence of runs (one job's .out often holds several): a new run starts where the epoch
count restarts or a run's settings are stated again after finished epochs.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import pickle
import re
from collections import deque
from pathlib import Path

from dlscale.logparse.dllogger import MARK as DLL
from dlscale.logparse.dllogger import DLLogReader
from dlscale.logparse.launch import DEVICE_LIST, LaunchReader, might_say
from dlscale.logparse.loglines import (  # noqa: F401 (what readers of logs import from here)
    ANSI,
    EpochTable,
    LogError,
    ParsedLog,
    compile_patterns,
    job_gpus,
    settings_sequence,
)
from dlscale.logparse.logstream import (
    StreamParser,
    combine,
    split_stream,
    split_torchrun,
    stream_order,
    tagged_pieces,
)
from dlscale.logparse.mllog import MARK as MLLOG
from dlscale.logparse.mllog import MLLogReader

STRUCTURED = (MLLOG, DLL)  # the marks of the formats read by readers of their own


def lines_of(text: str):
    """(line, ended) pairs of a text: ended is False for the text after the last newline."""
    lines = text.split("\n")
    for line in lines[:-1]:
        yield line, True
    yield lines[-1], False


# A line longer than this is compacted as it is read (read_file): progress bars that
# rewrite themselves with \r or \b make one "line" of a whole epoch's updates, and
# only its first segment (a launcher's prefix) and its last one are ever read.
LONG_LINE = 1 << 16
# a line still longer once compacted (no carriage return to cut it at: a binary blob, a
# huge print) keeps its first and last halves of this many bytes: the memory a line takes
# stays bounded whatever its length (a 1 GB line peaked at 3.2 GB)
MAX_LINE = 1 << 24


def compact(line: bytes) -> bytes:
    """A line's first segment and its last non-blank one (see LONG_LINE), found from
    the ends: no list of its segments is made; at most MAX_LINE bytes of it."""
    line = _last_state(line)
    if len(line) <= MAX_LINE:
        return line
    return line[:MAX_LINE // 2] + b"\r" + line[-(MAX_LINE // 2):]


def _last_state(line: bytes) -> bytes:
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


def read_file(path, patterns: dict[str, re.Pattern] | None = None,
              size: int = 1 << 20) -> list[ParsedLog]:
    """Every run in a log file (see parse_lines), read a chunk at a time: memory bounded
    by the longest line after compaction (LONG_LINE), not by the file."""
    reader, lines = LogReader(str(path), patterns), Lines()
    feed = reader.feed
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(size), b""):
            for line in lines.add(chunk):
                feed(line)
    feed(lines.rest(), False)
    return reader.runs()


UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # a log that begins so is UTF-16


class Lines:
    """Byte chunks (a file's, or a pipe's as they come) as finished lines of text, in time
    linear in the bytes whatever the lines' length: the unfinished line is kept as its
    chunks, joined once when its newline comes, and compacted (LONG_LINE) only when it has
    doubled since the last time."""

    def __init__(self):
        self.parts: list[bytes] = []  # the unfinished line, as it came
        self.size = 0
        self.compact_at = LONG_LINE
        self.started = False
        self.utf16 = None  # the decoder of a log that begins with a UTF-16 byte order mark

    def opening(self, chunk: bytes) -> bytes:
        """The first bytes: a UTF-8 byte order mark is dropped (Windows editors and
        PowerShell's redirections write one), a UTF-16 one makes the rest read as UTF-16
        (its NUL bytes would otherwise call the log binary)."""
        self.started = True
        if chunk.startswith(codecs.BOM_UTF8):
            return chunk[len(codecs.BOM_UTF8):]
        if chunk.startswith(UTF16_MARKS):
            self.utf16 = codecs.getincrementaldecoder("utf-16")(errors="replace")
        elif encoding := utf16_without_mark(chunk[:4096]):
            self.utf16 = codecs.getincrementaldecoder(encoding)(errors="replace")
        return chunk

    def add(self, chunk: bytes) -> list[str]:
        """The lines that `chunk` finished."""
        if not self.started and chunk:
            chunk = self.opening(chunk)
        if self.utf16 is not None:
            chunk = self.utf16.decode(chunk).encode("utf-8")
        if b"\n" not in chunk:
            self.parts.append(chunk)
            self.size += len(chunk)
            if self.size > self.compact_at:
                line = compact(b"".join(self.parts))
                self.parts, self.size = [line], len(line)
                self.compact_at = max(LONG_LINE, 2 * self.size)
            return []
        first, last = chunk.find(b"\n"), chunk.rfind(b"\n")
        head, body, tail = chunk[:first], chunk[first + 1:last], chunk[last + 1:]
        if self.parts:
            self.parts.append(head)
            head = b"".join(self.parts)
        self.parts, self.size, self.compact_at = [tail], len(tail), LONG_LINE
        lines = [decode(compact(head) if len(head) > LONG_LINE else head)]
        if first < last:  # the lines between: decoded at once (a newline is never inside
            found = decode(body).split("\n")  # a UTF-8 character), and split
            if max(map(len, found)) > LONG_LINE // 4:  # maybe over LONG_LINE bytes: again
                found = [decode(compact(raw) if len(raw) > LONG_LINE else raw)
                         for raw in body.split(b"\n")]
            lines += found
        return lines

    def rest(self) -> str:
        """The text after the last newline."""
        if self.utf16 is not None:
            self.parts.append(self.utf16.decode(b"", final=True).encode("utf-8"))
        return decode(b"".join(self.parts))


def utf16_without_mark(sample: bytes) -> str | None:
    """"utf-16-le" or "utf-16-be" for text of one byte characters in UTF-16 without a
    byte order mark (a NUL after, or before, nearly every byte), else None: such a log
    was called binary."""
    odd, even = sample[1::2], sample[0::2]
    if len(sample) < 8 or b"\x00" not in sample:
        return None
    if odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
        return "utf-16-le"
    if even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
        return "utf-16-be"
    return None


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class LogReader:
    """A log read one line at a time, as parse_lines reads a file or dlscale.launch.command
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
        self.mllog: MLLogReader | None = None  # MLPerf's lines, once one came (logs.mllog)
        self.dllog: DLLogReader | None = None  # NVIDIA DLLogger's, once one came
        self.launch = LaunchReader()  # what the lines say of the launch (logs.launch)

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
            stream, text = (split_stream(line) if line.find(": ", 0, 12) > 0 else
                            split_torchrun(line) if line.startswith("[") else ("", line))
            if not self.pieces:  # the common case, without a call more
                parser = self.parsers.get(stream)
                if parser is not None and ended and self.mllog is None and not text.startswith(
                        STRUCTURED):
                    parser.feed(self.number, text)
                else:
                    self.dispatch(stream, text, ended)
                return
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

    def mllog_line(self, text: str) -> bool:
        """Whether `text` was an MLLOG line, taken by the MLLOG reader (which sees every
        line after the first, for a framework's own epoch times)."""
        if self.mllog is None:
            self.mllog = MLLogReader()
        self.mllog.feed(self.number, text)
        return text.startswith(MLLOG)

    def dispatch(self, stream: str, text: str, ended: bool) -> None:
        if (self.mllog is not None or text.startswith(MLLOG)) and ended and self.mllog_line(text):
            return
        if ended and text.startswith(DLL):
            reader = self.dllog or DLLogReader()
            if reader.feed(self.number, text):
                self.dllog = reader
                return
        parser = self.parsers.get(stream)
        if parser is None:
            parser = self.parsers[stream] = StreamParser(self.path, self.patterns)
        if ended:
            parser.feed(self.number, text)
        else:
            parser.cut(text)

    def current(self) -> ParsedLog | None:
        """The run being read in the first task that has finished epochs (rank 0's, or
        the log's without prefixes), or DLLogger's, as it stands: for a live view,
        nothing changed."""
        if self.dllog is not None and (run := self.dllog.current(self.path)) is not None \
                and run.epochs:
            return run
        for name in sorted(self.parsers, key=stream_order):
            run = self.parsers[name].runs[-1]
            if run.epochs:
                return run
        return None

    def runs(self) -> list[ParsedLog]:
        """Every run read (see parse_lines), the GPU count of its launch where its lines
        state none (logs.launch); once, at the end."""
        return self.launch.apply(self.read_runs(), self.path,
                                 prefixes=sum(1 for name in self.parsers if name))

    def read_runs(self) -> list[ParsedLog]:
        finished = {name: parser.finish() for name, parser in self.parsers.items()}
        runs = combine(finished)
        if self.mllog is not None and (found := self.mllog.parsed(self.path, runs)):
            return found  # an MLPerf log: its runs, the framework's lines a cross-check
        if self.dllog is not None and (found := self.dllog.parsed(self.path)):
            return found  # a DLLogger log: its entries are the runs
        # settings that only streams without results stated (a job script's header on
        # unprefixed lines before `srun --label` tasks print the epochs) hold for every run
        stated: dict[str, int] = {}
        for name in sorted(self.parsers, key=stream_order):
            if not finished[name]:
                for run in self.parsers[name].runs:
                    stated.update(run.settings)
        for run in runs:
            merged = {**stated, **run.settings}
            if "gpus" not in merged and "devices" in merged:  # one worker's: logs.launch
                run.facts["gpus_from"] = DEVICE_LIST  # may multiply it by the workers
            run.settings = job_gpus(merged)
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
    """A log's text: UTF-8 (a byte order mark dropped), or UTF-16 where it begins with
    UTF-16's mark or reads as UTF-16 without one."""
    with open(path, "rb") as handle:
        head = handle.read(4096)
    encoding = ("utf-16" if head[:2] in UTF16_MARKS else utf16_without_mark(head)
                or "utf-8-sig")
    with open(path, encoding=encoding, errors="replace", newline="") as handle:
        return handle.read()


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
PARSED_FORMAT = 7


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
