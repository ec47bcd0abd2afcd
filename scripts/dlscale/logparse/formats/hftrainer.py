"""Hugging Face Trainer's console output: the dicts it logs (`{'loss': '2.303',
'grad_norm': '0.5257', 'learning_rate': '2.656e-05', 'epoch': '1'}`, and the evaluation's
`{'eval_loss': '2.307', ..., 'epoch': '1'}`) and its closing summary, the only time it
prints (`train_runtime`, `train_samples_per_second`).

A dict at epoch e (fractional where the Trainer logs every few steps) belongs to epoch
ceil(e): its `loss` is that epoch's (the last logged), `eval_loss` and `eval_accuracy`
its `val_loss` and `val_accuracy`. The summary's time is shared evenly over those epochs
(the run's `epoch_time_from` says so), its samples/s the run's logged throughput; without
logged epochs the summary is one run of that throughput, as a benchmark's total is.

An epoch is finished by a dict at its end (`'epoch': 1.0`), a later epoch's, or the
summary; a run without the summary never finished: cut, the epoch it stopped inside
(cancelled at step 394 of 1000) never an epoch. The same summary printed by every node
(each node's Trainer prints its own; a launcher's `host: ` before it) is one run, the
copies and their hosts noted, what differs between them a warning. Dicts that carry no
`'epoch'` are not read: the run says so, and how to give a pattern.

A summary at an epoch under 1 (`max_steps` ended the training inside its first pass over
the data) closes a run of steps, not an epoch: its dicts' losses are no epoch's, its
`steps_done` the banner's `Total optimization steps = 200`. With
`include_num_input_tokens_seen` every dict carries `num_input_tokens_seen` (the tokens of
every rank, gathered) and `train_runtime` (since the training began): the run's rate is
then tokens/s, the run's own (not a GPU's), steady: the tokens between its dicts over the
time between them, the first tenth of the intervals from the start (at least one: the
first steps allocate and warm up) left out; with fewer than two dicts, the summary's
tokens over its runtime. Its `step_time_s` is then a step's tokens over that rate.
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
SEEN = "num_input_tokens_seen"
PLANNED = re.compile(r"Total optimization steps = ([\d,]+)")  # the banner at log_level info


def trainer_total(text: str) -> tuple[float, dict, dict, float] | None:
    """A Hugging Face Trainer's closing line, the only time it prints: `{'train_runtime':
    '0.4332', 'train_samples_per_second': '1182', 'train_steps_per_second': '73.87',
    'train_loss': '2.302', 'epoch': '2'}` (numbers as text since transformers 5, as
    numbers before). (samples/s, facts, all its numbers, the runtime's printed
    resolution), or None."""
    try:
        found = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError):  # a raw nan: read by pairs
        found = dict(PAIR.findall(text))
    try:
        values = {key: float(value) for key, value in found.items()}
        rate, seconds = values["train_samples_per_second"], values["train_runtime"]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    facts = {"train_seconds": seconds, "log_format": "hf-trainer"}
    if values.get("train_steps_per_second", 0) > 0:  # its step, warm-up included as its rate
        facts["step_time_s"] = round(1 / values["train_steps_per_second"], 9)
    if "train_loss" in values:
        facts["train_loss"] = values["train_loss"]
    return rate, facts, values, resolution(str(found["train_runtime"]))


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
        self.reached = 0.0  # the last dict's epoch (fractional)
        self.summed = None  # the run the last summary gave: (run, its text, its hosts)
        self.unread = 0  # dicts with a loss and no 'epoch'
        self.seen: list[tuple[float, float, int]] = []  # (tokens seen, runtime, line)
        self.planned: int | None = None  # the steps the banner says the training takes

    def read(self, number: int, text: str) -> bool:
        text = text.lstrip()
        if not text.startswith(DICT):
            if "optimization steps" in text and (found := PLANNED.search(text)):
                self.planned = int(found[1].replace(",", ""))
                return True
            at = text.find(TRAINER_TOTAL[0]) if "train_runtime" in text else -1
            if at <= 0 or (summary := trainer_total(text[at:])) is None:
                return False
            return self.summary(number, *summary, text[at:], text[:at].strip(" :|"))
        if text.startswith(TRAINER_TOTAL):
            if (summary := trainer_total(text)) is None:
                return False
            return self.summary(number, *summary, text.strip(), "")
        values = logged(text)
        if values is None:
            self.unread += "loss" in text and "epoch" not in text
            return False
        if not ("loss" in values or values.keys() & EVAL):
            return False
        epoch = max(1, math.ceil(values["epoch"]))
        run = self.runs[-1]
        if self.mine is not run:
            run = self.stream.fresh_run(number)
        elif epoch < run.last:
            run = self.stream.new_run(number)  # the epoch count restarts: the next run
        self.mine = run
        if SEEN in values and "train_runtime" in values:
            self.seen.append((values[SEEN], values["train_runtime"], number))
        # (a Trainer prints Python's dicts; JSON lines of another tool have no summary)
        self.reached = values["epoch"] if text.startswith("{'") else math.inf
        record = {name: values[key] for key, name in (("loss", "loss"), *EVAL.items())
                  if key in values}
        if epoch in run.epochs:
            for name, value in record.items():
                run.epochs.set(epoch, name, value)
        else:
            run.result({"seconds": None, "steps": None, "samples": None, **record}, number,
                       epoch)
        return True

    def summary(self, number: int, rate: float, facts: dict, values: dict,
                step: float, text: str = "", host: str = "") -> bool:
        run = self.runs[-1]
        if self.summed is not None and self.summed[0] is run and (
                text == self.summed[1] or host and host not in self.summed[2]):
            return self.copy(run, text, host, number)  # another node's, not another run
        if self.mine is run:
            share_total(run, facts["train_seconds"], step, "the Trainer's train_runtime",
                        number)
            self.reached = math.inf  # its epochs finished
        else:
            run = self.stream.fresh_run(number)
            if self.unread:
                run.warnings.append(
                    f"{self.stream.path}:{number}: the Trainer's summary read as a "
                    f"benchmark's total ({rate:g} samples/s): {self.unread} logged dict(s) "
                    "with a loss carry no 'epoch', so no epoch was read; give "
                    "external_runs[].patterns (epoch_time, loss) to read them")
        run.rate = rate
        run.facts.update(facts)
        epoch = values.get("epoch")
        if epoch is not None and epoch == int(epoch):
            run.settings["epochs"] = int(epoch)
        elif epoch is not None and epoch < 1:  # max_steps ended it inside its first pass
            self.steps_run(run)
        if SEEN in values:
            self.tokens(run, values[SEEN], values["train_runtime"], number)
        self.summed = (run, text, [host or "?"])
        return True

    def steps_run(self, run) -> None:
        """A run that never finished a pass over its data: its dicts' losses are no
        epoch's; its steps the banner's."""
        run.epochs, run.last = type(run.epochs)(), 0
        run.facts.pop("epoch_time_from", None)
        if self.planned is not None:
            run.facts["steps_done"] = self.planned

    def tokens(self, run, tokens: float, seconds: float, number: int) -> None:
        """The run's tokens/s from what its dicts and summary saw (SEEN): steady where two
        dicts or more time it, the first tenth of their intervals a warm-up."""
        seen, self.seen = self.seen, []
        run.facts["samples_per_s"] = run.rate
        run.unit, run.per_gpu = "tokens", False
        run.facts["rate_scope"] = (f"the run's: the Trainer's {SEEN} sums every rank's "
                                   "tokens")
        skip = max(1, len(seen) // 10)
        if len(seen) >= 2 and seen[-1][1] > seen[skip - 1][1]:
            (tokens0, time0, line0), (tokens1, time1, line1) = seen[skip - 1], seen[-1]
            run.rate = round((tokens1 - tokens0) / (time1 - time0), 6)
            run.facts["rate_from"] = (f"the tokens seen between its logged dicts of lines "
                                      f"{line0} and {line1} over their train_runtime "
                                      f"({time0:g} to {time1:g} s; the first {skip} of "
                                      f"{len(seen)} intervals a warm-up)")
        elif seconds > 0:
            run.rate = round(tokens / seconds, 6)
            run.facts["rate_from"] = (f"the summary's {SEEN} over its train_runtime (line "
                                      f"{number}; its warm-up included)")
        if run.facts.get("steps_done") and run.rate:  # a step's tokens over the same rate
            run.facts["step_time_s"] = round(tokens / run.facts["steps_done"] / run.rate, 9)

    def copy(self, run, text: str, host: str, number: int) -> bool:
        """The same summary from another node: counted once, its host noted."""
        _run, first, hosts = self.summed
        hosts.append(host or "?")
        run.facts["summary_copies"] = len(hosts)
        if any(name != "?" for name in hosts):
            run.facts["summary_hosts"] = " ".join(hosts)
        if text != first:
            run.warnings.append(f"{self.stream.path}:{number}: the Trainer's summary from "
                                f"{host or 'another node'} differs from the first one's "
                                f"({text[:200]} against {first[:200]}): the first is kept")
        return True

    def ended(self, run, last: bool) -> None:
        """A run whose Trainer printed no train_runtime never finished: the epoch it stopped
        inside is not finished (those before it are), and the run says so."""
        if run is self.mine:
            self.seen = []  # (its tokens: read at its summary)
        if self.mine is not run or not run.epochs or self.reached == math.inf:
            return
        table, epoch = run.epochs, run.last
        run.cut, run.cut_epoch = True, epoch + (self.reached >= epoch)
        if self.reached < epoch and len(table) == 1:
            run.epochs = type(table)()  # its only epoch: none finished
        elif self.reached < epoch:
            kept = type(table)()
            for number, row in table.items():
                if number != epoch:
                    kept.add(number, {k: v for k, v in row.items() if k != "epoch"},
                             table.lines[table.index[number]])
            run.epochs = kept
        run.last = max(run.epochs, default=0)
        said = run.facts.get("unfinished")  # (SLURM's cancel line, formats.stated)
        run.facts["unfinished"] = (f"the Trainer stopped at epoch {self.reached:g} and "
                                   "printed no train_runtime" + (f"; {said}" if said else ""))
