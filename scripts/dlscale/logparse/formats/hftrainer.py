"""Hugging Face Trainer's console output: the dicts it logs (`{'loss': '2.303',
'grad_norm': '0.5257', 'learning_rate': '2.656e-05', 'epoch': '1'}`, and the evaluation's
`{'eval_loss': '2.307', ..., 'epoch': '1'}`) and its closing summary, the only time it
prints (`train_runtime`, `train_samples_per_second`).

A dict at epoch e (fractional where the Trainer logs every few steps) belongs to epoch
ceil(e): its `loss` is that epoch's (the last logged), `eval_loss` and `eval_accuracy`
its `val_loss` and `val_accuracy`. The summary's time is shared evenly over those epochs
(the run's `epoch_time_from` says so), its samples/s the run's logged throughput; without
logged epochs the summary is one run of that throughput, as a benchmark's total is.
"""

from __future__ import annotations

import ast
import math
import re

from dlscale.logparse.runs import StreamFormat, resolution, share_total

NAME = "hf-trainer"
TRAINER_TOTAL = ("{'train_runtime'", '{"train_runtime"')
DICT = ("{'", '{"')
EVAL = {"eval_loss": "val_loss", "eval_accuracy": "val_accuracy"}


def trainer_total(text: str) -> tuple[float, dict, int | None, float] | None:
    """A Hugging Face Trainer's closing line, the only time it prints: `{'train_runtime':
    '0.4332', 'train_samples_per_second': '1182', 'train_steps_per_second': '73.87',
    'train_loss': '2.302', 'epoch': '2'}` (numbers as text since transformers 5, as
    numbers before). (samples/s, facts, whole epochs or None, the runtime's printed
    resolution), or None."""
    try:
        found = ast.literal_eval(text.strip())
        values = {key: float(value) for key, value in found.items()}
        rate, seconds = values["train_samples_per_second"], values["train_runtime"]
    except (ValueError, SyntaxError, TypeError, KeyError, AttributeError, MemoryError):
        return None
    facts = {"train_seconds": seconds, "log_format": "hf-trainer"}
    if "train_loss" in values:
        facts["train_loss"] = values["train_loss"]
    epoch = values.get("epoch")
    return (rate, facts, int(epoch) if epoch is not None and epoch == int(epoch) else None,
            resolution(str(found["train_runtime"])))


# one `'name': value` pair of a logged dict, its number quoted (transformers 5) or not
PAIR = re.compile(r"""['"]([\w./-]+)['"]\s*:\s*['"]?"""
                  r"""(-?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf))['"]?\s*(?=[,}])""")


def logged(text: str) -> dict[str, float] | None:
    """The numbers of a Trainer's logged dict (`{'loss': '2.303', ..., 'epoch': '1'}`),
    or None for any other text; read by a regex, not as Python (a dict every few steps
    of a long training: ast would cost about 20 us a line)."""
    if not text.rstrip().endswith("}") or "'epoch'" not in text and '"epoch"' not in text:
        return None
    values = {name: float(value) for name, value in PAIR.findall(text)}
    return values if "epoch" in values else None


class Reader(StreamFormat):
    """A Trainer's logged dicts as epochs; its summary ends their run, or begins a run of
    its own (after any other results)."""

    def __init__(self, stream):
        super().__init__(stream)
        self.mine = None  # the run whose epochs the dicts gave

    def read(self, number: int, text: str) -> bool:
        text = text.lstrip()
        if not text.startswith(DICT):
            return False
        if text.startswith(TRAINER_TOTAL):
            if (summary := trainer_total(text)) is None:
                return False
            return self.summary(number, *summary)
        values = logged(text)
        if values is None or not ("loss" in values or values.keys() & EVAL):
            return False
        epoch = max(1, math.ceil(values["epoch"]))
        run = self.runs[-1]
        if self.mine is not run:
            run = self.stream.fresh_run(number)
        elif epoch < run.last:
            run = self.stream.new_run(number)  # the epoch count restarts: the next run
        self.mine = run
        record = {name: values[key] for key, name in (("loss", "loss"), *EVAL.items())
                  if key in values}
        if epoch in run.epochs:
            for name, value in record.items():
                run.epochs.set(epoch, name, value)
        else:
            run.result({"seconds": None, "steps": None, "samples": None, **record}, number,
                       epoch)
        return True

    def summary(self, number: int, rate: float, facts: dict, epochs: int | None,
                step: float) -> bool:
        run = self.runs[-1]
        if self.mine is run:
            share_total(run, facts["train_seconds"], step, "the Trainer's train_runtime",
                        number)
        else:
            run = self.stream.fresh_run(number)
        run.images_per_s = rate
        run.facts.update(facts)
        if epochs is not None:
            run.settings["epochs"] = epochs
        return True
