"""The run contract: every file name, folder, status and run.json key, written once.

A training point's run folder (`results/runs/<point>/`) holds
- run.json: the run record, written by `RunRecord.write` only (train.py and
  run_command.py at every end they see, the launcher when the training died without one)
  and read by `RunRecord.read` only;
- epochs.jsonl: one JSON object per finished epoch, written by the epoch recorder; the
  tables are built from these two files;
- train.log: what Keras printed, kept for people and parsed as a cross-check that warns;
- attempts.jsonl: one line per attempt (no rule's output, so it survives reruns);
  every record carries the job's `phases`, its `job_s` and `overhead_s` (phases.finish);
- state/: the live records and the backup a rerun resumes from.

Every ending (completed, failed, out_of_memory, timeout, killed) carries the keys in
`REQUIRED`, so the tables can list any point; a record that lacks one, or whose
`record_version` is not this one, is a `RecordError` naming the file and the key.
"""

from __future__ import annotations

import json
import shutil
import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from dlscale.core.files import (
    append_jsonl,
    atomic,
    link_or_copy,
    read_jsonl,
    write_json_atomic,
    write_jsonl_atomic,
)

# --- names -------------------------------------------------------------------------------
RUN_JSON = "run.json"
EPOCHS = "epochs.jsonl"
TRAIN_LOG = "train.log"
# NCCL_DEBUG=INFO's output of a GPU point over several nodes, one file per host and process
NCCL_DEBUG_FILE = "nccl.%h.%p.log"
NCCL_DEBUG_FILES = "nccl.*.log"
ATTEMPTS = "attempts.jsonl"
STATE = "state"  # the run's working state: live records, backup, settings
SETTINGS = "settings.json"  # in STATE: what a backup was made with
TELEMETRY = "telemetry.csv"
LOCK = ".lock"  # the launcher's lock while a point trains; names its holder (dlscale.jobs.locks)
LOCK_HELD = ".lock.held"  # the lock where flock is not to be had (O_EXCL)
MANIFEST = "manifest.json"  # a prepared dataset's: its shards, classes and sizes
MODEL_FILE = "model.keras"  # a completed run's saved model (training.save_model)
TENSORBOARD = "tensorboard"  # its event files and profiler traces
BREAKDOWN = "breakdown.json"  # the profiled window's split of steps and the all-reduce's times
TRACE = "trace"  # the profiled window's raw trace, kept only with analysis.keep_traces
COMMAND_OUT = "out"  # a sweep.commands point's {out_dir}: the command's own files
RUN_TABLE = "epochs.csv"  # a run's (or an external log's) per-epoch table
# the last completed record (run.json, epochs.jsonl, train.log; hard links, not copies),
# kept until the next completed one replaces it: Snakemake deletes a job's outputs
# before it reruns it
KEPT = "completed"
KEPT_FILES = (EPOCHS, TRAIN_LOG, RUN_JSON)  # what KEPT holds, run.json last
# in KEPT: the record completed after the Snakemake that started its job was gone (killed
# on a workstation): the next job of the point keeps it, unless the rerun is forced
UNATTENDED = "unattended.json"

# --- layout (relative to the working directory; the rules use these too) -----------------
RESULTS = "results"
RUNS = f"{RESULTS}/runs"
EXTERNAL = f"{RESULTS}/external"
TABLES = f"{RESULTS}/tables"
PLOTS = f"{RESULTS}/plots"
CHECKS = f"{RESULTS}/checks"
BATCH = f"{RESULTS}/batch"
# JAX's persistent compilation cache, shared by a study's Keras 3 JAX points
# (training.compile_cache)
COMPILE_CACHE = f"{RESULTS}/compile_cache"
DATA = f"{RESULTS}/data"
DOWNLOADS = "resources/downloads"
NETWORK = f"{RESULTS}/network"  # the probes of the link between nodes (dlscale.train.probe)
PLAN = f"{RESULTS}/plan.json"  # the points the last snakemake run planned (dlscale status)
REPORT_PAGE = f"{RESULTS}/report/first-page.rst"  # the report's first page (firstpage.py)
# what planning found in external logs, read again by the rule that tabulates each (and by
# later runs and SLURM's job steps, which plan again) while the log is unchanged; beside
# Snakemake's own state, so that `snakemake -n` leaves results/ as it was
PARSED = ".snakemake/dlscale/parsed"


def run_dir(key: str) -> str:
    return f"{RUNS}/{key}"


def table(name: str) -> str:
    """A study table, e.g. table('scaling') -> results/tables/scaling.csv."""
    return f"{TABLES}/{name}.csv"


# --- statuses ----------------------------------------------------------------------------
class Status(StrEnum):
    """How a point's attempt ended; run.json's `failure` says why in its own words."""

    COMPLETED = "completed"  # every epoch trained and the model evaluated
    FAILED = "failed"  # an error: NaN loss, devices not as asked, bad settings, a crash
    OUT_OF_MEMORY = "out_of_memory"  # the batch did not fit in the device's memory
    TIMEOUT = "timeout"  # stopped at an epoch boundary before the job's time limit
    KILLED = "killed"  # the training process was ended by a signal


# train.py's exit status per ending it records itself (2 bad flags, 3 devices not as asked)
EXIT_STATUS = {Status.COMPLETED: 0, Status.FAILED: 4, Status.OUT_OF_MEMORY: 6,
               Status.TIMEOUT: 7}

# --- the record --------------------------------------------------------------------------
RECORD_VERSION = 1
# what every ending holds (None where the run never got that far): the tables need them
REQUIRED = ("record_version", "status", "failure", "model", "gpus_asked", "replicas", "nodes",
            "strategy", "precision", "batch_per_gpu", "global_batch", "images_per_epoch",
            "epochs", "epochs_completed", "test_accuracy", "attempt", "host", "env", "started",
            "finished", "notes")


class RecordError(ValueError):
    """A run record that cannot be read or does not hold what the contract says."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class RunRecord(dict):
    """run.json as a dict whose keys are checked: built by `ending`, written by `write`,
    read back by `read`."""

    @classmethod
    def ending(cls, status: Status, failure: str | None, *layers: dict, **facts) -> RunRecord:
        """A record of `status` with the keys in REQUIRED (None unless given): the
        `layers` of facts merged in order (a later one wins), then `facts`."""
        record = cls(dict.fromkeys(REQUIRED))
        for layer in (*layers, facts):
            record.update(layer)
        record.update(record_version=RECORD_VERSION, status=Status(status).value,
                      failure=failure)
        record["notes"] = list(record["notes"] or [])
        record["finished"] = record["finished"] or now()
        return record

    @property
    def status(self) -> Status:
        return Status(self["status"])

    def check(self, where: str | Path) -> RunRecord:
        missing = [k for k in REQUIRED if k not in self]
        if missing:
            raise RecordError(f"{where} lacks the key(s) {', '.join(missing)}: expected a "
                              f"run record of version {RECORD_VERSION} (written by train.py "
                              "or launch.py)")
        if self["record_version"] != RECORD_VERSION:
            raise RecordError(f"{where}: record_version {self['record_version']!r}, expected "
                              f"{RECORD_VERSION}: it was written by another dlscale; train "
                              "the point again")
        try:
            Status(self["status"])
        except ValueError:
            raise RecordError(f"{where}: status {self['status']!r} is not one of "
                              f"{', '.join(s.value for s in Status)}") from None
        return self

    @classmethod
    def read(cls, path: str | Path) -> RunRecord:
        path = Path(path)
        try:
            data = json.loads(path.read_bytes())
        except OSError as exc:
            raise RecordError(f"{path} cannot be read ({exc.strerror or exc})") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RecordError(f"{path} is not a JSON run record ({exc})") from None
        if not isinstance(data, dict):
            raise RecordError(f"{path} is not a JSON object: expected a run record")
        if "record_version" not in data and "status" in data:
            # written before records had a version (dlscale 0.1 up to this contract): the
            # same keys, fewer of them; a finished point is not trained again for that
            data = {**dict.fromkeys(REQUIRED), **data, "record_version": RECORD_VERSION,
                    "upgraded_from_version": 0}
            data["notes"] = list(data["notes"] or [])
        return cls(data).check(path)

    def write(self, out: str | Path, restarts: int | None = None) -> None:
        """Move the live records into place, add the attempt to the history (with
        `restarts`, SLURM's requeues of the job, where known), then write run.json (an
        attempt line is never missing behind a record: a kill in between leaves the point
        without run.json, so it is planned again); drop the state of a completed run (any
        other keeps it, to resume from). A job writes its record through
        `phases.finish`, which adds where the job's time went."""
        out = Path(out)
        self.check(f"the record for {out}")
        out.mkdir(parents=True, exist_ok=True)  # a run that failed before it made its folder
        state = out / STATE
        sys.stdout.flush()
        for name in (EPOCHS, TRAIN_LOG):  # stored once: a second name, not a copy
            with atomic(out / name) as tmp:
                if (state / name).exists():
                    link_or_copy(state / name, tmp)
                else:  # the run ended before its first epoch began
                    tmp.write_text("")
        append_attempt(out, self, restarts)
        write_json_atomic(out / RUN_JSON, dict(self))
        if self.status is Status.COMPLETED:
            keep_completed(out)
            shutil.rmtree(state, ignore_errors=True)


def keep_completed(out: Path) -> None:
    """Copy a completed run's records to out/KEPT, replacing the copy before only once
    the new one is whole."""
    fresh, old = out / f"{KEPT}.new", out / f"{KEPT}.old"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir()
    for name in KEPT_FILES:
        link_or_copy(out / name, fresh / name)
    shutil.rmtree(old, ignore_errors=True)
    if (out / KEPT).exists():
        (out / KEPT).rename(old)
    fresh.rename(out / KEPT)
    shutil.rmtree(old, ignore_errors=True)


def restore_completed(out: Path) -> None:
    """Put out/KEPT's records back in place (Snakemake removed a job's outputs before a
    rerun that now keeps them), run.json last."""
    for name in KEPT_FILES:
        with atomic(out / name) as tmp:
            link_or_copy(out / KEPT / name, tmp)


def read_epochs(path: str | Path) -> list[dict]:
    """epochs.jsonl's records; a line cut by a kill ends them (what follows is not trusted)."""
    return read_jsonl(path)


# --- attempts: the point's history, kept across Snakemake's reruns -----------------------
def read_attempts(run_dir: str | Path) -> list[dict]:
    return read_jsonl(Path(run_dir) / ATTEMPTS, after_a_bad_line="skip")  # each stands alone


def append_attempt(run_dir: str | Path, record: dict, restarts: int | None = None) -> None:
    keys = ("status", "failure", "epochs_completed", "epochs", "started", "finished",
            "attempt")
    line = {k: record.get(k) for k in keys}
    line["slurm_job_id"] = (record.get("env") or {}).get("SLURM_JOB_ID")
    if restarts is not None:  # a job SLURM requeued (preemption, a failed node) says so
        line["slurm_restarts"] = restarts
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    append_jsonl(Path(run_dir) / ATTEMPTS, line)


def drop_last_attempt(run_dir: str | Path) -> None:
    """Take back the last attempt line, its record replaced by a truer one (the launcher's
    of a killed rank, where rank 0 recorded the error the loss caused)."""
    attempts = read_attempts(run_dir)
    if attempts:
        write_jsonl_atomic(Path(run_dir) / ATTEMPTS, attempts[:-1])
