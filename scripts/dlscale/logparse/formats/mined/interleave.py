"""How a mined epoch line's rows become runs where one file holds several at once: the
epoch lines of independent runs printed into one file side by side (two jobs' `Epoch k
took: ...` interleaved), told apart by their counters' sequence (formats.mined)."""

from __future__ import annotations

import re

from dlscale.logparse.templates import Template

STEP_WORD = re.compile(r"\b(?:step|iter|iteration|batch|it)\W{0,3}$", re.IGNORECASE)


def interleaved(template: Template, values) -> list[list[list]] | None:
    """The runs of epoch lines from several independent runs printed into one file (two
    jobs' `Epoch k took: ...` side by side): each row goes to the run it continues (its
    counter one more than that run's last), else (its counter the first one) begins a
    run; a row that repeats a run's last epoch with the same numbers is a copy. None
    unless the rows split into 2 to 4 runs whose counters each rise by one: per-step
    lines (many a counter value) and copies stay as they are read."""
    if any(k == "n" and STEP_WORD.search(lit) for k, lit in zip(template.kinds,
                                                                 template.literals)):
        return None  # `Epoch 1 step 3 ...`: an epoch's steps, not runs
    numbers = [c for k, c in zip(template.kinds, template.columns) if k in "np"]
    first = min(values, default=0)
    runs: list[list[list]] = []
    for row, value in enumerate(values):
        same = next((r for r in runs if r[-1][0] == value and all(
            c[r[-1][1]] == c[row] for c in numbers)), None)
        if same is not None:
            same[-1][2] = row  # a copy
            continue
        after = next((r for r in runs if r[-1][0] == value - 1), None)
        if after is not None:
            after.append([value, row, row])
        elif value == first:
            runs.append([[value, row, row]])
        else:
            return None
    if not 2 <= len(runs) <= 4:
        return None
    return sorted(runs, key=lambda run: run[0][1])
