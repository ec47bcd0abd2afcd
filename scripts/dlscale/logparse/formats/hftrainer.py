"""Hugging Face Trainer's console output: its closing summary, the only time it prints
(`train_runtime`, `train_samples_per_second`)."""

from __future__ import annotations

import ast

from dlscale.logparse.runs import StreamFormat

NAME = "hf-trainer"
TRAINER_TOTAL = ("{'train_runtime'", '{"train_runtime"')


def trainer_total(text: str) -> tuple[float, dict, int | None] | None:
    """A Hugging Face Trainer's closing line, the only time it prints: `{'train_runtime':
    '0.4332', 'train_samples_per_second': '1182', 'train_steps_per_second': '73.87',
    'train_loss': '2.302', 'epoch': '2'}` (numbers as text since transformers 5, as
    numbers before). (samples/s, facts, whole epochs or None), or None."""
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
    return rate, facts, int(epoch) if epoch is not None and epoch == int(epoch) else None



class Reader(StreamFormat):
    """A Trainer's summary begins a run of its own (after any results)."""

    def read(self, number: int, text: str) -> bool:
        if not text.startswith(TRAINER_TOTAL) or (summary := trainer_total(text)) is None:
            return False
        run = self.stream.fresh_run(number)
        run.images_per_s, facts, epochs = summary
        run.facts.update(facts)
        if epochs is not None:
            run.settings["epochs"] = epochs
        return True
