"""An epoch's own rate line, as the 2026 edition's chapters 11 and 12 print them
(J. Torres, "Supercomputing for AI": `train.py`, `train_ddp.py`, through Python's logging):

  [12/07/2026 07:07:11 PM] INFO - ### Total training samples (batches): 256 (16)
  [12/07/2026 07:07:14 PM] INFO - [EPOCH: 1] Training throughput: 106.518 imgs/s
  [12/07/2026 07:07:21 PM] INFO - Complete training Time: 9 s
  [12/07/2026 07:07:21 PM] INFO - Training throughput:    108 imgs/s
  [12/07/2026 07:07:21 PM] INFO - GPU memory reserved:    0 GB

Each `[EPOCH: N] Training throughput` line is epoch N, timed by its own training loop:
its time is the run's training images an epoch over its rate (the rate is the run's, over
all its GPUs: train_ddp.py multiplies the rank's batches by the world size; the samples
line is one rank's, so a run of several GPUs counts them as many times), never across a
validation or the end of the run as the lines' whole-second stamps would; its loss the
last `Loss at iteration` of the epoch (a running mean), its `Accuracy` the validation's. The run's
`Complete training Time` is its time to solution (`train_seconds`); its closing
`Training throughput` (the epochs after the first, truncated to whole images) its
`summary_images_per_s`; `GPU memory reserved` its memory in GiB (torch's reserved memory
over 2^30, printed as GB; 0 on a CPU is unknown, never 0).
"""

from __future__ import annotations

import re

from dlscale.logparse.runs import StreamFormat

NAME = "epoch-rate"
EPOCH = re.compile(r"\[EPOCH:\s*(\d+)\]\s*Training throughput:\s*([\d.]+)\s*imgs/s")
SAMPLES = re.compile(r"Total training samples \(batches\):\s*(\d+)\s*\((\d+)\)")
COMPLETE = re.compile(r"Complete training Time:\s*([\d.]+)\s*s\b")
SUMMARY = re.compile(r"(?<!\])\s-\sTraining throughput:\s*([\d.]+)\s*imgs/s")
MEMORY = re.compile(r"GPU memory reserved:\s*([\d.]+)\s*GB")
LOSS = re.compile(r"\[EPOCH:\s*(\d+)\]\s*Loss at iteration\s*\d+:\s*([\d.]+|nan|inf)")
ACCURACY = re.compile(r"\[EPOCH:\s*(\d+)\]\s*Accuracy:\s*([\d.]+)")


class Reader(StreamFormat):
    """The epochs of a run that times each by its own rate line."""

    def __init__(self, stream):
        super().__init__(stream)
        self.samples: int | None = None  # one rank's training images an epoch
        self.mine = None  # the run its epoch lines made
        self.loss: tuple[int, float] | None = None  # (epoch, its last logged loss)

    def read(self, number: int, text: str) -> bool:
        if "raining" not in text and "GPU memory" not in text and "EPOCH" not in text:
            return False  # (Training throughput, Total training, Complete training)
        if found := LOSS.search(text):
            self.loss = (int(found[1]), float(found[2]))
            return True
        if (found := ACCURACY.search(text)) and self.mine is self.runs[-1] and int(
                found[1]) in self.mine.epochs:
            self.mine.epochs.set(int(found[1]), "val_accuracy", float(found[2]))
            return True
        if found := SAMPLES.search(text):
            self.samples = int(found[1])
            return True
        if found := EPOCH.search(text):
            run = self.runs[-1]
            if self.mine is not run or int(found[1]) in run.epochs:
                run = self.stream.fresh_run(number)
            self.mine = run
            rate, epoch = float(found[2]), int(found[1])
            loss = self.loss[1] if self.loss and self.loss[0] == epoch else None
            run.result({"seconds": self.samples / rate if self.samples and rate > 0
                        else None, "steps": None, "samples": self.samples,
                        **({"loss": loss} if loss is not None else {"loss_unknown": True})},
                       number, epoch)
            run.facts["log_format"] = NAME
            return True
        if self.mine is None or self.mine is not self.runs[-1]:
            return False
        run = self.mine
        if found := COMPLETE.search(text):
            run.facts["train_seconds"] = float(found[1])
        elif found := SUMMARY.search(text):
            run.facts["summary_images_per_s"] = float(found[1])
        elif found := MEMORY.search(text):
            if float(found[1]) > 0:
                run.facts["memory_gib"] = float(found[1])
                run.facts["memory_from"] = f"GPU memory reserved (line {number})"
            else:
                run.facts["memory_note"] = (f"the log's GPU memory reserved is {found[1]} GB "
                                            f"(line {number}): no GPU counted it, unknown")
        else:
            return False
        return True

    def ended(self, run, last: bool) -> None:
        """A run of several GPUs: each epoch's images are every rank's."""
        gpus = run.settings.get("gpus")
        if run is not self.mine or not gpus or gpus < 2:
            return
        for epoch in list(run.epochs):
            row = run.epochs[epoch]
            if row.get("seconds") is not None:
                run.epochs.set(epoch, "seconds", row["seconds"] * gpus)
                run.epochs.set(epoch, "samples", (row.get("samples") or 0) * gpus)
