"""How failed points are planned again, from the attempts a run folder keeps.

A point's outputs (run.json, epochs.jsonl, train.log) are Snakemake's: it removes them
before it reruns the point. So every attempt also appends one line to the run folder's
`attempts.jsonl` (dlscale.core.contract), which is no rule's output: the history of a point
survives its reruns.

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

import os
from pathlib import Path

from dlscale.core.contract import RUN_JSON, RecordError, RunRecord, Status, read_attempts
from dlscale.jobs import slurm

# the endings that are a point's result: planned again only when its settings change
RESULTS = (Status.COMPLETED, Status.OUT_OF_MEMORY)


def planned_attempt(run_dir: str | Path, attempts: list[dict] | None = None) -> int:
    """1 + the failed attempts so far: it grows only when an attempt fails, so a point
    that failed is planned again and one that completed stays done. A point whose last
    attempt completed, or ran out of memory (a result: the same settings run out of it
    again), keeps the number that attempt ran with: a job that SLURM requeued (killed,
    then completed under the same number) is not planned again."""
    attempts = read_attempts(run_dir) if attempts is None else attempts
    if attempts and attempts[-1].get("status") in RESULTS and isinstance(
            attempts[-1].get("attempt"), int):
        return attempts[-1]["attempt"]
    # inside a job that SLURM requeued, the attempts this job made before are its own:
    # the job step plans the same attempt as the Snakemake that submitted it
    job = os.environ.get("SLURM_JOB_ID")
    own = [a for a in attempts if job and a.get("slurm_job_id") == job]
    requeued = bool(own) and slurm.restarts(job) > 0
    return 1 + sum(a.get("status") not in RESULTS and not (requeued and a in own)
                   for a in attempts)


def runtime_factor(run_dir: str | Path, attempts: list[dict] | None = None) -> int:
    """1 + the timeouts since the point last completed."""
    factor = 1
    for attempt in read_attempts(run_dir) if attempts is None else attempts:
        factor = 1 if attempt.get("status") == Status.COMPLETED else factor + (
            attempt.get("status") == Status.TIMEOUT)
    return factor


def failed_record(run_dir: str | Path) -> RunRecord | None:
    """The run record of a point whose last attempt did not complete, or None (none yet,
    or one that cannot be read: the rule that tabulates the run names it)."""
    path = Path(run_dir) / RUN_JSON
    if not path.exists():
        return None
    try:
        record = RunRecord.read(path)
    except RecordError:
        return None
    return record if record.status is not Status.COMPLETED else None
