"""The output of PyTorch's own examples (pytorch/examples' mnist/main.py and the many
scripts written after it), read as epochs:

  Train Epoch: 1 [640/60000 (1%)]	Loss: 2.301693
  Test set: Average loss: 0.0634, Accuracy: 9799/10000 (98%)

An epoch is finished by its `Test set:` line (its loss and accuracy are the epoch's
validation), or else by the next epoch's first `Train Epoch:` line or the stream's end;
its training loss is the last one printed, its images the dataset's size the lines give.
These scripts print no epoch's time: a run total they print (formats.totals) is shared
over the epochs, and the tables say so. `Train Epoch: 1` after finished epochs begins the
next run.
"""

from __future__ import annotations

import re

from dlscale.logparse.runs import StreamFormat

NAME = "pytorch-examples"
# `Loss: 2.3` as the examples print it, `loss=2.3` as some of their successors do
TRAIN = re.compile(r"^\s*Train Epoch:\s*(\d+)\s*\[\s*(\d+)\s*/\s*(\d+)[^\]]*\]\s*"
                   r"(?:Loss:\s*|loss\s*=\s*)(-?(?:nan|inf|\d+(?:\.\d+)?(?:e[-+]?\d+)?))",
                   re.IGNORECASE)
TEST = re.compile(r"^\s*Test set: Average loss:\s*(-?(?:nan|inf|\d+(?:\.\d+)?(?:e[-+]?\d+)?))"
                  r"\s*,\s*Accuracy:\s*(\d+)\s*/\s*(\d+)", re.IGNORECASE)


class Reader(StreamFormat):
    """The examples' lines of one stream."""

    def __init__(self, stream):
        super().__init__(stream)
        self.open: list | None = None  # the epoch being trained: [epoch, loss, images, line]

    def read(self, number: int, text: str) -> bool:
        if "Epoch" in text and (m := TRAIN.match(text)) is not None:
            epoch, images, loss = int(m[1]), int(m[3]), float(m[4])
            if self.open is not None and self.open[0] != epoch:
                self.close(None)
            if self.open is None:
                run = self.runs[-1]
                if run.epochs and epoch <= run.last:
                    self.stream.new_run(number)  # the epoch count restarts: the next run
            self.open = [epoch, loss, images, number]
            return True
        if "Test set" in text and (m := TEST.match(text)) is not None:
            if self.open is None:
                return False  # a test before any training: not an epoch's
            self.open[3] = number
            self.close({"val_loss": float(m[1]), "val_accuracy": int(m[2]) / int(m[3])})
            return True
        return False

    def close(self, validation: dict | None) -> None:
        epoch, loss, images, number = self.open
        self.open = None
        record = {"seconds": None, "loss": loss, "steps": None, "samples": images,
                  **(validation or {})}
        self.runs[-1].result(record, number, epoch)

    def flush(self) -> None:
        if self.open is not None:
            self.close(None)
