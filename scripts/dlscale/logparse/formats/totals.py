"""Totals a run prints: a benchmark's throughput, or the run's total time.

Benchmarks that report throughput, not epochs: a run's images/s over all its GPUs.
Horovod's synthetic benchmarks: "Total img/sec on 2 GPU(s): 2976.1 +-4.3" (after its
warm-up, per-iteration and per-GPU lines); tf_cnn_benchmarks: "total images/sec: 1656.82"
(its per-step "images/sec:" lines are per worker and not used). A total printed again by
another rank or node with no line any format reads between the two (each rank's own
figures, a script that prints on every rank) and the same GPUs stated is a copy: the run
is counted once, the first copy its rate, the copies noted (`summary_copies`) and a copy
that differs said. A second run's total follows its own settings (`Number of GPUs:`),
which begin that run.

A run's total time (`Total time: 2.27s`, `elapsed time: 95.2sec`, `Training time
0:05:12`, `Total training time: 312.4 seconds`, the FSDP tutorial's `CUDA event elapsed
time: 7.0sec`), after epochs whose lines give no time (PyTorch's examples print none):
shared evenly over those epochs, and the run's `epoch_time_from` says so; `Average time per
epoch: 12.3s` gives each its time. Where the epochs have times of their own, the line is
left alone; where no epoch was read yet (a script's own epoch lines, formats.mined, are
read at the stream's end), the total waits in the stream's `totals`.
"""

from __future__ import annotations

import re

from dlscale.logparse.runs import StreamFormat, resolution, share_total

NAME = "totals"
HOROVOD_TOTAL = re.compile(r"Total img/sec on (\d+) [GC]PU\(s\):\s*(\d+(?:\.\d+)?)")
TF_CNN_TOTAL = re.compile(r"^\s*total images/sec:\s*(\d+(?:\.\d+)?)\s*$")
RUN_TIME = re.compile(r"^\s*(?:total(?: training)? time|training time|(?:cuda event )?elapsed time|"
                      r"time elapsed|(average) time per epoch)"
                      r"\s*[:=]?\s*(?:(\d+):(\d\d):(\d\d(?:\.\d+)?)|(\d+(?:\.\d+)?)\s*"
                      r"(s|secs?|seconds|min|minutes|h|hours)?)\s*$", re.IGNORECASE)
UNIT = {"min": 60.0, "minutes": 60.0, "h": 3600.0, "hours": 3600.0}


def throughput(text: str) -> tuple[float, int | None] | None:
    """(images/s, GPUs when stated) of a benchmark's total line, or None."""
    if (m := HOROVOD_TOTAL.search(text)) is not None:
        return float(m.group(2)), int(m.group(1))
    if (m := TF_CNN_TOTAL.match(text)) is not None:
        return float(m.group(1)), None
    return None


def run_time(text: str) -> tuple[float, float, bool] | None:
    """(seconds, the resolution printed, whether an epoch's average) of a run's total
    time line, or None."""
    m = RUN_TIME.match(text)
    if m is None:
        return None
    average, hours, minutes, secs, value, unit = m.groups()
    if hours is not None:
        found = int(hours) * 3600 + int(minutes) * 60 + float(secs), resolution(secs)
    else:
        scale = UNIT.get((unit or "s").lower(), 1.0)
        found = float(value) * scale, resolution(value) * scale
    return (*found, average is not None)


class Reader(StreamFormat):
    """A benchmark's total line begins a run of its own (after any results), or is a copy
    of the last one's; a run's total time gives its epochs without a time their share."""

    def __init__(self, stream):
        super().__init__(stream)
        self.last = None  # the last total: (its run, line, images/s, GPUs)

    def read(self, number: int, text: str) -> bool:
        if "ime" in text and (found := run_time(text)) is not None:
            self.stream.flush()  # an epoch still open (no test line ended it) ends here
            seconds, step, average = found
            what = "the run's total time"
            if average:  # each epoch's: the run's total is that many times it
                count = len(self.runs[-1].epochs)
                seconds, step = seconds * count, step * count
                what = f"the run's average time per epoch ({found[0]:g} s) times its epochs"
            if share_total(self.runs[-1], seconds, step, what, number):
                return True
            self.stream.totals.append((number, *found[:2], average))
            return False
        if "/sec" not in text or (total := throughput(text)) is None:
            return False
        if (last := self.last) is not None and last[0] is self.runs[-1] and (
                self.stream.read_at == last[1] and total[1] == last[3]):
            return self.copy(last, number, total[0])
        run = self.stream.fresh_run(number)
        run.rate, gpus = total
        if gpus is not None:
            run.settings["gpus"] = gpus
        self.last = (run, number, total[0], gpus)
        return True

    def copy(self, last: tuple, number: int, rate: float) -> bool:
        """Another rank's or node's copy of the last total: counted once, noted."""
        run, _line, first, gpus = last
        self.last = (run, number, first, gpus)
        run.facts["summary_copies"] = run.facts.get("summary_copies", 1) + 1
        if rate != first:
            run.warnings.append(f"{self.stream.path}:{number}: another copy of the run's "
                                f"total ({rate:g} images/s) differs from the first's "
                                f"({first:g}): each rank's own figures; the first is kept")
        return True
