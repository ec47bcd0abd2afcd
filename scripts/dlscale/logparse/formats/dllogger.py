"""NVIDIA's DLLogger (github.com/NVIDIA/dllogger, used by DeepLearningExamples) read as runs.

Two forms, both one entry per line:
- what its StdOutBackend prints: `DLL 2023-05-07 10:00:00.123456 - (1, 40) train.loss :
  6.91 train.total_ips : 2615.5 images/s`, the step as `str(step)` or, in
  DeepLearningExamples' scripts, `Epoch: 1 Iteration: 40`, `Summary:`, `PARAMETER`;
- what its JSONStreamBackend writes: `DLLL {"timestamp": "1570716921.84", "type": "LOG",
  "step": [0, 5], "data": {...}}`, and `METADATA` lines that give each metric's unit.

A step of one number is an epoch's entry, of two a training iteration's, of three a
validation iteration's (left out); an empty step is the run's summary and `PARAMETER` its
settings. DLLogger writes no epoch time: an epoch ends at its last entry (its own, else
its last iteration's), and takes the time since the one before ended (the first: since
the run's first line, so it holds the start-up). Throughput is `train.total_ips`, the
accuracies top-1 (a percentage where the unit says so, or where it is over 1).
"""

from __future__ import annotations

import json
import re
from datetime import datetime

from dlscale.logparse.runs import LogFormat, ParsedLog

NAME = "dllogger"
MARK = "DLL"
TEXT = re.compile(r"^DLLL? (\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?)\S* - (.*)$")
METRIC = re.compile(r"(\S+) : (\S+)(?: +(?!\S+ : )([^\s:]+))?")
STEP_WORDS = re.compile(r"^(?:[A-Za-z ]*Epoch: *(\d+))?(?: *Iteration: *(\d+))?"
                        r"(?: *Validation Iteration: *(\d+))? *$")
SUMMARY = {"", "Summary:", "()", "[]", "Summary"}
# what dlscale's epoch rows take, and from which names
EPOCH_FIELDS = {"loss": ("train.loss", "loss"), "accuracy": ("train.top1", "train.accuracy"),
                "val_loss": ("val.loss",), "val_accuracy": ("val.top1", "val.accuracy"),
                "logged_images_per_s": ("train.total_ips", "train.throughput")}


def number(text: str) -> float | int | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def step_of(text: str):
    """A printed step as the tuple DLLogger was given, "PARAMETER", or () for a summary;
    None where it is not a step."""
    text = text.strip()
    if text in SUMMARY:
        return ()
    if text == "PARAMETER":
        return text
    if text[:1] in "([" and text[-1:] in ")]":
        parts = [p.strip() for p in text[1:-1].split(",") if p.strip()]
        return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None
    if text.isdigit():
        return (int(text),)
    found = STEP_WORDS.match(text)
    if found and any(found.groups()):
        return tuple(int(g) for g in found.groups() if g is not None)
    return None


class Run:
    def __init__(self, line: int, at: float):
        self.line, self.start = line, at
        self.params: dict = {}
        self.ends: dict[int, float] = {}      # epoch as logged -> time of its last entry
        self.values: dict[int, dict] = {}     # epoch -> its own entries' values
        self.summary: dict = {}


class Reader(LogFormat):
    """The DLLogger lines of a log, fed one at a time (the reader hands them on)."""

    def __init__(self):
        self.runs: list[Run] = []
        self.units: dict[str, str] = {}
        self.live: tuple[Run, ParsedLog] | None = None  # the live view's run (current)

    def read(self, number_: int, text: str) -> bool:
        """Take `text` if it is a DLLogger line; whether it was."""
        entry = self.entry(text)
        if entry is None:
            return False
        at, step, data = entry
        if step is None:
            return True  # METADATA, or a step of a form no script prints
        run = self.runs[-1] if self.runs else None
        if run is None or (step == "PARAMETER" and run.ends):
            run = Run(number_, at)
            self.runs.append(run)
        if step == "PARAMETER":
            run.params.update(data)
        elif step == ():
            run.summary.update(data)
        elif len(step) <= 2:
            epoch = step[0]
            run.ends[epoch] = at
            if len(step) == 1:
                run.values.setdefault(epoch, {}).update(data)
        return True

    def entry(self, text: str):
        """(time, step, data) of a DLLogger line, (time, None, {}) for one that is not a
        step's, None for a line that is not DLLogger's."""
        if text.startswith("DLLL {"):
            try:
                event = json.loads(text[5:])
                at = float(event["timestamp"])
            except (ValueError, KeyError, TypeError):
                return None
            if event.get("type") == "METADATA":
                unit = (event.get("metadata") or {}).get("unit")
                if unit:
                    self.units[str(event.get("metric"))] = unit
                return at, None, {}
            step = event.get("step")
            step = tuple(step) if isinstance(step, list) and all(
                isinstance(s, int) for s in step) else step if step == "PARAMETER" else None
            data = event.get("data")
            return at, step, data if isinstance(data, dict) else {}
        found = TEXT.match(text)
        if not found:
            return None
        try:
            at = datetime.fromisoformat(found[1]).timestamp()
        except ValueError:
            return None
        rest = found[2]
        first = METRIC.search(rest)
        step = step_of(rest[:first.start()] if first else rest)
        data = {}
        if isinstance(step, tuple) and len(step) > 1:
            return at, step, data  # an iteration's values: only its time is read
        for name, value, unit in METRIC.findall(rest):
            data[name] = number(value)
            if unit:
                self.units.setdefault(name, unit)
        return at, step, data

    def runs_of(self, path: str, others: list[ParsedLog]) -> list[ParsedLog]:
        found = []
        for run in self.runs:
            parsed = ParsedLog(path, line=run.line)
            # epochs with an entry of their own where the log writes them, else every
            # epoch a later one (or the summary) follows
            done = sorted(run.values) if run.values else sorted(run.ends)[
                :None if run.summary else -1]
            for index in range(1, len(done) + 1):
                parsed.epochs[index] = self.record(run, done, index)
            parsed.last = len(done)
            self.settle(run, parsed)
            if parsed.epochs or parsed.rate is not None:
                found.append(parsed)
        return found

    def current(self, path: str) -> ParsedLog | None:
        """The run being read as it stands, each epoch once a later one began or the
        summary came: for a live view, the same object while the run goes on."""
        if not self.runs:
            return None
        run = self.runs[-1]
        if self.live is None or self.live[0] is not run:
            self.live = (run, ParsedLog(path, line=run.line))
        parsed = self.live[1]
        latest = max(run.ends, default=0)
        done = [e for e in sorted(run.values) if run.summary or e < latest]
        for index in range(len(parsed.epochs) + 1, len(done) + 1):
            parsed.epochs[index] = self.record(run, done, index)
            parsed.last = index
        return parsed

    def record(self, run: Run, done: list[int], index: int) -> dict:
        """Epoch `index` (of `done`, the epochs as logged): its time since the one before
        ended (the first: since the run's first line) and its values."""
        epoch = done[index - 1]
        before = run.ends[done[index - 2]] if index > 1 else run.start
        record = {"seconds": run.ends[epoch] - before}
        own = run.values.get(epoch, {})
        for field, names in EPOCH_FIELDS.items():
            value = next((own[n] for n in names if isinstance(own.get(n), (int, float))),
                         None)
            if value is not None and field.endswith("accuracy"):
                value = self.fraction(names, value)
            record[field] = value
        if record["loss"] is None:
            record["loss_unknown"] = True
        return record

    def fraction(self, names: tuple, value: float) -> float:
        unit = next((self.units[n] for n in names if n in self.units), None)
        return value / 100 if unit == "%" or (unit is None and value > 1) else value

    @staticmethod
    def settle(run: Run, parsed: ParsedLog) -> None:
        params, summary = run.params, run.summary
        batch = params.get("batch_size")
        world = next((params[k] for k in ("world_size", "num_gpus", "gpus")
                      if isinstance(params.get(k), int)), None)
        if isinstance(batch, int) and batch > 0:
            parsed.settings["batch_per_gpu"] = batch
            if world:
                parsed.settings["global_batch"] = batch * world
        if world:
            parsed.settings["gpus"] = world
        total = params.get("epochs")
        if summary:
            parsed.epochs_total = parsed.last
        elif isinstance(total, int) and parsed.last < total:
            parsed.cut, parsed.cut_epoch = True, parsed.last + 1
        ips = summary.get("train.total_ips")
        if not parsed.epochs and isinstance(ips, (int, float)):
            parsed.rate = ips  # a benchmark's throughput alone
        amp = next((params[k] for k in ("amp", "fp16") if isinstance(params.get(k), bool)),
                   None)
        facts = {"log_format": "dllogger", "amp": amp,
                 "summary_images_per_s": ips if parsed.epochs else None,
                 "summary_compute_images_per_s": summary.get("train.compute_ips")}
        parsed.facts = {k: v for k, v in facts.items() if v is not None}
