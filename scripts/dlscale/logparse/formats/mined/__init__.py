"""A script's own epoch lines, read without a pattern: the line shape that recurs once per
epoch, found in the stream itself by template mining, where no other format read a result.

  Epoch 3 took: 1.23s loss=0.5 acc=91.2%      2026-12-02 01:02:03,456 INFO Epoch 0
  Train Epoch: 1 	Loss: 0.211924              Beginning of Epoch 1/16, Total Micro Batches 100

Each line no other format took is reduced to its template: its fixed words, its fields (a
timestamp, a time with its unit, a percentage, a number) placeholders. An epoch template
(one that names an epoch) keeps its rows as columns of doubles; any other its first CAP.
At the stream's end the epoch templates whose number after the word epoch rises by one
are ranked: a time (a field with a unit, or timestamps: its own, else the last line's
before it), words that do not say evaluation, one row per counter value, then the most
epochs (a line printed once needs a time, a metric or the epochs in all). The winner's
rows are the epochs (a counter that drops begins the next run; the same line from several
workers is one epoch); another template printed once between two epoch lines gives that
epoch's metrics (`val_` where its words, or its line's before, say test, validation or
eval). The run's `epoch_line` names the template and its first line; a traceback after the
last epoch's line, a stated total not reached or SLURM's cancel line leave it unfinished.

An epoch without a time of its own takes the gap between its line and the next epoch's
(logging's, ISO 8601, `[YYYY-mm-dd HH:MM:SS,ms]`, `date`'s, `HH:MM:SS` timestamps) where
its line marks a start (it says begin or start, or holds no metric; the last epoch's is
unfinished without the evaluation the others have), else from the epoch before; or a run
total the stream printed (formats.totals leaves it in `Stream.totals`), shared. Tests:
tests/unit/test_mined_logs.py, on real captures (tests/data/own-scripts).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from math import nan as NAN

from dlscale.logparse.formats.mined.interleave import interleaved
from dlscale.logparse.runs import ParsedLog, StreamFormat, share_total
from dlscale.logparse.templates import (
    DIGITS,
    Template,
    line_stamp,
    metric_name,
    metrics,
)

NAME = "mined"
CAP, MAX_TEMPLATES, LONGEST = 20000, 5000, 2000  # rows kept of a template that names no
# epoch (beyond twice an epoch one's), templates in a stream, the longest line read
TOTAL_WORDS = re.compile(r"\b(?:total|took|time|elapsed|in|duration)\W{0,3}$", re.IGNORECASE)
PER_SECOND = re.compile(r"\s*(?:samples|images|img|imgs|sequences|examples)\s*/\s*s", re.I)
RESTART_GAP = 1.0  # seconds between two copies of a start line beyond which it restarted
TOTAL_COPIES = 64  # a run total is printed once, or once by each worker
STARTS = re.compile(r"\b(?:begin|beginning|start|starting|started)\b", re.IGNORECASE)
EVALUATION = re.compile(r"test|valid|eval", re.IGNORECASE)


class Reader(StreamFormat):
    """The templates of one stream's lines that no other format took; the epochs at its
    end (`settle`), where no other format found any."""

    def __init__(self, stream):
        super().__init__(stream)
        self.templates: dict[bytes, Template] = {}
        self.clock_text = self.clock_template = None  # the last stamped line, its template
        self.clock_value, self.clock_of, self.first_clock = NAN, None, NAN
        self.most = 0  # the most rows an epoch template has
        self.cut_reason = None  # why the last epoch read is not finished
        self.skipped = 0  # lines of a template whose values could not be read
        self.wrapped: set[int] = set()  # the epochs (their groups) timed past midnight
        self.restarts = 0  # start lines repeated by a restart (last_start)
        self.apart = 0  # independent runs whose epoch lines interleave (interleaved)

    def line_shapes(self) -> list[Template]:
        return list(self.templates.values())

    def read(self, number: int, text: str) -> bool:
        template = self.templates.get(text.encode("utf-8", "surrogatepass").translate(
            None, DIGITS))
        if template is None and (template := self.new(number, text)) is None:
            return False
        template.count += 1
        if template.columns is not None:
            try:
                template.add(number, template.findall(text),
                             self.clock() if template.stamp is None else NAN)
            except (ArithmeticError, ValueError, IndexError):  # (1e999 s): skipped, counted
                self.skipped += 1
                return False
            if template.epoch:
                self.most = max(self.most, template.count)
            elif template.count > CAP and template.count > 2 * self.most:
                template.columns = None  # too many to be once an epoch: only counted
        if template.stamp is not None:
            self.clock_text, self.clock_template = text, template
        return False

    def new(self, number: int, text: str) -> Template | None:
        key = text.encode("utf-8", "surrogatepass").translate(None, DIGITS)
        if len(text) > LONGEST or len(self.templates) >= MAX_TEMPLATES and b"poch" not in key:
            return None
        template = self.templates[key] = Template(key, number, text)
        if template.stamp is not None and self.first_clock != self.first_clock:  # (NaN)
            try:
                self.first_clock = line_stamp(text, template)
            except (ArithmeticError, ValueError, IndexError):
                pass
        return template

    def clock(self) -> float:
        """The last timestamp a line gave (NaN before any), parsed once per line."""
        if self.clock_of is not self.clock_text:
            self.clock_of = self.clock_text
            try:
                self.clock_value = line_stamp(self.clock_text, self.clock_template)
            except (ArithmeticError, ValueError, IndexError):
                self.clock_value = NAN
        return self.clock_value

    def ranked(self) -> list[tuple[tuple, Template, int]]:
        """(score, template, counter field) of each epoch template with a counter, best
        first (see the module's doc)."""
        found = []
        for template in self.templates.values():
            if not template.epoch or template.columns is None or not template.count:
                continue
            index = template.counter()
            if index is None:
                continue
            values = template.columns[index]
            groups = 1 + sum(1 for a, b in zip(values, values[1:]) if a != b)
            if groups < 2 and not (set(template.kinds[index + 1:]) & set("dp") or metrics(
                    template, 0, {index}, False) or template.total(index) is not None):
                continue  # a line printed once, with no time, metric or total: no evidence
            timed = "d" in template.kinds or any(c == c for c in template.clocks) or (
                template.stamp is not None)
            score = (timed, not EVALUATION.search(template.text), len(values) <= 1.5 * groups,
                     groups, -template.line)
            found.append((score, template, index))
        return sorted(found, key=lambda f: f[0], reverse=True)

    def settle(self, runs: list[ParsedLog]) -> list[ParsedLog]:
        if any(run.epochs for run in runs):
            return runs  # another format read this stream
        if not (ranked := self.ranked()):  # no epoch line: a run total may be one epoch
            total = self.run_total() if not any(r.rate is not None for r in runs) else None
            return runs if total is None else [total]
        _score, template, index = ranked[0]
        kept = [run for run in runs if run.rate is not None]
        # runs told apart by their lines' prefix (`[runA] Epoch 1 ...`, `[runB] Epoch 1
        # ...`): the same shape after the first words, each its own run
        alike = [(t, i) for _s, t, i in ranked if t is template or (
            t.kinds == template.kinds and t.literals[1:] == template.literals[1:]
            and i == index)]
        found = []
        for other, at in alike:
            found += self.epochs(other, at)
        if len(alike) > 1:
            for run in found:
                run.warnings.append(
                    f"{self.stream.path}: {len(alike)} runs told apart by their lines' first "
                    "words: " + ", ".join(f"`{t.shape()}`" for t, _i in alike))
        return sorted(found + kept, key=lambda run: run.line)

    def epochs(self, template: Template, index: int) -> list[ParsedLog]:
        """The runs of the winning template's rows."""
        stream, values, lines = self.stream, template.columns[index], template.lines
        total = template.total(index)
        skip = {index} | ({total} if total is not None else set()) | {
            i for i, k in enumerate(template.kinds) if k in "td"}
        # groups: [counter value, first row, last row]; runs: lists of groups
        runs: list[list[list]] = []
        for row, value in enumerate(values):
            if runs and value == runs[-1][-1][0]:
                runs[-1][-1][2] = row  # a copy (another node's line), or the same epoch
                continue
            if not runs or value < runs[-1][-1][0]:
                runs.append([])  # the counter drops: the next run
            runs[-1].append([value, row, row])
        copied = all(column[g[1]] == column[g[2]]  # the same line from several workers
                     for kind, column in zip(template.kinds, template.columns) if kind in "np"
                     for run in runs for g in run)
        duration = next((i for i, k in enumerate(template.kinds) if k == "d"), None)
        if not copied and duration is not None and (apart := interleaved(template, values)):
            runs, copied = apart, True  # independent runs' lines in one file, told apart
            self.apart = len(apart)
        if len(values) / sum(len(r) for r in runs) > 1.5 and not copied:
            duration = None  # a per-step line's time is no epoch's
        stamped = template.stamp is not None or any(c == c for c in template.clocks)
        start = bool(STARTS.search(template.text)) or not metrics(template, 0, skip, False)
        evaluation = bool(EVALUATION.search(template.text))
        where = f"`{template.shape()}` (line {template.line}: {template.text[:120]!r})"
        # an evaluation comes after a start marker's last copy (another node's of the epoch
        # before may come between its copies), after an end marker's first
        starts = [lines[group[2 if start else 1]] for run in runs for group in run]
        others = self.evaluations(template, starts)
        crash = max((t.lines[-1] for t in self.templates.values()  # a Python traceback
                     if t.text.startswith("Traceback (most recent") and t.lines), default=0)
        if crash > lines[-1]:
            self.cut_reason = f"a traceback follows its last epoch's line (line {crash})"
        # a last epoch begun whose evaluation (that every other epoch has) never came
        begun = start and (crash > starts[-1] or others and not any(
            len(starts) - 1 in w for _o, w, _e in others))
        result = []
        for number, groups in enumerate(runs):
            first_line = lines[groups[0][1]]
            run = ParsedLog(stream.path, line=first_line if number else min(
                first_line, stream.runs[0].line))
            base = 1 if groups[0][0] == 0 else 0
            if total is not None:
                run.epochs_total = int(template.columns[total][groups[-1][2]])
            times = [self.gap(template, groups, at, start) if duration is None and stamped
                     else None for at in range(len(groups))]
            times = self.clock_checked(run, template, groups, times)
            for at, (value, first, last) in enumerate(groups):
                if begun and number == len(runs) - 1 and at == len(groups) - 1:
                    self.cut_reason = (f"epoch {int(value) + base} began (line {lines[first]}) "
                                       + (f"and a traceback followed (line {crash})" if crash
                                          > starts[-1] else "and has no evaluation line"))
                    break
                record = {"seconds": None, "seconds_resolution": None, "steps": None,
                          "samples": None}
                if duration is not None:
                    record["seconds"] = max(template.columns[duration][first:last + 1])
                    record["seconds_resolution"] = template.steps[duration]
                elif stamped:
                    record["seconds"] = times[at]
                    record["seconds_resolution"] = self.stamp_step(template)
                record.update(metrics(template, last, skip, evaluation))
                record["loss_unknown"] = "loss" not in record
                run.result(record, lines[last], int(value) + base)
            self.merge(run, others, starts)
            run.facts["log_format"] = NAME
            if self.apart:
                run.warnings.append(f"{stream.path}: {self.apart} runs' epoch lines "
                                    f"interleave ({where}): each a run, told apart by the "
                                    "order of their counters; a banner's larger GPU count "
                                    "did not join them")
            if self.restarts:
                run.facts["restarts"] = self.restarts
                run.warnings.append(f"{stream.path}: {self.restarts} restart(s): an epoch's "
                                    "start line came again before it ended; each epoch is "
                                    "timed from its last start")
            if self.skipped:
                run.facts["lines_skipped"] = self.skipped
            run.facts["epoch_line"] = where
            if copied and (copies := max(g[2] - g[1] + 1 for g in groups)) > 1:
                run.facts["copies"] = copies  # (the slowest copy's time counts)
            run.warnings.append(f"{stream.path}: no known format: the epochs are the lines "
                                f"{where}; check them, or give a pattern (external_runs[]"
                                ".patterns)")
            if duration is None and stamped:
                run.facts["epoch_time_from"] = (
                    "the gap between timestamps of " + ("its line and the next epoch's"
                                                        if start else "its line and the "
                                                        "epoch before's") + f": {where}")
            result.append(run)
        self.unfinished(result)
        self.settings_for(result)
        self.totals(result)
        return result

    def run_total(self) -> ParsedLog | None:
        """A run timed by its total alone, one epoch (`Train samples 16384 time 779.241s
        rate 21.0256 samples/s`, `Total time: 179.72s`, `took 12.3 s`, `4096 samples in
        13.1 s`), printed once or by each worker: a line with a time after words that say
        a whole (total, took, time, elapsed, in), where no epoch line is timed. Its
        epoch's number is an epoch line's that began it (`Epoch 0`), else 1; the slowest
        copy's time counts; a rate after it (`samples/s`) is kept as a fact."""
        found = [t for t in self.templates.values() if t.columns is not None and t.lines
                 and "d" in t.kinds and t.count <= TOTAL_COPIES and TOTAL_WORDS.search(
                     t.literals[t.kinds.index("d")])]
        if not found:
            return None
        total = max(found, key=lambda t: t.lines[-1])  # the last one printed
        at = total.kinds.index("d")
        seconds = max(total.columns[at])
        if not seconds > 0:
            return None
        begun = [t for t in self.templates.values() if t.epoch and t is not total
                 and t.columns is not None and t.lines and t.lines[0] < total.lines[0]
                 and (index := t.counter()) is not None and len(set(t.columns[index])) == 1]
        epoch, first = 1, total.lines[0]
        if begun:
            marker = min(begun, key=lambda t: t.lines[0])
            value = int(marker.columns[marker.counter()][0])
            epoch, first = value + (1 if value == 0 else 0), marker.lines[0]
        run = ParsedLog(self.stream.path, line=min(first, self.stream.runs[0].line))
        run.result({"seconds": seconds, "seconds_resolution": total.steps[at], "steps": None,
                    "samples": None, "loss_unknown": True}, total.lines[-1], epoch)
        where = f"`{total.shape()}` (line {total.line}: {total.text[:120]!r})"
        run.facts.update({"log_format": NAME, "epoch_line": where,
                          "epoch_time_from": f"the run's total {where}: one epoch"})
        if total.count > 1:
            run.facts["copies"] = total.count
        rate = next((i for i in range(at + 1, len(total.kinds)) if total.kinds[i] == "n"
                     and PER_SECOND.match(total.literals[i + 1])), None)
        if rate is not None:
            run.facts["samples_per_s"] = min(total.columns[rate])  # the slowest copy's
        run.warnings.append(f"{self.stream.path}: no known format: one epoch, timed by the "
                            f"run's total {where}; check it, or give a pattern "
                            "(external_runs[].patterns)")
        self.settings_for([run])
        self.unfinished([run])
        return run

    def gap(self, template: Template, groups: list, at: int, start: bool) -> float | None:
        """An epoch's time from timestamps: its line's to the next epoch's (a start
        marker; the last epoch: to the stream's last timestamp) or from the epoch before.
        A negative gap is a time of day past midnight (86,400 s added), marked by
        `wrapped` for `clock_checked`."""
        if start:
            begin = template.clock(self.last_start(template, groups[at]))
            end = template.clock(groups[at + 1][1]) if at + 1 < len(groups) else self.clock()
        else:
            end = template.clock(groups[at][2])
            begin = template.clock(groups[at - 1][2]) if at else self.first_clock
        seconds = end - begin
        if seconds < 0 and seconds > -86400:
            seconds += 86400  # a time of day past midnight (checked in clock_checked)
            self.wrapped.add(id(groups[at]))
        return round(seconds, 6) if seconds == seconds and seconds > 0 else None

    def last_start(self, template: Template, group: list) -> int:
        """The row an epoch began at: its start line's last restart (the same `Epoch k`
        again seconds later, before the epoch ended: a job restarted, its attempts'
        lines in one file), not the first attempt's; copies from several workers within
        a second of each other are one start. Restarts are counted (`restarts`)."""
        row = group[1]
        for later in range(group[1] + 1, group[2] + 1):
            if template.clock(later) - template.clock(later - 1) > RESTART_GAP:
                row = later
                self.restarts += 1
        return row

    def clock_checked(self, run: ParsedLog, template: Template, groups: list,
                      times: list) -> list:
        """The gaps of a run's epochs, less those the clock cannot have given: a gap past
        midnight (or a day long) beside epochs of minutes is a clock turned back
        (daylight saving, a node's clock set) or a pause, flagged, never an epoch."""
        plain = sorted(t for g, t in zip(groups, times)
                       if t is not None and id(g) not in self.wrapped and t < 43200)
        usual = plain[len(plain) // 2] if plain else None
        for at, (group, seconds) in enumerate(zip(groups, times)):
            if seconds is None or usual is None:
                continue
            if (id(group) in self.wrapped or seconds >= 43200) and seconds > 20 * usual:
                times[at] = None
                run.warnings.append(
                    f"{self.stream.path}: epoch {int(group[0])}'s timestamps are "
                    f"{seconds:,.0f} s apart beside epochs of about {usual:,.0f} s: the "
                    "clock was turned back or the run paused (line "
                    f"{template.lines[group[1]]}); the epoch has no time")
                run.facts["clock_back"] = True
        return times

    def stamp_step(self, template: Template) -> float:
        said = template if template.stamp is not None else self.clock_template
        return said.steps[said.stamp] if said is not None else 1.0

    def evaluations(self, template: Template, starts: list[int]) -> list:
        """(template, {epoch's index: row}, whether an evaluation's) of each other template
        with metrics printed once (or as often as the epoch line) between two epoch lines in
        at least half the gaps: an evaluation where its words, or the line's before it,
        say test, validation or eval."""
        found = []
        for other in self.templates.values():
            if (other is template or other.columns is None or not other.lines
                    or len(other.lines) > 1.5 * len(template.lines)
                    or not any(metric_name(lit, True) for lit in other.literals[:-1])):
                continue
            where: dict[int, int] = {}
            for row, line in enumerate(other.lines):
                if (at := bisect_right(starts, line) - 1) >= 0:
                    where[at] = row
            if where and len(where) >= len(starts) / 2:
                before = other.lines[0] - 1
                evaluation = bool(EVALUATION.search(other.text)) or any(
                    EVALUATION.search(t.text) and t.lines and before in t.lines[
                        max(0, bisect_right(t.lines, before) - 1):][:1]
                    for t in self.templates.values() if t.columns is not None)
                found.append((other, where, evaluation))
        return found

    def merge(self, run: ParsedLog, others: list, starts: list[int]) -> None:
        """Each evaluation's metrics into the epoch whose line came before it."""
        table = run.epochs
        ended = table.ended()
        for epoch in list(table.index):
            at = bisect_right(starts, ended.get(epoch, 0)) - 1
            for other, where, evaluation in others:
                if (row := where.get(at)) is None:
                    continue
                for name, value in metrics(other, row, set(), evaluation).items():
                    if table[epoch].get(name) is None:
                        table.set(epoch, name, value)

    def settings_for(self, runs: list[ParsedLog]) -> None:
        """What the stream stated, each to the run whose last epoch comes after it."""
        for number, found in self.stream.stated:
            ends = [run for run in runs if run.epochs and run.epochs.lines[-1] >= number]
            (ends[0] if ends else runs[-1]).settings.update(found)

    def unfinished(self, runs: list[ParsedLog]) -> None:
        """The last run cut (SLURM's cancel line), or its counter short of the total its
        line states: unfinished, with the reason."""
        ending, last = self.stream.runs[-1], runs[-1]
        reason = ending.facts.get("unfinished") or self.cut_reason or ending.cut and "cut"
        if last.epochs_total is not None and last.last < last.epochs_total:
            reason = reason or f"stopped at epoch {last.last} of {last.epochs_total}"
        if reason:
            last.cut, last.cut_epoch = True, last.last + 1
            last.facts["unfinished"] = reason

    def totals(self, runs: list[ParsedLog]) -> None:
        """A run total the stream printed after a run's epochs, for epochs without times."""
        starts = [run.line for run in runs[1:]] + [1 << 62]
        for run, end in zip(runs, starts):
            for number, seconds, step, average in self.stream.totals:
                if run.epochs and run.epochs.lines[-1] < number < end:
                    count = len(run.epochs) if average else 1
                    share_total(run, seconds * count, step * count, (
                        f"the run's average time per epoch ({seconds:g} s) times its epochs"
                        if average else "the run's total time"), number)
                    break
