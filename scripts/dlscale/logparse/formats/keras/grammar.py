"""The grammar of Keras' printed lines: epoch headers and result lines of every Keras
(tests/unit/test_keras_logs.py has each, and real captured logs):

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
"""

from __future__ import annotations

import re

from dlscale.logparse.runs import ALIASES

HEADER = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
PROGRESS = re.compile(r"^\s*(\d+)/(\d+|Unknown)\s*(?:\[[=>.]*\]|[━─\u2501\u2500]+)?\s*-?\s*(.*)$")
SCALE = {"h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
# metrics that mean the training accuracy, in the order one is taken as `accuracy` when a
# line has no metric of that name (Keras names a metric after how it was asked for)
ACCURACY_LIKE = ("sparse_categorical_accuracy", "categorical_accuracy", "binary_accuracy",
                 "sparse_top_k_categorical_accuracy", "top_k_categorical_accuracy")
VAL_ACCURACY_LIKE = tuple(f"val_{name}" for name in ACCURACY_LIKE)
PER = {"step": "seconds_per_step", "sample": "seconds_per_sample", "epoch": "seconds_per_epoch"}


# One part of a result line: a metric ("loss: 0.5"), a time per step/sample/epoch
# ("12ms/step") or a duration ("3s"). Metric parts, most of a line, are split at their
# colon and their names remembered (NAMES), which costs far less than a regex per part:
# a 200 MB log is millions of them.
NAME = re.compile(r"[A-Za-z_][\w./-]*")
TIME = re.compile(
    r"(?P<per>\d+(?:\.\d+)?)(?P<per_unit>s|ms|us|µs)/(?P<of>step|sample|epoch)"
    r"|(?P<took>\d+(?:\.\d+)?)(?P<took_unit>h|min|m|s|ms|us|µs)", re.IGNORECASE)
NAMES: dict[str, str | None] = {}  # a metric's name as printed -> as recorded (None: not one)
TIMED: set[str] = set()  # names among them that are times (seconds...), not metrics


TIMES: dict[str, tuple | bool] = {}  # a time part as printed -> parse_time's answer


def parse_time(part: str) -> tuple[str, float, float] | bool:
    """(what, seconds, resolution) of a time part: what is "took" for a duration ("3s"),
    else step, sample or epoch ("12ms/step"); False for anything else. Remembered: Keras
    prints whole units, so a long log repeats the same few hundred parts."""
    m = TIME.fullmatch(part)
    if m is None:
        found = False
    else:
        per, per_unit, of, took, took_unit = m.groups()
        if per is not None:
            found = (of, float(per) * SCALE[per_unit], SCALE[per_unit])
        else:
            found = ("took", float(took) * SCALE[took_unit], SCALE[took_unit])
    if len(TIMES) > 100_000:
        TIMES.clear()
    TIMES[part] = found
    return found


def metric_name(name: str) -> str | None:
    """A metric's name as recorded (None: not a name), remembered in NAMES (as printed,
    spaces around it included), where the caller looks first."""
    bare = name.strip()
    if len(NAMES) > 100_000:  # (a log of ever new names: bounded, as TIMES is)
        NAMES.clear()
    NAMES[name] = ALIASES.get(bare, bare) if NAME.fullmatch(bare) is not None else None
    if NAMES[name] is not None and NAMES[name].startswith("seconds"):
        TIMED.add(NAMES[name])
    return NAMES[name]


def parse_result_line(text: str, match: re.Match | None = None) -> dict | None:
    """The record of one finished-epoch line, or None for anything else (`match`:
    PROGRESS's match of the line, when the caller has it)."""
    match = match or PROGRESS.match(text)
    if not match or "ETA" in text:
        return None
    done, total, rest = match.groups()
    if total != "Unknown" and total != done and int(total) != int(done):
        return None  # a progress update that is not the end of the epoch
    record: dict = {}
    seconds_from_epoch_token = None
    metrics = 0
    recognised = True  # whether the last part was: a line cut inside a pair is unfinished
    for token in rest.split(" - "):
        if ":" in token:
            name, _, value = token.partition(":")
            canonical = NAMES.get(name, "")
            if canonical == "":
                canonical = metric_name(name)
            try:
                value = float(value)  # Keras' 0.1234, 1.2e-05, nan, inf (spaces allowed)
            except ValueError:
                value = None
            recognised = canonical is not None and value is not None
            if recognised:
                record[canonical] = value
                metrics += canonical not in TIMED
            continue
        for part in (token,) if " " not in token else token.split():
            time = TIMES.get(part)
            if time is None:
                time = parse_time(part)
            recognised = time is not False
            if not recognised:
                continue
            key, value, resolution = time
            if key == "epoch":
                seconds_from_epoch_token = (value, resolution)
            elif key == "took":
                if "seconds" not in record:
                    record["seconds"] = value
                    record["seconds_resolution"] = resolution  # Keras rounds to it
            else:
                record["unit"] = key
                record[PER[key]] = value
    if not recognised:
        return None
    if metrics < 1:
        return None  # no metric: predict()'s line, or not Keras at all
    if "seconds" not in record and seconds_from_epoch_token is None:
        return None
    if seconds_from_epoch_token is not None:  # tf-keras' ms/epoch is the precise one
        record["seconds"], record["seconds_resolution"] = seconds_from_epoch_token
    count = int(done)
    unit = record.pop("unit", "step")
    if record["seconds"] == 0:  # Keras 3's "0s": the time per step x the steps (the
        per = record.get(PER[unit])  # printed 0s stays its resolution's bound)
        if per:
            record["seconds"] = per * count
    # another accuracy's name: `accuracy` all the same
    if "accuracy" not in record:
        like = next((n for n in ACCURACY_LIKE if n in record), None)
        if like is not None:
            record["accuracy"] = record[like]
    if "val_" in rest and "val_accuracy" not in record:
        like = next((n for n in VAL_ACCURACY_LIKE if n in record), None)
        if like is not None:
            record["val_accuracy"] = record[like]
    record["steps"] = count if unit == "step" else None
    record["samples"] = count if unit == "sample" else None
    return record

