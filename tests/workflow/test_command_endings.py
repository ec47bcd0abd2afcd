"""Your command's every ending, through `snakemake --profile profiles/local`: the row and
reason the user then sees, the exit status, what the next run reruns, and that no process
of a point outlives it (tests/configs/command-endings.yaml)."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pandas as pd
import psutil
import pytest
from conftest import ROOT, dlscale_status, run_snakemake, start_snakemake

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]
ENDINGS = f"--configfile={ROOT / 'tests' / 'configs' / 'command-endings.yaml'}"


def left_running(*marks: str) -> list[str]:
    """The command lines of the processes still running that hold one of `marks`."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if any(mark in line for mark in marks) and "pytest" not in line:
            found.append(line)
    return found


def tracebacks(workdir) -> list[str]:
    """The files of the study (job logs, Snakemake's own) that hold a Python traceback."""
    return [str(p) for folder in ("logs", ".snakemake/log") for p in (workdir / folder).rglob("*")
            if p.is_file() and "Traceback" in p.read_text(errors="replace")]


def wait_for(condition, what: str, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not condition():
        if time.time() > deadline:
            raise AssertionError(f"{what}: not seen in {timeout} s")
        time.sleep(0.1)


def test_every_ending_of_a_command_is_its_own_row_and_nothing_outlives_its_point(tmp_path):
    study = start_snakemake(tmp_path, *PROFILE, ENDINGS)
    # a running command is followed epoch by epoch, as dlscale's own training is
    live = tmp_path / "results/runs/forever/gpus1/rep1/state/epochs.jsonl"
    wait_for(lambda: live.exists() and live.read_text().count("\n") == 1, "forever's epoch 1")
    assert re.search(r"^forever/gpus1/rep1\s+running\s+epoch 1 of 2, last 1 s",
                     dlscale_status(tmp_path), re.M)
    output, _ = study.communicate(timeout=600)
    assert study.returncode != 0, output[-5000:]  # check_points: the study failed

    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("series")
    assert runs["status"].to_dict() == {
        "no_newline": "completed", "background": "completed", "cleaner": "completed",
        "header": "completed", "sigkill": "killed", "nan_loss": "failed",
        "inf_time": "failed", "fewer": "failed", "escapes": "failed", "forever": "timeout"}
    # the last line without a newline, the background child's, the cleaned folder's and
    # the one whose pattern matches its own text: every epoch printed, no other
    assert runs.loc[["no_newline", "background", "cleaner", "header"], "epochs_done"].tolist() \
        == [2, 2, 2, 2]
    assert (tmp_path / "results/runs/cleaner/gpus1/rep1/out/model.keras").exists()
    problems = runs["problem"].to_dict()
    assert problems["sigkill"].startswith("killed: the command was killed by SIGKILL (the "
                                          "kernel's or SLURM's out-of-memory killer sends it)")
    assert problems["nan_loss"].startswith("failed: the loss became NaN or infinite at epoch 1")
    assert problems["inf_time"].startswith("failed: epoch 1's time is inf s")
    assert problems["fewer"].startswith("failed: the command exited 0 after 1 of the 2 epochs "
                                        "planned")
    assert "its last lines: \\x1b]0;pwned\\x07no data here" in problems["escapes"]
    assert problems["forever"].startswith("timeout: still running 20 s before the job's time "
                                          "limit (inside epoch 2)")
    assert runs.loc["forever", "epochs_done"] == 1  # what it finished is kept
    for name in ("runs", "failed", "scaling"):  # no control character reaches a table
        assert "\x1b" not in (tmp_path / f"results/tables/{name}.csv").read_text()
    # a command point describes its system as dlscale's own points do
    assert runs["system_cpu_model"].notna().all()
    background = json.loads((tmp_path / "results/runs/background/gpus1/rep1/run.json")
                            .read_text())
    assert background["job_s"] < 30  # ended with the command, not with the child (3141 s)
    assert "left 1 process(es) running when it exited: they were ended" in " ".join(
        background["notes"])
    # stored once: the kept copy of a completed record is the same file
    run = tmp_path / "results/runs/no_newline/gpus1/rep1"
    for name in ("train.log", "epochs.jsonl"):
        assert os.path.samefile(run / name, run / "completed" / name)
    assert not (run / "train.log").read_text().startswith("dlscale command:")

    assert left_running("sleep 3141", "sleep 3142") == []
    assert tracebacks(tmp_path) == []

    # the next run reruns the points that did not complete, and only them
    dry = run_snakemake(tmp_path, *PROFILE, ENDINGS, "-n")
    stats = dry.stdout.split("Job stats:")[1].split("total")[0]
    assert [line.split() for line in stats.splitlines() if line.startswith("train")] == [
        ["train", "6"]]


def kill_tree(pid: int) -> None:
    """SIGKILL a process and everything below it, its own session's included."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=30)


def test_ctrl_c_stops_a_command_and_says_so(tmp_path):
    """Ctrl-C in the terminal (SIGINT to Snakemake's whole process group) while a command
    runs that ignores SIGTERM: the point is recorded as stopped by SIGINT, nothing of it
    keeps running, and no log holds a traceback."""
    config = tmp_path / "c.yaml"
    config.write_text("""
sweep:
  models: []
  gpus: [1]
  commands:
    stubborn: >-
      echo 'Epoch 1/{epochs}'; echo '1/1 - 1s - loss: 0.5 - accuracy: 0.5';
      trap '' TERM INT; sleep 3143
training: {epochs: 2, batch_per_gpu: 4, device: cpu}
resources: {cpus_per_gpu: 1, mem_mb_per_gpu: 500, runtime_min: 10}
""")
    study = start_snakemake(tmp_path, *PROFILE, f"--configfile={config}", new_session=True)
    live = tmp_path / "results/runs/stubborn/gpus1/rep1/state/epochs.jsonl"
    try:
        wait_for(lambda: live.exists() and live.read_text().count("\n") == 1,
                 "stubborn's epoch 1")
    except BaseException:
        # the study is not stopped by this test's Ctrl-C: end it here, so that nothing
        # of it outlives the test (its sleep ignores SIGTERM)
        kill_tree(study.pid)
        raise
    os.killpg(study.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
    output, _ = study.communicate(timeout=120)
    assert study.returncode != 0
    attempts = (tmp_path / "results/runs/stubborn/gpus1/rep1/attempts.jsonl").read_text()
    last = json.loads(attempts.splitlines()[-1])
    assert (last["status"], last["epochs_completed"]) == ("killed", 1)
    assert last["failure"].startswith("stopped by SIGINT (Ctrl-C")
    assert left_running("sleep 3143") == []
    assert tracebacks(tmp_path) == [], output[-3000:]
