"""Parse Keras training output into runs of epoch records, whatever the Keras version.

Understood (tests/unit/test_keraslog.py has each, and real captured logs):
  verbose=2, Keras 2 (2021):   196/196 - 45s - loss: 1.7626 - accuracy: 0.3536
  verbose=2, Keras 2.11-2.13:  25/25 - 14s - loss: 2.1255 - accuracy: 0.2195 - 14s/epoch
                               - 544ms/step (one line)
  verbose=2, tf-keras 2.21:    4/4 - 1s - loss: 2.3112 - accuracy: 0.1133 - 878ms/epoch - 219ms/step
  verbose=2, Keras 3:          8/8 - 9s - 1s/step - accuracy: 0.0918 - loss: 2.6331
  verbose=1, Keras 2:          600/600 [====] - 2s 3ms/step - loss: 0.3 - acc: 0.9
  verbose=1, TF 1.x:           60000/60000 [====] - 8s 131us/sample - loss: 0.2 - acc: 0.94
  verbose=1, Keras 3:          8/8 ━━━━━━━━━━━━━━━━━━━━ 9s 1s/step - accuracy: 0.0918 - loss: 2.6
ANSI escape codes (Keras 3 colours its bars even in files) are removed first;
progress-bar updates (with ETA, or overwritten through \r and \b) are skipped.
`acc`/`val_acc` are reported as `accuracy`/`val_accuracy`.

A log is a sequence of runs (one job's .out often holds several): a new run starts
where the epoch count restarts (`Epoch 1/N` after finished epochs, or another N) or a
run's settings are stated again after finished epochs. Settings come from lines that
state them (SETTINGS below: the echoed command line, `Num_replicas: 2`, `Batch_size:
4096`, `Model ResNet50 2 GPUs`, TensorFlow's `Using MirroredStrategy with devices (...)`,
`Number of devices: 4`, Horovod's size) and from user patterns. A run resumed after a
cut (`Epoch k/N` right after epoch k-1) stays one run; an earlier epoch coming back
inside a run is taken as a resume from an older backup, with a warning naming the line.
A last line without its end (no newline, or stopping inside a `name: value` pair)
leaves that epoch unfinished: the run is cut and the epoch not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
HEADER = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
PROGRESS = re.compile(r"^\s*(\d+)/(\d+|Unknown)\s*(?:\[[=>.]*\]|[━─\u2501\u2500]+)?\s*-?\s*(.*)$")
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(h|min|m|s|ms|us|µs)$")
PER_UNIT = re.compile(r"^(\d+(?:\.\d+)?)(s|ms|us|µs)/(step|sample|epoch)$")
METRIC = re.compile(r"^([A-Za-z_][\w./-]*):\s*(-?(?:nan|inf|\d+(?:\.\d+)?(?:e[-+]?\d+)?))$",
                    re.IGNORECASE)
SCALE = {"h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
ALIASES = {"acc": "accuracy", "val_acc": "val_accuracy"}


class LogError(ValueError):
    """A log holds no epoch at all; the message names the file."""


# setting -> patterns with one group (the value); the same setting stated again after a
# run's epochs begins the next run. batch_per_gpu from the command line is the study's
# --batch_size (per GPU); Batch_size: in a header is the global batch.
SETTINGS: dict[str, list[re.Pattern]] = {
    "gpus": [re.compile(r"--(?:n_gpus|num_gpus|gpus)[= ](\d+)\b"),
             re.compile(r"^\s*Num_replicas:\s*(\d+)\s*$"),
             re.compile(r"^\s*Model\s+\S+\s+(\d+)\s+GPUs?\b"),
             re.compile(r"Number of devices:\s*(\d+)"),
             re.compile(r"\b[Hh]orovod size:?\s*(\d+)"),
             re.compile(r"\bhvd\.size\(\)\s*[:=]\s*(\d+)")],
    "global_batch": [re.compile(r"^\s*Batch_size:\s*(\d+)\s*$")],
    "batch_per_gpu": [re.compile(r"--batch[_-]size[= ](\d+)\b")],
    "epochs": [re.compile(r"--epochs[= ](\d+)\b")],
}
MIRRORED = re.compile(r"Using MirroredStrategy with devices \((.*)\)")


def compile_patterns(patterns: dict[str, str] | None, where: str = "patterns"
                     ) -> dict[str, re.Pattern]:
    """User patterns (JUBE/ReFrame style): a regex with one group per setting. ValueError
    naming the key for one that does not compile or has no group."""
    compiled = {}
    for key, text in (patterns or {}).items():
        try:
            regex = re.compile(text)
        except re.error as exc:
            raise ValueError(f"{where}.{key}: '{text}' is not a regular expression "
                             f"({exc})") from None
        if regex.groups < 1:
            raise ValueError(f"{where}.{key}: '{text}' has no group: put the value in "
                             "parentheses, e.g. 'Num_replicas: (\\d+)'")
        compiled[key] = regex
    return compiled


def settings_in(line: str, patterns: dict[str, re.Pattern] | None = None,
                warn=None) -> dict[str, int]:
    """The run settings a line states, as integers; a user pattern whose group matched
    something that is not a number is said through `warn(message)`, not dropped silently."""
    found = {}
    for key, regexes in SETTINGS.items():
        for regex in regexes:
            if (m := regex.search(line)) is not None:
                found[key] = int(m.group(1))
                break
    if (m := MIRRORED.search(line)) is not None:
        found["gpus"] = len(re.findall(r"'[^']*'|\"[^\"]*\"", m.group(1)))
    for key, regex in (patterns or {}).items():
        if (m := regex.search(line)) is not None:
            try:
                found[key] = int(float(m.group(1)))
            except (TypeError, ValueError):
                if warn is not None:
                    warn(f"pattern {key} matched {m.group(1)!r}, which is not a number: "
                         "ignored")
    return found


def settings_sequence(text: str, patterns: dict[str, re.Pattern] | None = None
                      ) -> list[dict[str, int]]:
    """Settings per run from a file that holds only them (a job's .err): a setting
    stated again begins the next run's."""
    runs: list[dict[str, int]] = [{}]
    for line in ANSI.sub("", text).splitlines():
        for key, value in settings_in(line, patterns).items():
            if key in runs[-1]:
                runs.append({})
            runs[-1][key] = value
    return runs if runs[-1] else runs[:-1]


@dataclass
class ParsedLog:
    """One run of a log."""
    path: str
    epochs: dict[int, dict] = field(default_factory=dict)
    epochs_total: int | None = None
    cut: bool = False            # the log ends inside an epoch
    cut_epoch: int | None = None
    settings: dict[str, int] = field(default_factory=dict)  # stated in the log
    line: int = 1                # where the run begins
    warnings: list[str] = field(default_factory=list)
    _open: int | None = None     # the epoch whose header came last, while unfinished

    def rows(self) -> list[dict]:
        return [self.epochs[k] for k in sorted(self.epochs)]


def parse_result_line(text: str) -> dict | None:
    """The record of one finished-epoch line, or None for anything else."""
    match = PROGRESS.match(text)
    if not match or "ETA" in text:
        return None
    done, total, rest = match.groups()
    record: dict = {}
    seconds_from_epoch_token = None
    recognised = True  # whether the last part was: a line cut inside a pair is unfinished
    for token in (t.strip() for t in rest.split(" - ")):
        for part in ([token] if ":" in token else token.split()):
            recognised = True
            if (m := METRIC.match(part)) is not None:
                record[ALIASES.get(m.group(1), m.group(1))] = float(m.group(2))
            elif (m := PER_UNIT.match(part)) is not None:
                value = float(m.group(1)) * SCALE[m.group(2)]
                if m.group(3) == "epoch":
                    seconds_from_epoch_token = (value, SCALE[m.group(2)])
                else:
                    record["unit"] = m.group(3)
                    record[f"seconds_per_{m.group(3)}"] = value
            elif (m := DURATION.match(part)) is not None:
                if "seconds" not in record:
                    record["seconds"] = float(m.group(1)) * SCALE[m.group(2)]
                    record["seconds_resolution"] = SCALE[m.group(2)]  # Keras rounds to it
            else:
                recognised = False
    if not recognised:
        return None
    metrics = [k for k in record if not k.startswith(("seconds", "unit"))]
    if not metrics or "seconds" not in record and seconds_from_epoch_token is None:
        return None
    if seconds_from_epoch_token is not None:  # tf-keras' ms/epoch is the precise one
        record["seconds"], record["seconds_resolution"] = seconds_from_epoch_token
    unit = record.pop("unit", "step")
    count = int(done)
    record["steps"] = count if unit == "step" else None
    record["samples"] = count if unit == "sample" else None
    if total != "Unknown" and int(total) != count:
        return None  # a progress update that is not the end of the epoch
    return record


def parse_runs(text: str, path: str = "<log>",
               patterns: dict[str, re.Pattern] | None = None) -> list[ParsedLog]:
    """Every run in a log, in order; LogError when none has a finished epoch."""
    text = ANSI.sub("", text)
    lines = text.split("\n")
    unfinished = lines.pop() if lines else ""  # the text after the last newline
    runs = [ParsedLog(path)]

    def new_run(number: int) -> ParsedLog:
        runs.append(ParsedLog(path, line=number))
        return runs[-1]

    def result(run: ParsedLog, record: dict) -> None:
        epoch = run._open if run._open is not None else max(run.epochs, default=0) + 1
        run.epochs[epoch] = {"epoch": epoch, "epochs_total": run.epochs_total, **record}
        run._open = None

    for number, physical in enumerate(lines, 1):
        # progress bars overwrite themselves with \r or \b: keep the last state
        segments = [seg for seg in re.split(r"[\r\x08]+", physical) if seg.strip()]
        for segment in segments[-1:]:
            run = runs[-1]
            if (header := HEADER.match(segment)) is not None:
                epoch, total = int(header.group(1)), int(header.group(2))
                done = max(run.epochs, default=0)
                if run.epochs and (total != run.epochs_total or epoch == 1):
                    run = new_run(number)
                elif run.epochs and epoch <= done:
                    run.warnings.append(
                        f"{path}:{number}: epoch {epoch} comes again after epoch {done}: taken "
                        "as a resume from an older backup, the later result replaces the "
                        "earlier")
                if run._open is not None and run._open != epoch:
                    run.warnings.append(f"{path}:{number}: epoch {run._open} has no result "
                                        "line before the next epoch begins")
                run._open, run.epochs_total = epoch, total
                continue
            if found := settings_in(segment, patterns, lambda message, run=run, at=number:
                                    run.warnings.append(f"{path}:{at}: {message}")):
                if run.epochs:
                    run = new_run(number)
                run.settings.update(found)
                continue
            if (record := parse_result_line(segment)) is not None:
                result(run, record)
    last = runs[-1]
    if unfinished.strip() and PROGRESS.match(ANSI.sub("", unfinished).split("\r")[-1]):
        last.cut, last.cut_epoch = True, last._open or max(last.epochs, default=0) + 1
    if last._open is not None:
        last.cut, last.cut_epoch = True, last._open
    runs = [r for r in runs if r.epochs or r.cut or r is last]
    if not any(r.epochs for r in runs):
        raise LogError(f"{path}: no finished epoch found (expected Keras lines such as "
                       "'196/196 - 45s - loss: 1.76 - accuracy: 0.35')")
    return [r for r in runs if r.epochs or r.cut]


def parse_text(text: str, path: str = "<log>") -> ParsedLog:
    """The one run of a log (a dlscale train.log); LogError if it holds several."""
    runs = parse_runs(text, path)
    if len(runs) > 1:
        starts = ", ".join(str(r.line) for r in runs)
        raise LogError(f"{path} holds {len(runs)} runs (starting at lines {starts}): "
                       "expected one")
    return runs[0]


def read_text(path) -> str:
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        return handle.read()


def parse_file(path: str) -> ParsedLog:
    return parse_text(read_text(path), str(path))


def parse_file_runs(path: str, patterns: dict[str, re.Pattern] | None = None
                    ) -> list[ParsedLog]:
    return parse_runs(read_text(path), str(path), patterns)
