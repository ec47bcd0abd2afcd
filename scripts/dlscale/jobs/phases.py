"""Where a job's time goes: the phases of a point's job, as wall-clock timestamps.

run.json's `phases` holds, in seconds since the epoch (time.time()), rounded to ms:

  job_start     the SLURM job began (squeue's start time, to the second); outside SLURM
                the rule began (= rule_start)
  step_start    Snakemake's job step began inside the SLURM job (the process that then
                parses the Snakefile and runs the rule); absent outside SLURM
  rule_start    the rule's command began (launch.py's process)
  interpreter   the process that wrote the record began (train.py, run_command.py)
  imports       TensorFlow and Keras were imported
  model         the model was built and compiled
  data          the input pipelines were opened
  first_step    the training (model.fit, or your command) began
  last_step     the training ended
  evaluated     the test evaluation and the checks after the training were done
  recorded      run.json was written

A phase the job never reached is absent. `job_s` is recorded - job_start, and
`overhead_s` = job_s - fit_seconds: what the point cost beyond its training.
launch.py passes job_start, step_start and rule_start to the training through the
environment (START_ENV), so the record of any process of the job has them.
"""

from __future__ import annotations

import os
import time

from dlscale.jobs import slurm

PHASES = ("job_start", "step_start", "rule_start", "interpreter", "imports", "model", "data",
          "first_step", "last_step", "evaluated", "recorded")
START_ENV = {"job_start": "DLSCALE_JOB_START", "step_start": "DLSCALE_STEP_START",
             "rule_start": "DLSCALE_RULE_START"}

_marks: dict[str, float] = {}  # this process's phases, by mark()


def mark(name: str, at: float | None = None) -> None:
    """The phase `name` is reached now (or `at`, time.time() scale)."""
    if name not in PHASES:
        raise ValueError(f"unknown phase {name!r}: expected one of {', '.join(PHASES)}")
    _marks[name] = time.time() if at is None else at


def process_start(pid: int | None = None) -> float | None:
    """When a process (this one by default) began, time.time() scale."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def snakemake_step_start(job_start: float) -> float | None:
    """When the Snakemake process above this one began, if it began inside the job (the
    SLURM plugin's job step); None for the Snakemake that plans (the local profile)."""
    import psutil

    try:
        process = psutil.Process().parent()
        for _ in range(6):
            if process is None:
                return None
            if any("snakemake" in part for part in process.cmdline()[:3]):
                begun = process.create_time()
                return begun if begun >= job_start - 1 else None
            process = process.parent()
    except psutil.Error:
        return None
    return None


def start_of_rule() -> dict[str, str]:
    """launch.py, first thing: the job's starts as environment variables for what it runs
    (job_start from squeue inside a SLURM job, else the rule's own start)."""
    rule = process_start() or time.time()
    job = os.environ.get("SLURM_JOB_ID")
    job_start = (slurm.job_start(job) if job else None) or rule
    starts = {"job_start": job_start, "rule_start": rule}
    if job and (step := snakemake_step_start(job_start)) is not None:
        starts["step_start"] = step
    return {START_ENV[name]: f"{value:.3f}" for name, value in starts.items()}


def timeline(recorded: float | None = None) -> dict[str, float]:
    """The phases known to this process, in PHASES order, recorded = now."""
    known: dict[str, float] = {}
    for name, env in START_ENV.items():
        try:
            known[name] = float(os.environ[env])
        except (KeyError, ValueError):
            pass
    if (begun := process_start()) is not None:
        known["interpreter"] = begun
    known.update(_marks)
    known["recorded"] = time.time() if recorded is None else recorded
    known.setdefault("job_start", known.get("rule_start", known.get("interpreter")))
    return {name: round(known[name], 3) for name in PHASES if known.get(name) is not None}


def costs(phases: dict | None, fit_seconds: float | None) -> dict[str, float | None]:
    """job_s (record written - job start), overhead_s (job_s - fit_seconds) and
    overhead_fraction (overhead_s / job_s); None where a figure is unknown."""
    phases = phases or {}
    if "job_start" not in phases or "recorded" not in phases:
        return {"job_s": None, "overhead_s": None, "overhead_fraction": None}
    job = phases["recorded"] - phases["job_start"]
    overhead = job - fit_seconds if fit_seconds is not None else None
    return {"job_s": round(job, 3),
            "overhead_s": None if overhead is None else round(overhead, 3),
            "overhead_fraction": (None if overhead is None or job <= 0
                                  else round(overhead / job, 4))}


def finish(record, out) -> None:
    """Write a job's run record (contract.RunRecord) into `out`: with where the job's
    time went, and in a SLURM job how often SLURM requeued it (beside its attempt)."""
    record["phases"] = timeline()
    record.update(costs(record["phases"], record.get("fit_seconds")))
    job = (record.get("env") or {}).get("SLURM_JOB_ID")
    record.write(out, restarts=slurm.restarts(job) if job else None)
