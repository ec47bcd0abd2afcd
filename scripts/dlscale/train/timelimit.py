"""The job's time limit as train.py and launch.py see it: when the job ends, how much of
the end is kept for the records, and the callback that stops at an epoch boundary
when the next epoch would not fit.
"""

from __future__ import annotations

import os
import time

from dlscale.jobs import slurm
from dlscale.train import keraschoice


class DeadlineReached(Exception):
    """Raised as an epoch begins when it would not end before the job's time limit. An
    exception, not stop_training: a normal end of `fit` makes BackupAndRestore delete the
    backup that the rerun resumes from."""

    def __init__(self, epoch: int, longest: float, deadline: float):
        super().__init__(f"epoch {epoch}")
        self.epoch, self.longest, self.deadline = epoch, longest, deadline


# Set by launch.py for the training it starts: the job's end (time.time() scale), so that
# its watchdog and train.py's guard count from the same moment.
JOB_END_ENV = "DLSCALE_JOB_END"


def job_deadline(time_limit_min: float | None, started: float,
                 notes: list[str] | None = None) -> float | None:
    """When this process must be done (time.time() scale): $DLSCALE_JOB_END when launch.py
    set it, else the SLURM job's end inside a job, else start + --time-limit-min, else
    None (no limit). When squeue cannot say, the reason goes to `notes` and the
    --time-limit-min rule applies."""
    try:
        return float(os.environ[JOB_END_ENV])
    except (KeyError, ValueError):
        pass
    job_id = os.environ.get("SLURM_JOB_ID")
    if job_id:
        try:
            left = slurm.time_left(job_id)
        except slurm.SlurmError as exc:
            left = None
            if notes is not None:
                notes.append(f"the time-limit guard cannot read the job's end ({exc}): "
                             "a time limit reached mid-epoch loses that epoch")
        if left is not None:
            return time.time() + left
    return started + time_limit_min * 60 if time_limit_min else None


# Seconds kept at the end of a job for what follows the last epoch: the evaluation, the
# records, the process's exit and Snakemake's job step (13 s under load on the test
# cluster: docs/benchmarks.md, "SLURM orchestration and planning"); SLURM marks a
# job that reaches its limit TIMEOUT, which makes Snakemake drop its outputs.
END_OF_JOB_RESERVE_S = 30.0
# launch.py's watchdog stops a training still running this many seconds before the end
# (an epoch longer than the time left): less than the reserve above, so that a training
# that stopped itself at an epoch boundary has 10 s to evaluate and write its records;
# then KILL_GRACE_S, the record and the job step's end fit in what is left.
WATCHDOG_RESERVE_S = 20.0


def deadline_stop(deadline: float, agree, reserve: float = END_OF_JOB_RESERVE_S):
    """Keras callback that ends training at an epoch boundary when the next epoch, taken
    as 1.5 x the longest so far, plus `reserve` seconds for the end of the job, would
    end after `deadline`. `agree(flag)` makes every worker take the same decision."""
    keras = keraschoice.keras()

    class DeadlineStop(keras.callbacks.Callback):
        # decided at the end of an epoch, raised as the next begins: by then Keras has
        # printed the finished epoch's line and BackupAndRestore has saved it
        def __init__(self):
            super().__init__()
            self.longest, self._start, self.stop = 0.0, 0.0, None

        def on_epoch_begin(self, epoch, logs=None):
            if self.stop is not None:
                raise self.stop
            self._start = time.time()

        def on_epoch_end(self, epoch, logs=None):
            self.longest = max(self.longest, time.time() - self._start)
            late = time.time() + 1.5 * self.longest + reserve > deadline
            if agree(late):
                self.stop = DeadlineReached(epoch + 1, self.longest, deadline)

    return DeadlineStop()


