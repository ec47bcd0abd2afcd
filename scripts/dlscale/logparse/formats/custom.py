"""The user's result patterns (JUBE/ReFrame style, `patterns:` of a log in the config): a
custom loop's epoch line (its seconds, and the loss and accuracy on the same line) and a
benchmark's total images/s, each a regex with one group. Offered each line before the
built-in formats; their setting patterns are read with the stated settings."""

from __future__ import annotations

from dlscale.logparse.runs import RESULT_PATTERNS, StreamFormat

NAME = "patterns"


class Reader(StreamFormat):
    """What the user's result patterns read from one stream's lines."""

    @classmethod
    def wanted(cls, patterns: dict | None) -> bool:
        return bool(patterns) and any(key in patterns for key in RESULT_PATTERNS)

    def read(self, number: int, text: str) -> bool:
        record = self.custom(number, text)
        if record is None:
            return False
        stream = self.stream
        if isinstance(record, float):
            stream.fresh_run(number).rate = record
        else:
            stream.runs[-1].result(record, number)
        return True

    def custom(self, number: int, text: str) -> dict | float | None:
        """An epoch's record, a run's images/s, or None."""
        found = {}
        stream = self.stream
        for key in RESULT_PATTERNS:
            regex = stream.patterns.get(key)
            if regex is not None and (m := regex.search(text)) is not None:
                try:
                    found[key] = float(m.group(1))
                except (TypeError, ValueError):
                    stream.runs[-1].warnings.append(
                        f"{stream.path}:{number}: pattern {key} matched {m.group(1)!r}, "
                        "which is not a number: ignored")
        if "epoch_time" in found:
            return {"seconds": found["epoch_time"], "loss": found.get("loss"),
                    "accuracy": found.get("accuracy"), "steps": None, "samples": None,
                    "loss_unknown": "loss" not in found}  # not logged, not NaN
        return found.get("images_per_s")
