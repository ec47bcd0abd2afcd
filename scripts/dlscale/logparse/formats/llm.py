"""A language model's training output: runs counted in steps and tokens, not epochs.

  [default0]:[12/07/2026 03:57:36 PM] INFO - > Training throughput:  15077.30 Tokens/s/GPU
  [default0]:[12/07/2026 03:57:36 PM] INFO - > Max reserved GPU Memory: 61.59
  [titan] ... step:  2  loss: 10.6  memory: 169.10GiB(94.81%)  tps: 9,891  mfu: 37.04%
  step 00002 (0.00%) | loss: 7.252057 | lrm: 1.00 | dt: 5.71ms | tok/sec: 22,429 | mfu: 0.00
  step=10 loss=3.22448 dt=0.28387 ... tps=1.84693e+06 tps_per_gpu=230866 mfu=46.1191

The first two are the 2026 edition's chapter 15 (`benchmark.py`: the Hugging Face
Trainer's run, its throughput per GPU computed from train_runtime, warm-up included, and
torch.cuda's peak reserved memory in GiB, which it prints as GB): the run's rate in
tokens per GPU, replacing the Trainer summary's samples/s (kept as `samples_per_s`). A
reserved memory of 0 (a CPU run: torch.cuda counted nothing) is unknown, never 0 GiB.

A step line (the word step and its counter, and a rate in tokens a second: `tps`,
`tok/sec`, `tokens/s`, `tokens per second`) makes its run a run of steps: its rate is the
mean of its steps' rates after a warm-up (the first tenth of them, at least one: the first
step compiles and allocates, as epoch 1 does), and its `steps_done` the last counter.
Whether a rate is one GPU's or the run's is read from its words (`/gpu`, `per gpu`,
`per device`) or its producer: torchtitan's `tps` is per device (its metrics.py divides
the rank's own tokens by the time); else it is the run's, and says so
(`rate_scope`). MFU and TFLOP/s where printed are facts of the run (their mean over the
same steps), not its throughput; the step line's memory (`memory: 169.10GiB`) its peak.

The model's size where a line states it (torchtitan's `size: 14,768,307,200 total
parameters`, the Trainer's `Number of trainable parameters = 1,235,814,400`) is the
`parameters` of the run that follows it (whatever format reads that run), the gradient
the prediction all-reduces; a run's `step_time_s` is its tokens a step over its rate
(torchtitan's `local batch size 160, ... sequence length 128`) or the Trainer's
1 / train_steps_per_second (hftrainer), warm-up counted as in its rate. A run
whose last step is short of the steps it was to take (torchtitan's `total steps 10`, a
counter's `step 5/100`) is unfinished, and says so (`unfinished`, a warning).
"""

from __future__ import annotations

import re

from dlscale.logparse.runs import StreamFormat

NAME = "llm"
PER_GPU_LINE = re.compile(r"Training throughput:\s*([\d.]+)\s*Tokens/s/GPU", re.IGNORECASE)
RESERVED = re.compile(r"Max reserved GPU Memory:\s*([\d.]+)", re.IGNORECASE)
STEP = re.compile(r"(?<![\w/])step[:=\s]\s*0*(\d+)\b", re.IGNORECASE)
# (the first on the line: `tps=1.84693e+06 tps_per_gpu=230866` is the run's, then a GPU's)
TOKENS = re.compile(r"\b(tps|tok/s(?:ec)?|tokens?/s(?:ec)?(?:/gpu|/device)?|tokens per second"
                    r"(?: per (?:gpu|device))?|tokens_per_sec(?:ond)?(?:_per_(?:gpu|device))?)"
                    r"\s*[:=]?\s*(\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?)", re.IGNORECASE)
PER_GPU_WORDS = re.compile(r"gpu|device", re.IGNORECASE)
MFU = re.compile(r"\bmfu\s*[:=]?\s*([\d.]+)\s*%?", re.IGNORECASE)
TFLOPS = re.compile(r"\btflops\s*[:=]?\s*([\d.]+)", re.IGNORECASE)
STEP_MEMORY = re.compile(r"\bmemory\s*[:=]\s*([\d.]+)\s*GiB", re.IGNORECASE)
# (a model has thousands of parameters at least: "3 parameters groups" is no model's size;
# nanoGPT's `number of parameters: 85.00M` is rounded, its `num decayed parameter tensors:
# 50, with 85,771,008 parameters` a group's: the run's size is the first exact count)
PARAMETERS = re.compile(r"(\d{1,3}(?:,\d{3})+|\d{4,})\s+(?:total |trainable )?parameters\b"
                        r"|(?:number of "
                        r"(?:trainable )?parameters|num_params)\s*[:=]\s*(\d[\d,]*(?:\.\d+)?)"
                        r"\s*([KMB]\b)?", re.IGNORECASE)
SCALE = {"k": 1e3, "m": 1e6, "b": 1e9}
BATCHES = re.compile(r"local batch size (\d+), global batch size (\d+)\b.*?"
                     r"sequence length (\d+)", re.IGNORECASE)
# the steps a run was to take: torchtitan's `total steps 10`, a counter's `step 5/100`
TOTAL_STEPS = re.compile(r"total steps (\d+)", re.IGNORECASE)
STEP_OF = re.compile(r"step[:\s]\s*\d+\s*/\s*(\d+)", re.IGNORECASE)
# producers whose tokens/s is one GPU's though their words do not say so
PER_DEVICE_PRODUCERS = (("[titan]", "torchtitan's tps is per device"),)


def number(text: str) -> float:
    return float(text.replace(",", ""))


class Reader(StreamFormat):
    """Chapter 15's lines on the run they follow; step lines gathered into a run of
    steps, its rate settled at the stream's end (`ended`)."""

    def __init__(self, stream):
        super().__init__(stream)
        self.run = None  # the run of step lines, and its steps: (counter, rate, mfu, ...)
        self.steps: list[tuple[int, float, float | None, float | None, float | None]] = []
        self.scope: tuple[bool, str] | None = None  # (per GPU, why) of the step lines
        self.pending: dict = {}  # what lines before a run said of it (PARAMETERS, BATCHES)
        self.exact = False  # its parameters stated exactly (not `85.00M`)
        self.batches: tuple[int, int] | None = None  # tokens a step: (one GPU's, the run's)
        self.total: int | None = None  # the steps the run was to take, where said

    def read(self, number_: int, text: str) -> bool:
        if "ok" not in text and "tps" not in text and "Memory" not in text:
            return ("aram" in text or "sequence length" in text) and self.model(text)
        if found := PER_GPU_LINE.search(text):
            run = self.runs[-1] if self.runs[-1].rate is not None else (
                self.stream.fresh_run(number_))
            if run.rate is not None and run.unit != "tokens":
                run.facts["samples_per_s"] = run.rate  # the Trainer's summary
            run.rate, run.unit, run.per_gpu = number(found[1]), "tokens", True
            run.facts.update(self.pending)
            run.facts["rate_scope"] = "per GPU: its line says Tokens/s/GPU"
            run.facts["rate_from"] = f"{text.strip()[-120:]!r} (line {number_})"
            return True
        if found := RESERVED.search(text):
            gb = number(found[1])
            run = self.runs[-1]
            if gb > 0:
                run.facts["memory_gib"] = gb
                run.facts["memory_from"] = f"max reserved (line {number_})"
            else:
                run.facts["memory_note"] = (f"the log's max reserved memory is {found[1]} "
                                            f"(line {number_}): no GPU counted it, unknown")
            return True
        if (step := STEP.search(text)) and (rate := TOKENS.search(text)):
            if self.run is None:
                self.run = self.stream.fresh_run(number_)
                words = rate[1]
                producer = next((why for mark, why in PER_DEVICE_PRODUCERS if mark in text),
                                None)
                self.scope = ((True, f"per GPU: its line says {words}")
                              if PER_GPU_WORDS.search(words) else (True, producer) if producer
                              else (False, f"the run's: {words} says no GPU"))
            if of := STEP_OF.search(text):
                self.total = int(of[1])
            mfu, tflops, memory = (MFU.search(text), TFLOPS.search(text),
                                   STEP_MEMORY.search(text))
            self.steps.append((int(step[1]), number(rate[2]),
                               float(mfu[1]) if mfu else None,
                               float(tflops[1]) if tflops else None,
                               float(memory[1]) if memory else None))
            return True
        return False

    def ended(self, run, last: bool) -> None:
        if run is self.run and self.steps:
            self.steps_ended(run)
        if self.pending and (run.rate is not None or run.epochs):  # (a Trainer's run, say)
            for key, value in self.pending.items():
                run.facts.setdefault(key, value)
            self.pending, self.exact = {}, False  # stated before this run: not the next's

    def steps_ended(self, run) -> None:
        """The run of step lines: its steady rate, steps, MFU, memory."""
        steps, self.run = self.steps, None
        skip = max(1, len(steps) // 10) if len(steps) > 1 else 0
        steady = steps[skip:]
        run.rate = round(sum(s[1] for s in steady) / len(steady), 6)
        run.unit, run.per_gpu = "tokens", self.scope[0]
        run.facts.update(self.pending)
        if self.batches and run.rate > 0:  # one GPU's tokens over one GPU's rate
            run.facts["step_time_s"] = round(self.batches[not run.per_gpu] / run.rate, 9)
        run.facts.update({"steps_done": steps[-1][0], "steps_skipped": skip,
                          "rate_scope": self.scope[1], "log_format": NAME,
                          "rate_from": f"the mean tokens/s of steps {steady[0][0]} to "
                                       f"{steady[-1][0]} (the first {skip} a warm-up)"})
        if self.total and steps[-1][0] < self.total:  # cancelled, or it crashed
            run.facts["unfinished"] = (f"its steps stopped at {steps[-1][0]} of the "
                                       f"{self.total} it was to take")
            run.warnings.append(f"{self.stream.path}: the run of steps is unfinished: "
                                f"{run.facts['unfinished']}")
        self.total = None
        for index, name in ((2, "mfu_percent"), (3, "tflops")):
            values = [s[index] for s in steady if s[index] is not None]
            if values:
                run.facts[name] = round(sum(values) / len(values), 4)
        memory = [s[4] for s in steps if s[4] is not None]
        if memory:
            run.facts["memory_gib"] = round(max(memory), 3)
            run.facts["memory_from"] = "the step lines' memory (GiB), its peak"
        self.steps = []

    def model(self, text: str) -> bool:
        """A line that states the model's size or the tokens of a step, kept for the run
        the lines after it make (PARAMETERS, BATCHES)."""
        if found := PARAMETERS.search(text):
            if "parameter tensors" in text or self.exact:
                return True  # a group's count, or the size already stated exactly
            self.exact = found[3] is None and "." not in (found[2] or "")
            self.pending["parameters"] = int(number(found[1] or found[2])
                                             * SCALE.get((found[3] or "").lower(), 1))
            return True
        if found := BATCHES.search(text):
            local, total, length = (int(g) for g in found.groups())
            self.batches = (local * length, total * length)
            if steps := TOTAL_STEPS.search(text):
                self.total = int(steps[1])
            return True
        return False
