"""A line's template, the shape formats.mined finds once per epoch: a line's fixed words
and its fields (a timestamp, a time with its unit, a percentage, a number) as placeholders,
its rows' values as columns of doubles, and the metrics its fields name. Timestamps are
logging's, ISO 8601, `[YYYY-mm-dd HH:MM:SS,ms]`, `date`'s echo and `HH:MM:SS`, read as
seconds (`stamp_seconds`); reader.pattern_for builds a user's pattern from a line's FIELDs.
"""

from __future__ import annotations

import re
from array import array
from datetime import date
from functools import lru_cache
from math import nan as NAN

from dlscale.logparse.runs import resolution

MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
_STAMP = (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
          r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:" + "|".join(MONTHS) +
          r") +\d\d? \d\d:\d\d:\d\d(?: [A-Z]{2,5})? \d{4}"
          r"|(?<![\d:.])\d\d:\d\d:\d\d(?:[.,]\d+)?(?![\d:])")
# a field: (timestamp)|(amount)(time unit)|(percent)%|(number)
FIELD = re.compile(
    rf"({_STAMP})"
    r"|(?<![\w.])(\d+(?:\.\d+)?) ?(ms|s|secs?|seconds?|min|mins|minutes?|h|hrs?|hours?)\b"
    r"|(?<![\w.])(-?\d+(?:\.\d+)?) ?%"
    r"|(?<![\w.])(-?(?:\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf))(?!\w|\.\d)", re.IGNORECASE)
# a line's template: the line without its digits (bytes.translate: 15 times faster than a
# pattern's sub; FIELD is read once, on its first line), its fields' values from its RUNs
DIGITS = b"0123456789"
RUN = re.compile(r"\d+(?:\.\d+)?")
FINDALL = RUN.findall
UNITS = {"ms": 0.001, **dict.fromkeys(("min", "mins", "minute", "minutes"), 60.0),
         **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0)}
STAMP_PARTS = re.compile(r"(?:(\d{4})-(\d\d)-(\d\d)[T ])?(\d\d):(\d\d):(\d\d)(?:[.,](\d+))?"
                         r"(Z|[+-]\d\d:?\d\d)?")
EPOCH_WORD = re.compile(r"epoch\W{0,3}$", re.IGNORECASE)  # the literal before a counter
WORD = re.compile(r"[A-Za-z][\w.]*")


def stamp_seconds(text: str) -> float:
    """A timestamp as seconds (since 1970 where it has a date, of the day where not)."""
    if text[:1].isalpha():  # date's echo: Tue Dec  2 01:02:03 UTC 2026
        parts = text.split()
        day = _days(int(parts[-1]), MONTHS.index(parts[1]) + 1, int(parts[2]))
        hours, minutes, secs = parts[3].split(":")
        return day * 86400.0 + int(hours) * 3600 + int(minutes) * 60 + int(secs)
    m = STAMP_PARTS.search(text)
    year, month, day, hours, minutes, secs, fraction, zone = m.groups()
    value = int(hours) * 3600 + int(minutes) * 60 + int(secs) + (
        float("0." + fraction) if fraction else 0.0)
    if year:
        value += _days(int(year), int(month), int(day)) * 86400.0
    if zone and zone != "Z":
        value -= (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[-2:]) * 60)
    return value


@lru_cache(maxsize=4096)
def _days(year: int, month: int, day: int) -> int:
    return date(year, month, day).toordinal() - 719163  # days since 1970-01-01


class Template:
    """A line shape: its fixed words (`literals`, one more than its fields), the kinds of
    its fields, and its rows as columns (None once it has too many to be an epoch's)."""

    __slots__ = ("key", "count", "line", "text", "kinds", "literals", "columns", "lines",
                 "clocks", "epoch", "stamp", "steps", "reads", "runs")

    def __init__(self, key: bytes, number: int, text: str):
        self.key, self.count, self.line, self.text = key, 0, number, text.strip()
        self.epoch = "epoch" in text.lower()
        self.kinds, self.literals, self.steps, self.reads = [], [], [], []
        # each field: its kind, the words before it, its printed resolution (a format
        # string prints the same digits) and how its value is read from the line's runs
        spans = [m.span() for m in RUN.finditer(text)]
        self.runs, end = len(spans), 0
        for m in FIELD.finditer(text):
            covered = [i for i, (a, b) in enumerate(spans) if a >= m.start() and b <= m.end()]
            if not covered:
                continue  # nan, inf: no digits
            groups = m.groups()  # kinds: a timestamp, a time, a percentage, a number
            self.kinds.append("t" if groups[0] else "d" if groups[1] else "p" if groups[3] else "n")
            self.literals.append(text[end:m.start()])
            end = m.end()
            if groups[0]:  # a timestamp: its runs and the text between them
                self.steps.append(stamp_resolution(groups[0]))
                head = text[m.start():spans[covered[0]][0]]
                seps = [text[spans[i][1]:spans[i + 1][0]] for i in covered[:-1]]
                self.reads.append((covered[0], covered[-1] + 1, head, seps))
            else:
                scale = UNITS.get((groups[2] or "").lower(), 1.0)
                self.steps.append(resolution(groups[1] or groups[3] or groups[4]) * scale)
                sign = -1.0 if m.group(0).startswith("-") else 1.0
                self.reads.append((covered[0], None, sign * scale, None))
        self.literals.append(text[end:])
        self.columns = [array("d") for _ in self.kinds]
        self.lines, self.clocks = array("q"), array("d")
        self.stamp = self.kinds.index("t") if "t" in self.kinds else None

    def values(self, runs: list) -> list[float]:
        """Each field's value from the digits' runs of one of the template's lines."""
        return [float(runs[first]) * head if last is None else stamp_seconds(head + "".join(
            p for pair in zip(runs[first:last], [*seps, ""]) for p in pair))
            for first, last, head, seps in self.reads]

    def add(self, number: int, runs: list, clock: float) -> None:
        if len(runs) != self.runs:
            return
        for column, value in zip(self.columns, self.values(runs)):
            column.append(value)
        self.lines.append(number)
        self.clocks.append(clock)

    def shape(self) -> str:
        """The template as a user reads it: `Epoch <n> took: <time> loss=<n>`."""
        names = {"t": "<timestamp>", "d": "<time>", "p": "<percent>", "n": "<n>"}
        return "".join(lit + (names[k] if i < len(self.kinds) else "") for i, (lit, k) in
                       enumerate(zip(self.literals, [*self.kinds, "n"]))).strip()

    def counter(self) -> int | None:
        """The field that counts epochs: the number after the word epoch, whole numbers
        that rise by one where they change (80 % of changes; a drop is the next run)."""
        for index in [i for i, k in enumerate(self.kinds) if k == "n"
                      and EPOCH_WORD.search(self.literals[i])]:
            values = self.columns[index]
            if any(v != int(v) for v in values[:1000] if v == v):
                continue
            changes = [b - a for a, b in zip(values, values[1:]) if b != a]
            rising = sum(1 for c in changes if c == 1)
            if not changes or rising and rising >= 0.8 * sum(1 for c in changes if c > 0):
                return index
        return None

    def clock(self, row: int) -> float:
        return self.columns[self.stamp][row] if self.stamp is not None else self.clocks[row]

    def total(self, index: int) -> int | None:
        """The field of the epochs in all, after the counter's (`Epoch 1/16`, `1 of 16`)."""
        after = index + 1
        return after if after < len(self.kinds) and self.kinds[after] == "n" and self.literals[
            after].strip() in ("/", "of") else None


def stamp_resolution(text: str) -> float:
    m = STAMP_PARTS.search(text)
    return 1.0 if m is None or not m.group(7) else 10.0 ** -len(m.group(7))


def metric_name(literal: str, evaluation: bool) -> str | None:
    """loss, accuracy, val_loss or val_accuracy from the words before a field (`loss=`,
    `Loss: `, `val_acc `, `Average loss: `), or None for any other number."""
    word = (WORD.findall(literal) or [""])[-1].lower().strip("_.")
    for prefix in ("val_", "valid_", "validation_", "eval_", "test_"):
        if word.startswith(prefix):
            word, evaluation = word[len(prefix):], True
    base = ("loss" if word.endswith("loss") else "accuracy" if word in (
        "acc", "accuracy", "top1", "acc1", "top1_acc") else None)
    return None if base is None else ("val_" if evaluation else "") + base


def metrics(template: Template, row: int, skip: set, evaluation: bool) -> dict:
    """The named metrics of a row: a `a/b` pair read as a ratio, a percentage over 100."""
    found, kinds, lits, cols = {}, template.kinds, template.literals, template.columns
    for i, kind in enumerate(kinds):
        if i in skip or kind not in "np":
            continue
        name = metric_name(lits[i], evaluation)
        if name is None or name in found:
            continue
        value = cols[i][row]
        if kind == "n" and i + 1 < len(kinds) and kinds[i + 1] == "n" and lits[i + 1] == "/":
            value = value / cols[i + 1][row] if cols[i + 1][row] else NAN
            skip = skip | {i + 1}
        elif kind == "p":
            value = round(value / 100, 12)  # 11.2% as 0.112, not 0.11199999999999999
        found[name] = value
    return found


def line_stamp(text: str, template: Template) -> float:
    """The timestamp of a line of a template, in seconds."""
    return template.values(FINDALL(text))[template.stamp]
