"""`dlscale status`: where each planned point of a study stands, while it runs.

Read without Snakemake and without locking anything, from
- results/plan.json, the points the last `snakemake` run planned (written when it starts);
- squeue, where SLURM is: a point's job, found by the comment the SLURM plugin gives it
  (rule_<rule>_wildcards_<point with / as _>) and the study's working directory;
- the run folders: the live epoch records (state/epochs.jsonl), the lock a training
  holds (launch.py writes its host and pid into it) and run.json.

A point is queued (its SLURM job waits: job id and SLURM's reason), running (epoch k of
N, the last epoch's time, the estimated end), completed, one of the other endings
(failed, out_of_memory, timeout, killed: with the reason), or waiting (nothing yet).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from dlscale.core.contract import (
    EPOCHS,
    PLAN,
    RUN_JSON,
    RUNS,
    STATE,
    RecordError,
    RunRecord,
    Status,
    table,
)
from dlscale.core.errors import one_line
from dlscale.core.files import read_jsonl
from dlscale.jobs import slurm
from dlscale.jobs.locks import current_holder, describe, holder_state


@dataclass
class PointStatus:
    key: str
    state: str  # waiting, queued, running, or a record's status
    detail: str = ""
    job: str | None = None
    epoch: int | None = None
    epochs: int | None = None
    last_epoch_s: float | None = None
    ends: float | None = None  # estimated, time.time() scale
    extra: dict = field(default_factory=dict)

    def line(self, width: int) -> str:
        return f"{self.key:<{width}}  {self.state:<13} {self.detail}".rstrip()


class StatusError(ValueError):
    """No plan to report on; the message says what to run."""


def read_plan(folder: Path) -> dict:
    path = folder / PLAN
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise StatusError(f"{path} does not exist: no study was started in {folder} (it is "
                          "written when `snakemake ... all` starts)") from None
    except (OSError, ValueError) as exc:
        raise StatusError(f"{path} cannot be read ({exc})") from None


# how long status waits for squeue: a controller that does not answer (a login node
# during maintenance, a configuration left behind) must not hold the listing up
SQUEUE_TIMEOUT_S = 5.0


def slurm_jobs(folder: Path, notes: list[str] | None = None) -> dict[str, dict]:
    """This user's SLURM jobs of the study in `folder`, by comment; {} without squeue.
    Why squeue gave none, when it did not answer, goes into `notes`."""
    notes = [] if notes is None else notes
    if not slurm.available():
        return {}
    try:
        listed = slurm.my_jobs(SQUEUE_TIMEOUT_S)
    except slurm.SlurmError as exc:
        notes.append(f"{exc}: SLURM's queued and running jobs are not shown")
        return {}
    jobs = {}
    here = folder.resolve()
    for entry in listed:
        job, state, reason, workdir, comment = (entry[k] for k in (
            "job", "state", "reason", "workdir", "comment"))
        try:
            same = Path(workdir).resolve() == here
        except OSError:
            same = False
        if same:
            jobs[comment] = {"job": job, "state": state, "reason": reason}
    return jobs


def job_comment(rule: str, key: str) -> str:
    """The comment the SLURM plugin gives a job of `rule` for point `key`."""
    return f"rule_{rule}_wildcards_{key.replace('/', '_')}"


def running(status: PointStatus, run: Path) -> PointStatus:
    """Fill in the epochs of a running point from its live records."""
    live = run / STATE / EPOCHS
    records = read_jsonl(live) if live.exists() else []
    if not records:
        status.detail = f"starting: no epoch of {status.epochs} finished yet"
        return status
    seconds = [r["seconds"] for r in records if "seconds" in r]
    status.epoch, status.last_epoch_s = records[-1]["epoch"], seconds[-1] if seconds else None
    if status.epochs and status.epoch >= status.epochs:
        status.detail = f"all {status.epochs} epochs done: evaluating and recording"
        return status
    timed = seconds[1:] or seconds  # the first epoch builds the graph
    if status.epochs and timed:
        status.ends = live.stat().st_mtime + (status.epochs - status.epoch) * (
            sum(timed) / len(timed))
    end = (f", ends ~{datetime.fromtimestamp(status.ends).strftime('%H:%M:%S')}"
           if status.ends else "")
    last = f", last {status.last_epoch_s:.3g} s" if status.last_epoch_s is not None else ""
    status.detail = f"epoch {status.epoch} of {status.epochs}{last}{end}"
    return status


def held(status: PointStatus, run: Path, who: dict) -> PointStatus:
    """A point whose lock a training holds, its run.json not written yet: running where
    that training runs (this host's process, or another host's job that squeue lists:
    another study's SLURM job on a node, say, named), else waiting, the holder named
    where this host cannot tell whether it runs."""
    state = holder_state(who)  # this host's by its process; another's through squeue
    if state == "live":
        status.state = "running"
        running(status, run)
        if who.get("host") != socket.gethostname():
            status.detail += f"; lock held by {describe(who)}"
    elif state == "unknown":
        status.detail = (f"lock held by {describe(who)}: whether it still runs cannot be "
                         "told from this host")
    return status


def point_status(folder: Path, point: dict, jobs: dict[str, dict]) -> PointStatus:
    key = point["key"]
    run = folder / RUNS / key
    status = PointStatus(key, "waiting", epochs=point.get("epochs"))
    job = next((jobs[c] for c in (job_comment(r, key) for r in point.get("rules", []))
                if c in jobs), None)
    if job is not None:
        status.job = job["job"]
        if job["state"] == "PENDING":
            status.state = "queued"
            status.detail = f"job {job['job']} ({job['reason']})"
            return status
        # launch.py removes the last attempt's run.json first: one there is this job's
        ending = (run / RUN_JSON).exists()
        if job["state"] in ("RUNNING", "COMPLETING", "CONFIGURING") and not ending:
            status.state = "running"
            running(status, run)
            status.detail += f" (job {job['job']})"
            return status
    if (who := current_holder(run)) and not (run / RUN_JSON).exists():
        return held(status, run, who)
    try:
        record = RunRecord.read(run / RUN_JSON)
    except RecordError:
        return status if not (run / RUN_JSON).exists() else PointStatus(
            key, Status.FAILED.value, "run.json cannot be read", epochs=point.get("epochs"))
    status.state = record["status"]
    epochs = record.get("epochs_completed")
    if record.status is Status.COMPLETED:
        status.detail = f"{epochs} epoch(s)"
    else:
        status.detail = (f"{epochs} of {record.get('epochs')} epoch(s): "
                         f"{one_line(record.get('failure') or 'no reason given')}")
    if status.job:  # recorded; its job (Snakemake's job step) is still ending
        status.detail += f" (job {status.job} ending)"
    return status


def plan_points(plan, path) -> list[dict]:
    """The plan's points; StatusError for a plan.json of another shape."""
    points = plan.get("points") if isinstance(plan, dict) else None
    if not isinstance(points, list) or not all(
            isinstance(p, dict) and isinstance(p.get("key"), str) for p in points):
        raise StatusError(f"{path} is not a plan written by dlscale (expected "
                          '{"points": [{"key": ...}, ...]}): run the study again to write it')
    return points


def study_status(folder: str | Path = ".", notes: list[str] | None = None
                 ) -> list[PointStatus]:
    """Every planned point's status; what could not be asked goes into `notes`."""
    folder = Path(folder)
    plan = read_plan(folder)
    points = plan_points(plan, folder / PLAN)
    jobs = slurm_jobs(folder, notes)
    statuses = []
    for point in points:
        try:
            statuses.append(point_status(folder, point, jobs))
        except (KeyError, TypeError, ValueError, IndexError, OSError) as exc:
            # a record of this point that cannot be read costs its line, not the listing
            statuses.append(PointStatus(point["key"], "unreadable",
                                        f"its records cannot be read ({type(exc).__name__}: "
                                        f"{exc}); see {folder / RUNS / point['key']}"))
    return statuses


def flagged(folder: Path) -> list[str]:
    """The flags of the study's last scaling table (results/tables/scaling.csv), one line
    per flagged point: what the first page lists under "Flags and verdicts"."""
    import csv

    path = folder / table("scaling")
    try:
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle))
    except (OSError, csv.Error, UnicodeDecodeError):
        return []
    return [f"flag: {row['series']}, {row['gpus']} GPU(s): {row['flags']}"
            for row in rows if (row.get("flags") or "").strip()]


def report(statuses: list[PointStatus], plan_written: str | None = None,
           flags: list[str] | None = None) -> str:
    width = max((len(s.key) for s in statuses), default=10)
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s.state] = counts.get(s.state, 0) + 1
    lines = [s.line(width) for s in statuses]
    summary = ", ".join(f"{n} {state}" for state, n in counts.items())
    lines.append(f"{len(statuses)} point(s): {summary}" + (
        f" (planned {plan_written})" if plan_written else ""))
    return "\n".join(lines + list(flags or []))


def main(folder: str, as_json: bool = False) -> int:
    try:
        plan = read_plan(Path(folder))
        notes: list[str] = []
        statuses = study_status(folder, notes)
    except StatusError as exc:
        print(f"error: {exc}")
        return 2
    text = (json.dumps([s.__dict__ for s in statuses], indent=1) if as_json
            else report(statuses, plan.get("written") if isinstance(plan, dict) else None,
                        flagged(Path(folder))))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # `dlscale status | head -1`: the reader has what it wanted; say nothing more
        # (stdout is pointed at /dev/null so Python's exit flush does not fail again)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        return 0
    return 0


TRAIN_RULE = "train"  # rules/train.smk: the one rule that trains every point


def plan_record(points: dict) -> dict:
    """results/plan.json's content: each point's key, model, GPUs, nodes, epochs and the
    rules that may train it."""
    return {"written": datetime.now().astimezone().isoformat(timespec="seconds"),
            "pid": os.getpid(), "time": time.time(),
            "points": [{"key": k, "model": p.model, "gpus": p.gpus, "nodes": p.nodes,
                        "epochs": p.epochs, "rules": [TRAIN_RULE]}
                       for k, p in points.items()]}
