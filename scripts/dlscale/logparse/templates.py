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
_STAMP = (r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+(?!\d)|(?!\d))(?:Z|[+-]\d\d:?\d\d)?"
          r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?:" + "|".join(MONTHS) +
          r") +\d\d? \d\d:\d\d:\d\d(?: [A-Z]{2,5})? \d{4}"
          r"|(?<![\d:.])\d\d:\d\d:\d\d(?:[.,]\d+(?!\d)|(?![\d:]))")
_UNIT = r"ms|s|secs?|seconds?|min|mins|minutes?|h|hrs?|hours?"
# a field: (timestamp)|(amount)(time unit)|(percent)%|(number); a fraction's digits are
# all its own (a time of day's `16:48:32.932463:` keeps its fraction, not its seconds)
FIELD = re.compile(
    rf"(?P<stamp>{_STAMP})"
    rf"|(?<![\w.])(?P<amount>\d+(?:\.\d+)?) ?(?P<unit>{_UNIT})\b"
    r"|(?<![\w.])(?P<percent>-?\d+(?:\.\d+)?) ?%"
    r"|(?<![\w.])(?P<number>-?(?:\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf))(?!\w|\.\d)",
    re.IGNORECASE)
# durations of several runs, read before FIELD: `2m 3s`, `1h 2m`, `1.2e2 s`, and a clock
# form after words that say it is one (`took 1:02:03`, `time: 02:03`)
_H, _M, _S = r"(?:h|hrs?|hours?)", r"(?:m|mins?|minutes?)", r"(?:s|secs?|seconds?)"
DURATION = re.compile(
    rf"(?<![\w.])(?P<hms>(?:\d+ ?{_H} ?)?\d+ ?{_M} ?\d+(?:\.\d+)? ?{_S}\b|\d+ ?{_H} ?\d+ ?{_M}\b)"
    rf"|(?<![\w.])(?P<exp>\d+(?:\.\d+)?[eE][-+]?\d+) ?(?P<eunit>{_UNIT})\b"
    r"|(?:took|time|elapsed|duration)\W{0,3}"
    r"(?P<clock>(?<![\d:.])\d{1,3}:\d\d(?::\d\d)?(?:\.\d+)?)(?![\d:])", re.IGNORECASE)
# a line that writes its decimals with commas (`97,7s loss=1,9`): a comma between digits
# and no point, and not only thousands (`1,234`)
COMMA = re.compile(r"(?<=\d),(?=\d)")
COMMA_FRACTIONS = re.compile(r"\d,(\d+)")
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
    """A timestamp as seconds (since 1970 where it has a date, of the day where not);
    NaN where the text is not one (a line of the template's shape whose digits differ)."""
    if text[:1].isalpha():  # date's echo: Tue Dec  2 01:02:03 UTC 2026
        parts = text.split()
        try:
            day = _days(int(parts[-1]), MONTHS.index(parts[1]) + 1, int(parts[2]))
            hours, minutes, secs = parts[3].split(":")
        except (ValueError, IndexError):
            return NAN
        return day * 86400.0 + int(hours) * 3600 + int(minutes) * 60 + int(secs)
    m = STAMP_PARTS.fullmatch(text)
    if m is None:
        return NAN
    year, month, day, hours, minutes, secs, fraction, zone = m.groups()
    value = int(hours) * 3600 + int(minutes) * 60 + int(secs) + (
        float("0." + fraction) if fraction else 0.0)
    if year:
        try:
            value += _days(int(year), int(month), int(day)) * 86400.0
        except ValueError:  # month 13
            return NAN
    if zone and zone != "Z":
        value -= (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[-2:]) * 60)
    return value


@lru_cache(maxsize=4096)
def _days(year: int, month: int, day: int) -> int:
    return date(year, month, day).toordinal() - 719163  # days since 1970-01-01


def comma_decimals(text: str) -> bool:
    """Whether a line writes its decimals with commas: `97,7s loss=1,9` (a comma between
    digits, no decimal point between digits, and a fraction other than thousands')."""
    fractions = COMMA_FRACTIONS.findall(text)
    return bool(fractions) and not DECIMAL_POINT.search(text) and any(
        len(f) != 3 for f in fractions)


DECIMAL_POINT = re.compile(r"\d\.\d")


def _commas(text: str) -> list:
    return FINDALL(COMMA.sub(".", text))


def _weights(text: str) -> list[float]:
    """The seconds each number of a compound duration counts: `1h 2m 3s` [3600, 60, 1]."""
    return [3600.0 if u[0] in "hH" else 60.0 if u[0] in "mM" else 1.0
            for u in re.findall(r"\d+(?:\.\d+)? ?([a-zA-Z]+)", text)]


class Template:
    """A line shape: its fixed words (`literals`, one more than its fields), the kinds of
    its fields, and its rows as columns (None once it has too many to be an epoch's)."""

    __slots__ = ("key", "count", "line", "text", "kinds", "literals", "columns", "lines",
                 "clocks", "epoch", "stamp", "steps", "reads", "runs", "findall")

    def __init__(self, key: bytes, number: int, text: str):
        self.key, self.count, self.line, self.text = key, 0, number, text.strip()
        self.epoch = "epoch" in text.lower()
        self.kinds, self.literals, self.steps, self.reads = [], [], [], []
        self.findall = FINDALL
        if comma_decimals(text):  # the line's decimals are written with commas
            self.findall, text = _commas, COMMA.sub(".", text)
        # each field: its kind, the words before it, its printed resolution (a format
        # string prints the same digits) and how its value is read from the line's runs
        spans = [m.span() for m in RUN.finditer(text)]
        self.runs, end = len(spans), 0
        for m, special in fields(text):
            covered = [i for i, (a, b) in enumerate(spans) if a >= m.start() and b <= m.end()]
            if not covered:
                continue  # nan, inf: no digits
            if special:  # a duration of several runs: `2m 3s`, `1:02:03`, `1.2e2 s`
                runs = [text[a:b] for a, b in (spans[i] for i in covered)]
                if m["clock"]:
                    weights = [3600.0, 60.0, 1.0][3 - len(runs):]
                elif m["hms"]:
                    weights = _weights(m["hms"])
                else:
                    weights = [UNITS.get(m["eunit"].lower(), 1.0), None]
                if len(weights) != len(runs):
                    continue
                self.kinds.append("d")
                sign = -1.0 if m["exp"] and "e-" in m["exp"].lower() else 1.0
                self.steps.append(resolution(runs[-1]) * weights[-1] if weights[-1] else
                                  resolution(runs[0]) * 10.0 ** (sign * float(runs[1]))
                                  * weights[0])
                self.reads.append((covered[0], len(covered), weights, sign))
            else:
                groups = m.groupdict()  # a timestamp, a time, a percentage, a number
                kind = ("t" if groups["stamp"] else "d" if groups["amount"] else "p"
                        if groups["percent"] else "n")
                if kind == "t":  # a timestamp: its runs and the text between them
                    head = text[m.start():spans[covered[0]][0]]
                    seps = [text[spans[i][1]:spans[i + 1][0]] for i in covered[:-1]]
                    read = (covered[0], covered[-1] + 1, head, seps)
                    if stamp_seconds(head + "".join(p for pair in zip(
                            [text[a:b] for a, b in (spans[i] for i in covered)],
                            [*seps, ""]) for p in pair)) != stamp_seconds(groups["stamp"]):
                        continue  # its digits do not make the stamp again: no field
                    self.steps.append(stamp_resolution(groups["stamp"]))
                    self.reads.append(read)
                else:
                    scale = UNITS.get((groups["unit"] or "").lower(), 1.0)
                    self.steps.append(resolution(
                        groups["amount"] or groups["percent"] or groups["number"]) * scale)
                    sign = -1.0 if m.group(0).startswith("-") else 1.0
                    self.reads.append((covered[0], None, sign * scale, None))
                self.kinds.append(kind)
            self.literals.append(text[end:m.start("clock") if special and m["clock"]
                                      else m.start()])
            end = m.end()
        self.literals.append(text[end:])
        self.columns = [array("d") for _ in self.kinds]
        self.lines, self.clocks = array("q"), array("d")
        self.stamp = self.kinds.index("t") if "t" in self.kinds else None

    def values(self, runs: list) -> list[float]:
        """Each field's value from the digits' runs of one of the template's lines."""
        out = []
        for first, last, head, seps in self.reads:
            if last is None:
                out.append(float(runs[first]) * head)
            elif isinstance(head, list):  # a duration of several runs
                if head[-1] is None:  # mantissa, exponent
                    out.append(round(float(runs[first]) * 10.0 ** (
                        seps * float(runs[first + 1])) * head[0], 9))
                else:
                    out.append(sum(float(r) * w for r, w in zip(runs[first:first + last],
                                                                  head)))
            else:
                out.append(stamp_seconds(head + "".join(
                    p for pair in zip(runs[first:last], [*seps, ""]) for p in pair)))
        return out

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
    return template.values(template.findall(text))[template.stamp]


def fields(text: str):
    """(match, whether a duration of several runs) of a line's fields, in order: the
    DURATIONs first, FIELD's where none is."""
    special = list(DURATION.finditer(text))
    taken = [(m.start("clock") if m["clock"] else m.start(), m.end()) for m in special]
    found = [(m, True) for m in special]
    for m in FIELD.finditer(text):
        if not any(a < m.end() and m.start() < b for a, b in taken):
            found.append((m, False))
    return sorted(found, key=lambda f: f[0].start("clock") if f[1] and f[0]["clock"]
                  else f[0].start())
