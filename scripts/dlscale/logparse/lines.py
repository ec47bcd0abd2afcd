"""A log's bytes as lines, and the launchers' prefixes on them: shared by every format
(dlscale.logparse.reader reads a file or a pipe with `Lines`, then splits each line's
prefix with `split_stream`, `split_torchrun` or `tagged_pieces`).

Any encoding a log is written in (UTF-8 with or without a byte order mark, UTF-16 with or
without one), any length of line (progress bars that redraw through \r make one "line" of
a whole epoch: compacted as it is read, memory bounded whatever the length).
"""

from __future__ import annotations

import codecs
import os
import re

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
SPLIT = re.compile(r"[\r\x08]+")  # a redrawn line's states


def lines_of(text: str):
    """(line, ended) pairs of a text: ended is False for the text after the last newline."""
    lines = text.split("\n")
    for line in lines[:-1]:
        yield line, True
    yield lines[-1], False


# A line longer than this is compacted as it is read (read_file): progress bars that
# rewrite themselves with \r or \b make one "line" of a whole epoch's updates (of a
# whole training, where nothing else is printed), and only its first segment (a
# launcher's prefix), the finished states of its bars and its last segment are ever read.
LONG_LINE = 1 << 16
# a line still longer once compacted (no carriage return to cut it at: a binary blob, a
# huge print) keeps its first and last halves of this many bytes: the memory a line takes
# stays bounded whatever its length (a 1 GB line peaked at 3.2 GB)
MAX_LINE = 1 << 24
FINISHED = b"100%|"  # a finished state of a percent bar (tqdm's: an epoch's last states)


def compact(line: bytes) -> bytes:
    """A line's first segment, every finished bar state (FINISHED) and its last non-blank
    segment (see LONG_LINE), found without a list of its segments; at most MAX_LINE
    bytes of it."""
    line = _last_state(line)
    if len(line) <= MAX_LINE:
        return line
    return line[:MAX_LINE // 2] + b"\r" + line[-(MAX_LINE // 2):]


def _segment_start(line: bytes, head: int, end: int) -> int:
    """Where the segment that holds `end` begins: after the \r or \b before it."""
    return max(line.rfind(b"\r", head, end), line.rfind(b"\x08", head, end)) + 1


def _last_state(line: bytes) -> bytes:
    cuts = [i for i in (line.find(b"\r"), line.find(b"\x08")) if i >= 0]
    if not cuts:
        return line
    head = min(cuts)
    end = len(line)
    last = b""
    while end > head:
        start = _segment_start(line, head, end) - 1
        if line[start + 1:end].strip():
            last = line[start + 1:end]
            break
        end = start
    kept, at = [], line.find(FINISHED, head, end)
    while at >= 0:  # each finished state before the last segment, whole
        start = _segment_start(line, head, at)
        stop = min((i for i in (line.find(b"\r", at, end), line.find(b"\x08", at, end))
                    if i >= 0), default=end)
        if stop >= end:
            break  # (the last segment's own)
        kept.append(line[start:stop])
        at = line.find(FINISHED, stop, end)
    return line[:head] + b"\r" + b"".join(state + b"\r" for state in kept) + last


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


def printable(text: str) -> str:
    """Text from a log made safe to quote in a message or table: control characters
    (an escape sequence, a bell) written as Python escapes (\x1b), tabs as spaces."""
    text = text.replace("\t", " ")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def last_lines(path, count: int, width: int = 120) -> list[str]:
    """The last `count` non-empty lines of a file (its last 64 kB; a progress bar's
    updates each a line), as messages quote them (`quoted`, `width` characters at most);
    binary output is called so."""
    size = os.path.getsize(path)
    with open(path, "rb") as handle:
        handle.seek(max(0, size - 65536))
        data = handle.read()
    if b"\0" in data:
        return [f"(binary output, {size} bytes)"]
    text = data.decode("utf-8", "replace")
    return [quoted(x.strip(), width) for x in LINE_OR_STATE.split(text) if x.strip()][-count:]


LINE_OR_STATE = re.compile(r"[\r\n\x08]+")  # lines, and the updates of a progress bar


def quoted(line: str, width: int = 120) -> str:
    """A line of a log as a message quotes it: printable, cut to `width` characters."""
    line = printable(line)
    return line if len(line) <= width else line[:width - 3] + "..."


def read_text(path) -> str:
    """A log's text: UTF-8 (a byte order mark dropped), or UTF-16 where it begins with
    UTF-16's mark or reads as UTF-16 without one."""
    with open(path, "rb") as handle:
        head = handle.read(4096)
    encoding = ("utf-16" if head[:2] in UTF16_MARKS else utf16_without_mark(head)
                or "utf-8-sig")
    with open(path, encoding=encoding, errors="replace", newline="") as handle:
        return handle.read()


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


def split_torchrun(line: str) -> tuple[str, str]:
    """(stream, text) of a line `torchrun --tee` prefixed with its worker's local rank
    (`[default0]:`, or `[rank0]:` with --log-line-prefix-template); ("", line) else."""
    m = TORCHRUN.match(line)
    return ("", line) if m is None else (f"rank {m.group(1)}", line[m.end():])


def torchrun_pieces(line: str) -> list[tuple[str, str, str]]:
    """(stream, channel "", text) of each rank's piece of a line `torchrun --tee` joined
    from several ranks' output (`[default1]: 87%|...| 52/60 [...][default0]:{'train_
    runtime': ...}`: a progress bar's state without its newline, then another rank's
    line); the line's own rank alone for most lines."""
    tags = list(TORCHRUN.finditer(line))
    ends = [m.start() for m in tags[1:]] + [len(line)]
    return [(f"rank {m.group(1)}", "", line[m.end():end]) for m, end in zip(tags, ends)]


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


def stream_order(name: str) -> tuple:
    """Unprefixed first, then tasks and ranks by number."""
    return (name != "", int(name.split()[-1] or 0) if name else 0)
