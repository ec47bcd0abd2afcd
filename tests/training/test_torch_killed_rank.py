"""A torch DDP point (two gloo ranks on CPUs, launched by launch.py as outside SLURM) one
of whose ranks is killed by SIGKILL while it trains: recorded `killed`, naming the rank
and the signal, where it was `failed` with the error rank 0 then hit (gloo's "Connection
reset by peer"). The same with plain processes: tests/unit/test_killed_rank.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
from conftest import SCRIPTS, TORCH_PYTHON, needs_torch

pytestmark = needs_torch


def test_a_ddp_rank_killed_while_it_trains_is_a_killed_point_naming_the_rank(small_data,
                                                                             tmp_path):
    out = tmp_path / "run"
    launch = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "launch.py"), "--plan", '{"tasks": 2}', "--record",
         str(out), "--", str(TORCH_PYTHON), str(SCRIPTS / "train.py"), "--data-dir",
         str(small_data), "--out", str(out), "--device", "cpu", "--batch-per-gpu", "4",
         "--keras", "3", "--backend", "torch", "--model", "SimpleCNN", "--gpus", "2",
         "--epochs", "50"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "state" / "epochs.jsonl").exists():  # training: both ranks joined
            assert launch.poll() is None, launch.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "no epoch finished in 300 s"
            time.sleep(0.2)
        ranks = {json.loads(p.environ()["TF_CONFIG"])["task"]["index"]: p
                 for p in psutil.Process(launch.pid).children()}
        os.kill(ranks[1].pid, signal.SIGKILL)
        said = launch.communicate(timeout=120)[0]
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "killed", (run["failure"], said[-3000:])
    assert run["failure"].startswith(
        "rank 1 of the training's 2 processes was killed by SIGKILL"), run["failure"]
    attempts = [json.loads(a) for a in (out / "attempts.jsonl").read_text().splitlines()]
    assert [a["status"] for a in attempts] == ["killed"]
