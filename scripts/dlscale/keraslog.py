"""Parse Keras training output into one record per epoch, whatever the Keras version.

Understood (see tests/unit/test_keraslog.py for each):
  verbose=2, Keras 2 (2021):   196/196 - 45s - loss: 1.7626 - accuracy: 0.3536
  verbose=2, tf-keras 2.21:    4/4 - 1s - loss: 2.3112 - accuracy: 0.1133 - 878ms/epoch - 219ms/step
  verbose=2, Keras 3:          8/8 - 9s - 1s/step - accuracy: 0.0918 - loss: 2.6331
  verbose=1, Keras 2:          600/600 [====] - 2s 3ms/step - loss: 0.3 - acc: 0.9
  verbose=1, TF 1.x:           60000/60000 [====] - 8s 131us/sample - loss: 0.2 - acc: 0.94
  verbose=1, Keras 3:          8/8 ━━━━━━━━━━━━━━━━━━━━ 9s 1s/step - accuracy: 0.0918 - loss: 2.6
Progress-bar updates (with ETA, or overwritten through \\r and \\b) are skipped; the
`Epoch k/N` headers number the epochs; a later result for the same epoch (a run that
was resumed) replaces the earlier one. `acc`/`val_acc` are reported as
`accuracy`/`val_accuracy`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

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


@dataclass
class ParsedLog:
    path: str
    epochs: dict[int, dict] = field(default_factory=dict)
    epochs_total: int | None = None
    cut: bool = False            # the log ends inside an epoch
    cut_epoch: int | None = None

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
    for token in (t.strip() for t in rest.split(" - ")):
        for part in ([token] if ":" in token else token.split()):
            if (m := METRIC.match(part)) is not None:
                record[ALIASES.get(m.group(1), m.group(1))] = float(m.group(2))
            elif (m := PER_UNIT.match(part)) is not None:
                value = float(m.group(1)) * SCALE[m.group(2)]
                if m.group(3) == "epoch":
                    seconds_from_epoch_token = (value, SCALE[m.group(2)])
                else:
                    record["unit"] = m.group(3)
                    record[f"seconds_per_{m.group(3)}"] = value
            elif (m := DURATION.match(part)) is not None and "seconds" not in record:
                record["seconds"] = float(m.group(1)) * SCALE[m.group(2)]
                record["seconds_resolution"] = SCALE[m.group(2)]  # Keras rounds to its unit
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


def parse_text(text: str, path: str = "<log>") -> ParsedLog:
    log = ParsedLog(path)
    current, finished_current = None, True
    for physical in text.splitlines():
        # progress bars overwrite themselves with \r or \b: keep the last state
        segments = [s for s in re.split(r"[\r\x08]+", physical) if s.strip()]
        for segment in segments[-1:]:
            if (header := HEADER.match(segment)) is not None:
                current, finished_current = int(header.group(1)), False
                log.epochs_total = int(header.group(2))
                continue
            record = parse_result_line(segment)
            if record is None:
                continue
            epoch = current if current is not None and not finished_current else \
                max(log.epochs, default=0) + 1
            record = {"epoch": epoch, "epochs_total": log.epochs_total, **record}
            log.epochs[epoch] = record
            current, finished_current = epoch, True
    if current is not None and not finished_current:
        log.cut, log.cut_epoch = True, current
    if not log.epochs:
        raise LogError(f"{path}: no finished epoch found (expected Keras lines such as "
                       "'196/196 - 45s - loss: 1.76 - accuracy: 0.35')")
    return log


def parse_file(path: str) -> ParsedLog:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return parse_text(handle.read(), str(path))


def finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
