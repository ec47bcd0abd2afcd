"""Benchmarks that report throughput, not epochs: a run's images/s over all its GPUs.
Horovod's synthetic benchmarks: "Total img/sec on 2 GPU(s): 2976.1 +-4.3" (after its
warm-up, per-iteration and per-GPU lines); tf_cnn_benchmarks: "total images/sec: 1656.82"
(its per-step "images/sec:" lines are per worker and not used)."""

from __future__ import annotations

import re

from dlscale.logparse.runs import StreamFormat

NAME = "totals"
HOROVOD_TOTAL = re.compile(r"Total img/sec on (\d+) [GC]PU\(s\):\s*(\d+(?:\.\d+)?)")
TF_CNN_TOTAL = re.compile(r"^\s*total images/sec:\s*(\d+(?:\.\d+)?)\s*$")


def throughput(text: str) -> tuple[float, int | None] | None:
    """(images/s, GPUs when stated) of a benchmark's total line, or None."""
    if (m := HOROVOD_TOTAL.search(text)) is not None:
        return float(m.group(2)), int(m.group(1))
    if (m := TF_CNN_TOTAL.match(text)) is not None:
        return float(m.group(1)), None
    return None



class Reader(StreamFormat):
    """A benchmark's total line begins a run of its own (after any results)."""

    def read(self, number: int, text: str) -> bool:
        if "/sec" not in text or (total := throughput(text)) is None:
            return False
        run = self.stream.fresh_run(number)
        run.images_per_s, gpus = total
        if gpus is not None:
            run.settings["gpus"] = gpus
        return True
