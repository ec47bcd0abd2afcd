"""Settings a log states, in any format's company: the echoed command line
(`--batch_size 64 --epochs 10 --gpus 4`), `Num_replicas: 2`, `Batch_size: 4096`, `Model
ResNet50 2 GPUs`, TensorFlow's `Using MirroredStrategy with devices (...)`, `Number of
devices: 4`, Horovod's size, Lightning's `Starting with 2 processes`, and the user's
setting patterns; and what a script prints after evaluate() (`Test accuracy: 0.87`).

torch's warning that it disabled autocast (no CUDA) is a note of the run's
(`precision_note`): its precision asked for was not applied. The same setting stated again
after a run's results begins the next run. SLURM's end of a
job or step it cancelled (`slurmstepd: error: *** JOB 123 ON n1 CANCELLED AT ... DUE TO
TIME LIMIT ***`) leaves the run unfinished: its epoch in progress cut, the reason kept.
"""

from __future__ import annotations

import re

from dlscale.logparse.lines import ANSI
from dlscale.logparse.runs import ALIASES, RESULT_PATTERNS, StreamFormat, job_gpus

NAME = "stated"
# the Hugging Face Trainer's banner (log_level info): `Total train batch size (w. parallel,
# distributed & accumulation) = 4`, `Instantaneous batch size per device = 2`, `Gradient
# Accumulation steps = 1`: its processes are the first over the other two
TRAINER_TOTAL = r"Total train batch size \(w\. parallel, distributed & accumulation\) = "
# setting -> patterns with one group (the value); the same setting stated again after a
# run's epochs begins the next run. batch_per_gpu from the command line is the study's
# --batch_size (per GPU); Batch_size: in a header is the global batch.
SETTINGS: dict[str, list[re.Pattern]] = {
    "gpus": [re.compile(r"--(?:n_gpus|num_gpus|gpus)[= ](\d+)\b"),
             re.compile(r"^\s*Num_replicas:\s*(\d+)\s*$"),
             re.compile(r"^\s*Model\s+\S+\s+(\d+)\s+GPUs?\b"),
             re.compile(r"Number of devices:\s*(\d+)"),
             re.compile(r"^\s*Number of [GC]PUs:\s*(\d+)\s*$"),  # Horovod's benchmark
             re.compile(r"\b[Hh]orovod size:?\s*(\d+)"),
             re.compile(r"\bhvd\.size\(\)\s*[:=]\s*(\d+)"),
             # PyTorch Lightning's rank 0: "All distributed processes registered.
             # Starting with 2 processes"
             re.compile(r"processes registered\. Starting with (\d+) processes")],
    "global_batch": [re.compile(r"^\s*Batch_size:\s*(\d+)\s*$"),
                     re.compile(r"^\s*Batch size:\s*(\d+) global\s*$"),  # tf_cnn_benchmarks
                     re.compile(TRAINER_TOTAL + r"([\d,]+)\s*$")],
    "batch_per_gpu": [re.compile(r"--batch[_-]size[= ](\d+)\b"),
                      re.compile(r"^\s*Batch size:\s*(\d+)\s*$"),  # Horovod's benchmark
                      re.compile(r"Instantaneous batch size per device = ([\d,]+)\s*$")],
    "epochs": [re.compile(r"--epochs[= ](\d+)\b")],
    # (no column: with the batches, the processes of a Trainer's banner; job_gpus)
    "accumulation": [re.compile(r"Gradient Accumulation steps = ([\d,]+)\s*$")],
}
MIRRORED = re.compile(r"Using MirroredStrategy with devices \((.*)\)")
DEVICES = re.compile(r"^\s*Devices:\s*\[(.*)\]\s*$")  # tf_cnn_benchmarks' header
# what a script prints after evaluate(): "Test accuracy: 0.87", "test loss = 0.41"
TEST_PRINT = re.compile(r"^\s*test[ _](loss|accuracy|acc)\s*[:=]\s*"
                        r"(-?(?:nan|inf|\d+(?:\.\d+)?(?:e[-+]?\d+)?))\s*(%?)\s*$",
                        re.IGNORECASE)


# torch's warning where autocast(device_type="cuda") finds no CUDA (2.x's words, then
# 1.x's): the run trains in float32 whatever precision its flags ask for
AUTOCAST_OFF = re.compile(r"CUDA is not available or torch_xla is imported\. Disabling "
                          r"autocast|device_type of 'cuda', but CUDA is not available\. "
                          r"Disabling")


CANCELLED = re.compile(r"\*\*\* (?:JOB|STEP) (\S+) ON (\S+) CANCELLED AT (\S+)"
                       r"(?: DUE TO ([A-Z ]+?))?(?: \*\*\*|$)")


# Every line that SETTINGS or MIRRORED can match holds one of these: most lines are
# looked at once, not once per pattern.
SETTINGS_HINT = re.compile(r"--|_replicas|Model|devices|orovod size|hvd\.size|Batch_size|"
                           r"MirroredStrategy|Number of|Batch size|Devices:|Starting with|"
                           r"batch size|Accumulation steps")


def settings_in(line: str, patterns: dict | None = None, warn=None) -> dict[str, int]:
    """The run settings a line states, as integers; a user pattern whose group matched
    something that is not a number is said through `warn(message)`, not dropped silently."""
    found = {}
    if SETTINGS_HINT.search(line) is not None:
        for key, regexes in SETTINGS.items():
            for regex in regexes:
                if (m := regex.search(line)) is not None:
                    found[key] = int(m.group(1).replace(",", ""))
                    break
        if (m := MIRRORED.search(line) or DEVICES.match(line)) is not None:
            # the devices of one worker: the job's count only where nothing states that
            # (`job_gpus`), since each worker of a multi-worker job prints its own
            found["devices"] = len(re.findall(r"'[^']*'|\"[^\"]*\"", m.group(1)))
    for key, regex in (patterns or {}).items():
        if key in RESULT_PATTERNS:
            continue
        if (m := regex.search(line)) is not None:
            try:
                found[key] = int(float(m.group(1)))
            except (TypeError, ValueError):
                if warn is not None:
                    warn(f"pattern {key} matched {m.group(1)!r}, which is not a number: "
                         "ignored")
    return found


def settings_sequence(text: str, patterns: dict[str, re.Pattern] | None = None
                      ) -> list[dict[str, int]]:
    """Settings per run from a file that holds only them (a job's .err): a setting
    stated again begins the next run's."""
    runs: list[dict[str, int]] = [{}]
    for line in ANSI.sub("", text).splitlines():
        for key, value in settings_in(line, patterns).items():
            if key in runs[-1]:
                runs.append({})
            runs[-1][key] = value
    return [job_gpus(run) for run in (runs if runs[-1] else runs[:-1])]


class Reader(StreamFormat):
    """Settings and test prints of one stream."""

    def read(self, number: int, text: str) -> bool:
        stream = self.stream
        warn = None if not stream.patterns else (
            lambda message, at=number:
            stream.runs[-1].warnings.append(f"{stream.path}:{at}: {message}"))
        if found := settings_in(text, stream.patterns, warn):
            stream.fresh_run(number).settings.update(found)
            stream.stated.append((number, found))  # (for epochs read at the stream's end)
            return True
        run = stream.runs[-1]
        if "Disabling" in text and (m := AUTOCAST_OFF.search(text)) is not None:
            if "precision_note" not in run.facts:
                run.facts["precision_note"] = (
                    f"torch disabled autocast (line {number}: {m[0]}): the run trained in "
                    "float32 whatever precision it asked for")
                run.warnings.append(f"{stream.path}:{number}: {run.facts['precision_note']}")
            return True
        if "CANCELLED" in text and (m := CANCELLED.search(text)) is not None:
            stream.flush()  # what was pending is finished; the epoch after it is not
            run.cut, run.cut_epoch = True, run.last + 1
            run.facts["unfinished"] = (f"SLURM cancelled {m[1]} at {m[3]}"
                                       + (f" due to {m[4].lower()}" if m[4] else ""))
            return True
        if (run.epochs or run.lanes) and (printed := TEST_PRINT.match(text)) is not None:
            name, value = printed.group(1).lower(), float(printed.group(2))
            run.test[f"test_{ALIASES.get(name, name)}"] = value / (100 if printed.group(3)
                                                                   else 1)
            return True
        return False
