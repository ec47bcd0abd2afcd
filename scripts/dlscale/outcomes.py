"""What became of a training point, kept where Snakemake never deletes it.

A point's outputs (run.json, epochs.jsonl, train.log) are Snakemake's: it removes them
before it reruns the point. So every attempt also appends one line to the run folder's
`attempts.jsonl`, which is no rule's output: the history of a point survives its reruns.

How failures flow (docs: README "When a point fails"):
- The job records the outcome in run.json, whatever it is, and exits 0, so Snakemake
  keeps the record and the tables, plots and report are built with the failed point
  listed; `check_points` then ends the workflow with a non-zero status.
- At the next invocation the train rule's `attempt` param (`planned_attempt`) is one
  more than the failed attempts recorded, which differs from the value the failed
  attempt ran with: Snakemake plans exactly the failed points again (also in a dry run).
- A point that stopped at its time limit gets its runtime multiplied by
  1 + the timeouts since it last completed (`runtime_factor`).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from dlscale.files import append_jsonl, atomic, read_jsonl, write_json_atomic

ATTEMPTS = "attempts.jsonl"
STATE = "state"  # the run's working state: live records, backup, settings
COMPLETED = "completed"
# status -> what it means; run.json's `failure` says why in the run's own words
STATUSES = {
    COMPLETED: "every epoch trained and the model evaluated",
    "failed": "train.py stopped with an error (NaN loss, devices not as asked, bad settings, "
              "a crash)",
    "out_of_memory": "the batch did not fit in the device's memory",
    "timeout": "stopped at an epoch boundary before the job's time limit",
    "killed": "the training process was ended by a signal",
}
# train.py's exit status per outcome (0 completed; 2 bad flags; 3 devices; 4 NaN; 6 OOM)
EXIT_STATUS = {COMPLETED: 0, "failed": 4, "out_of_memory": 6, "timeout": 7, "killed": 8}


def read_attempts(run_dir: str | Path) -> list[dict]:
    return read_jsonl(Path(run_dir) / ATTEMPTS, after_a_bad_line="skip")  # each stands alone


def append_attempt(run_dir: str | Path, info: dict) -> None:
    keys = ("status", "failure", "epochs_completed", "epochs", "started", "finished",
            "attempt", "slurm_job_id")
    env = info.get("env") or {}
    line = {k: info.get(k) for k in keys}
    line["slurm_job_id"] = line["slurm_job_id"] or env.get("SLURM_JOB_ID")
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    append_jsonl(Path(run_dir) / ATTEMPTS, line)


def planned_attempt(run_dir: str | Path) -> int:
    """1 + the failed attempts so far: it grows only when an attempt fails, so a point
    that failed is planned again and one that completed stays done."""
    return 1 + sum(a.get("status") != COMPLETED for a in read_attempts(run_dir))


def runtime_factor(run_dir: str | Path) -> int:
    """1 + the timeouts since the point last completed."""
    factor = 1
    for attempt in read_attempts(run_dir):
        factor = 1 if attempt.get("status") == COMPLETED else factor + (
            attempt.get("status") == "timeout")
    return factor


def failed_record(run_dir: str | Path) -> dict | None:
    """The run.json of a point whose last attempt failed, or None."""
    path = Path(run_dir) / "run.json"
    try:
        run = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return run if run.get("status") != COMPLETED else None


def write_outcome(out: str | Path, info: dict) -> None:
    """Move the records into place, run.json last, and add the attempt to the history;
    drop the state of a completed run (a failed one keeps it, to resume from)."""
    out = Path(out)
    state = out / STATE
    sys.stdout.flush()
    for name in ("epochs.jsonl", "train.log"):
        with atomic(out / name) as tmp:
            if (state / name).exists():
                shutil.copyfile(state / name, tmp)
            else:  # the run ended before its first epoch began
                tmp.write_text("")
    write_json_atomic(out / "run.json", info)
    append_attempt(out, info)
    if info["status"] == COMPLETED:
        shutil.rmtree(state, ignore_errors=True)
