"""A study planned from config sections; the published study's epochs from its own logs;
a run folder as train.py leaves it."""

from __future__ import annotations

import copy
import json
import shlex
import sys

import pandas as pd
import parse_logs
from conftest import ROOT

from dlscale.core.contract import RunRecord, Status
from dlscale.core.schema import validate
from dlscale.logparse.lines import read_text
from dlscale.logparse.reader import parse_text
from dlscale.plan.study import Study

STUDY = ROOT / "tests" / "data" / "reference-study"


def study(tmp_path, **sections) -> Study:
    config = copy.deepcopy(sections)
    validate(config)
    return Study(config, tmp_path)


def data(**keys) -> dict:
    config = {"data": keys}
    validate(config)
    return config["data"]


def study_epochs() -> pd.DataFrame:
    """The published study's epochs (tests/data/reference-study: 1, 2 and 4 GPUs)."""
    rows = []
    for gpus in (1, 2, 4):
        log = STUDY / f"ResNet50_{gpus}gpu.out"
        parsed = parse_text(read_text(log), str(log))
        rows += parse_logs.table(parsed, {"run": f"ref{gpus}", "model": "ResNet50V2",
                                          "gpus": gpus, "images_per_epoch": 50000,
                                          "global_batch": 256 * gpus, "source": "external"})
    return pd.DataFrame(rows)


def completed_run(folder, epochs: list[dict], log: str):
    """A run folder as train.py leaves it: run.json, epochs.jsonl, train.log."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.log").write_text(log)
    (folder / "epochs.jsonl").write_text("".join(json.dumps(e) + "\n" for e in epochs))
    record = RunRecord.ending(Status.COMPLETED, None, model="M", replicas=1, gpus_asked=1,
                              nodes=1, global_batch=4, images_per_epoch=16, epochs=len(epochs),
                              epochs_completed=len(epochs), test_accuracy=0.5)
    (folder / "run.json").write_text(json.dumps(record))
    return folder


LOG = ("Epoch 1/2\n4/4 - 1s - loss: 2.0 - accuracy: 0.2 - 900ms/epoch - 225ms/step\n"
       "Epoch 2/2\n4/4 - 0s - loss: 1.5 - accuracy: 0.4 - 400ms/epoch - 100ms/step\n")
EPOCHS = [{"epoch": 1, "seconds": 0.88, "lr": 0.01, "loss": 2.01234, "accuracy": 0.1875,
           "images": 16},
          {"epoch": 2, "seconds": 0.41, "lr": 0.01, "loss": 1.49876, "accuracy": 0.4375,
           "images": 16}]


def torch_python(root, torch: bool = True):
    """An interpreter where torch.python's default names it (planning checks it is there
    and finds torch): this python, with an empty `torch` package on its path."""
    python = root / ".venv-torch" / "bin" / "python"
    python.parent.mkdir(parents=True)
    if torch:
        (root / "stub" / "torch").mkdir(parents=True)
        (root / "stub" / "torch" / "__init__.py").write_text("")
    python.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(root / 'stub'))} "
                      f"exec {shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    return python
