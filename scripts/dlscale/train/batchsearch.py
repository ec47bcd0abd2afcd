"""The search behind `batch_per_gpu: auto`: the largest per-GPU batch that trains.

Pure logic: `trial(batch) -> bool` says whether a few training steps with that batch
ran (False: out of memory). find_batch_size.py runs each trial in its own process, so
that an out-of-memory error cannot poison the next one; the tests drive the search
with a stand-in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class SearchResult:
    largest_ok: int | None          # largest batch that trained
    smallest_failed: int | None     # smallest batch that did not
    chosen: int | None              # largest_ok with the safety margin applied
    trials: list[tuple[int, bool]] = field(default_factory=list)


def search(trial: Callable[[int], bool], start: int = 16, maximum: int = 8192,
           resolution: float = 0.05, margin: float = 0.9, multiple: int = 8) -> SearchResult:
    """Double from `start` until a trial fails (or `maximum` passes), then bisect between
    the last success and the first failure until they are within `resolution`
    (relative). The chosen batch is `margin` x the largest success, rounded down to a
    multiple of `multiple` (at least 1): memory use varies between runs, and a batch
    right at the limit would fail some of the time.
    """
    if start < 1 or maximum < start:
        raise ValueError(f"need 1 <= start <= maximum, got start={start}, maximum={maximum}")
    trials: list[tuple[int, bool]] = []

    def run(batch: int) -> bool:
        ok = bool(trial(batch))
        trials.append((batch, ok))
        return ok

    good, bad = None, None
    batch = start
    while True:
        if run(batch):
            good = batch
            if batch >= maximum:
                break
            batch = min(batch * 2, maximum)
        else:
            bad = batch
            break
    if good is None:  # even `start` failed: try smaller ones down to 1
        batch = start // 2
        while batch >= 1:
            if run(batch):
                good = batch
                break
            bad = batch
            batch //= 2
        if good is None:
            return SearchResult(None, bad, None, trials)
    while bad is not None and bad - good > max(1, resolution * good):
        middle = (good + bad) // 2
        if run(middle):
            good = middle
        else:
            bad = middle
    chosen = max(1, int(good * margin) // multiple * multiple) if good >= multiple else \
        max(1, int(good * margin))
    return SearchResult(good, bad, chosen, trials)
