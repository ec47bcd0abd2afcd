"""tqdm's epoch bars, as PyTorch Lightning draws them (and training loops that name
their bar `Epoch k/N`), read as epochs:

  Epoch 0: 100%|██████████| 8/8 [00:00<00:00, 105.31it/s, train_loss_step=2.300,
      val_loss=2.300, val_acc=0.125, train_loss_epoch=2.320]

A bar redraws itself through carriage returns (under `torchrun --tee` each redraw is a
line of its own); an epoch's result is the bar's last state at 100% before the next
epoch's bar begins or the log ends, validation included. Its time is the steps over
tqdm's rate: Lightning's bar is not smoothed, so the rate is steps over the elapsed
time, printed to 0.01 (the elapsed `00:00` is whole seconds). Lightning counts epochs
from 0 (`Epoch 0`); a bar named `Epoch k/N` counts from 1 and states N. The metrics in
its postfix: `*_epoch` before `*_step`, `train_` dropped, `acc` read as accuracy;
`v_num` (Lightning 1.x's version, the job ID under SLURM) is no metric.

Lightning 1.x ends an epoch with several 100% states (after training, after
validation, with the epoch's means), and a callback's print can follow a state on its
line or cut it short: the epoch's last finished state gives its time, and each metric its
last value in any of them. Tests: tests/unit/test_pytorch_logs.py, on real captures
(tests/data/pytorch; tests/data/lightning-slurm, a SLURM job of two nodes).
"""

from __future__ import annotations

import re

from dlscale.logparse.runs import StreamFormat, bar_record, logged_metrics

NAME = "tqdm"
# a bar's state: the epoch (and N), its percent, the steps done of all, the rate, postfix
BAR = re.compile(r"^Epoch (\d+)(?:/(\d+))?:\s+(\d+)%\|[^|]*\|\s*(\d+)/(\d+|\?)\s*"
                 r"\[[^\],]*(?:,\s*(\d+(?:\.\d+)?)(it/s|s/it))?(?:,\s*([^\]]*))?")
TIMES = ("seconds", "seconds_resolution", "seconds_per_step", "steps", "samples")


def bar_state(text: str) -> tuple[int, int | None, dict | None] | None:
    """(epoch counted from 1, epochs in all or None, the epoch's record when the bar is at
    100% with a rate, else None) of a bar's state; None for any other text."""
    m = BAR.match(text)
    if m is None:
        return None
    epoch, total, percent, done, steps, rate, unit, postfix = m.groups()
    epoch = int(epoch) + (0 if total else 1)
    total = int(total) if total else None
    if percent != "100" or done != steps or rate is None or float(rate) == 0:
        return epoch, total, None
    record = bar_record(int(done), float(rate), unit)
    record.update(metrics(postfix or ""))
    if "loss" not in record:
        record["loss_unknown"] = True
    return epoch, total, record


def metrics(postfix: str) -> dict[str, float]:
    """The metrics of a bar's postfix (`train_loss_step=2.3, val_acc=0.125, v_num=0`)."""
    pairs = (pair.strip().partition("=") for pair in postfix.split(","))
    return logged_metrics((name, value) for name, equals, value in pairs if equals)


class Reader(StreamFormat):
    """The epoch bars of one stream: an epoch's result is its bar's last state at 100%,
    kept until another epoch's bar begins or the stream ends."""

    REDRAWN = True

    def __init__(self, stream):
        super().__init__(stream)
        self.pending: tuple | None = None  # a bar's epoch: (epoch, of, record, line)

    def read(self, number: int, text: str) -> bool:
        if not text.startswith("Epoch ") or "%|" not in text:
            return False
        if (state := bar_state(text)) is None:
            return True
        epoch, total, record = state
        if self.pending is not None and self.pending[0] != epoch:
            self.flush()
        if record is not None:
            if self.pending is not None:  # the same epoch's earlier state: its metrics
                earlier = self.pending[2]   # stay where this one lacks them
                record = {**{k: v for k, v in earlier.items()
                             if k not in TIMES and k != "loss_unknown"}, **record}
                if "loss" in record:
                    record.pop("loss_unknown", None)
            self.pending = (epoch, total, record, number)
        return True

    def flush(self) -> None:
        if self.pending is None:
            return
        epoch, total, record, number = self.pending
        self.pending = None
        stream = self.stream
        run = stream.runs[-1]
        if run.epochs.index and (epoch == 1 or total != run.epochs_total):
            run = stream.new_run(number)  # the epoch count restarts: the next run
        run.epochs_total = total
        run.result(record, number, epoch)
