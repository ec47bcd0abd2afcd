"""PyTorch Lightning's Rich progress bar (its default where `rich` is installed) as a file
keeps it: the bar does not redraw where the output is not a terminal and prints its last
state alone at the end, the last epoch's, its metrics wrapped over the lines below:

  Epoch 1/1  ━━━━━━━━━━━━━━━━━━━━ 8/8 0:00:00 • 0:00:00 214.54it/s train_loss_step:
                                                                2.351 val_loss:
                                                                2.302 val_acc: ...

`Epoch k/N` counts from 0 (the last of N + 1 epochs is `Epoch N/N`): that one epoch is
read, its time its steps over the rate, its metrics as a bar's (runs.logged_metrics),
with a warning that the file holds no epoch before it (tests/data/pytorch).
"""

from __future__ import annotations

import re

from dlscale.logparse.runs import StreamFormat, bar_record, logged_metrics

NAME = "rich"
STATE = re.compile(r"^Epoch (\d+)/(\d+)\s+[━╸╺─\s]*?(\d+)/(\d+)\s+\d+:\d\d:\d\d\s*•\s*\S+\s+"
                   r"(\d+(?:\.\d+)?)(it/s|s/it)\s*(.*)$")
PAIR = re.compile(r"([A-Za-z_][\w./-]*):\s*(-?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|nan|inf))")
WRAPPED = " " * 20  # the indent of a state's wrapped metrics


class Reader(StreamFormat):
    """The Rich bar's state and the metric lines wrapped below it, in one stream."""

    def __init__(self, stream):
        super().__init__(stream)
        self.pending: list | None = None  # [epoch, total, record, line, metric texts]

    def read(self, number: int, text: str) -> bool:
        if self.pending is not None:
            if text.startswith(WRAPPED) and text.strip():
                self.pending[4].append(text.strip())
                return True
            self.flush()
        if not text.startswith("Epoch ") or "•" not in text or (m := STATE.match(text)) is None:
            return False
        epoch, last, done, steps, rate, unit, rest = m.groups()
        if done != steps or float(rate) == 0:
            return True  # a state before the epoch's end: nothing to read
        record = bar_record(int(done), float(rate), unit)
        self.pending = [int(epoch) + 1, int(last) + 1, record, number, [rest.strip()]]
        return True

    def flush(self) -> None:
        if self.pending is None:
            return
        epoch, total, record, number, texts = self.pending
        self.pending = None
        record.update(logged_metrics(PAIR.findall(" ".join(texts))))
        if "loss" not in record:
            record["loss_unknown"] = True
        run = self.runs[-1]
        if run.epochs:
            run = self.stream.new_run(number)
        run.epochs_total = total
        run.result(record, number, epoch)
        if epoch > 1:
            run.warnings.append(
                f"{run.path}:{number}: Lightning's Rich progress bar leaves only its last "
                f"state in a file: epoch {epoch} of {total} is read alone (Lightning's "
                "TQDMProgressBar, or a line a epoch, gives every epoch)")
