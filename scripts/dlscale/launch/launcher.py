"""Start the worker processes of one training point, supervise them, record the end.

The plan (Plan: planning's JSON, dlscale.plan.pointflags.launch_plan) says how the workers
start (one task as it is; several through srun in a SLURM allocation, as local processes
with TF_CONFIG outside one, or as Horovod ranks) and what a record made here says of the
point. With --record the outcome is recorded whatever happens (train.py records its own
ends; a death without a record is recorded here), one writer per point holds the point's
lock, SIGTERM and SIGINT end the workers' tree in full, a watchdog stops a training
still running just before the job's time limit, and outside SLURM the point is held to
the memory it asks for (dlscale.jobs.memoryhold). docs/slurm.md, "How a point's launcher
runs it", says how and why.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from dlscale.core.contract import (
    KEPT,
    RUN_JSON,
    UNATTENDED,
    RecordError,
    RunRecord,
    Status,
    drop_last_attempt,
    restore_completed,
)
from dlscale.core.files import write_json_atomic
from dlscale.jobs import phases, slurm
from dlscale.jobs.locks import PointLock
from dlscale.jobs.memoryhold import KernelKills, MemoryHold
from dlscale.jobs.processes import (
    adopt_orphans,
    end_tree,
    killed_reason,
    spawn,
    stopped_reason,
)
from dlscale.launch import workers


@dataclass(frozen=True)
class Plan:
    """What planning decided about a point, for its launcher: how its workers start, and
    what a record made here says of it."""
    tasks: int = 1
    tasks_per_node: int | None = None
    nodes: int = 1
    horovod: bool = False
    mpi_launcher: str | None = None
    timeline: bool = False  # Horovod's timeline, into the run folder
    command: bool = False  # a command of yours (run_command.py): a rerun starts it over
    nccl_debug: bool = False  # NCCL_DEBUG=INFO into the run folder (GPUs over nodes)
    planned: dict = field(default_factory=dict)  # run.json's planned keys
    batch_file: str | None = None  # batch_per_gpu: auto: the batch search's answer
    mem_mb: int | None = None  # the memory it asks for over all its nodes: held outside SLURM

    def record_keys(self) -> dict:
        """The planned keys, the batch read from the batch search's file where it chose it."""
        planned = dict(self.planned)
        if self.batch_file:
            try:
                batch = int(json.loads(Path(self.batch_file).read_text())["batch_per_gpu"])
            except (OSError, ValueError, KeyError, TypeError):
                return planned  # the training says why; the record keeps "auto"
            planned.update(batch_per_gpu=batch, global_batch=batch * planned["gpus_asked"])
        return planned


def read_plan(text: str) -> Plan:
    """launch.py's --plan: a JSON object of Plan's fields; ArgumentTypeError, in one line,
    naming what is wrong."""
    import argparse
    from dataclasses import fields

    try:
        values = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): expected one JSON object") from None
    if not isinstance(values, dict):
        raise argparse.ArgumentTypeError(f"{text[:60]!r}: expected one JSON object")
    known = {f.name for f in fields(Plan)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown key(s) {', '.join(unknown)}: expected "
                                         f"{', '.join(sorted(known))}")
    plan = Plan(**values)
    if not isinstance(plan.tasks, int) or plan.tasks < 1:
        raise argparse.ArgumentTypeError(f"tasks {plan.tasks!r}: expected at least 1")
    return plan


# the signals (SIGTERM, SIGINT) that asked this process to stop, in order; noted by the
# handler main installs, read by the supervision loop
STOPS: list[int] = []


def supervise(procs: list[subprocess.Popen], stop_at: float | None = None,
              poll: float = 0.2, hold: MemoryHold | None = None) -> tuple[int, bool, int | None]:
    """Wait for the worker processes: (exit status, whether `stop_at` was reached first,
    the index of the worker whose end stopped the others, or None).
    The first failing worker stops the others; so do `stop_at` (time.time() scale) and a
    signal noted in STOPS (the status is then the signal's, negative), and a `hold` passed
    (its reason says so; every process is killed at once, as an out-of-memory kill).
    However it ends, every process the workers started ends with it (processes.end_tree:
    SIGTERM, then SIGKILL after KILL_GRACE_S); the exit status is the first failure's
    (negative: the signal that ended it)."""
    status, late, first = 0, False, None
    try:
        while any(p.poll() is None for p in procs):
            first = workers.first_failure(procs)
            if first is not None:
                status = procs[first].returncode
                break
            if STOPS:
                status = -STOPS[0]
                break
            if stop_at is not None and time.time() >= stop_at:
                late = True
                break
            if hold is not None and hold.over():
                break
            time.sleep(poll)
    finally:
        end_tree(procs, first=signal.SIGKILL if hold and hold.reason else signal.SIGTERM)
    if not status:  # ended between two polls, or by end_tree (late)
        first = workers.first_failure(procs)
        status = procs[first].returncode if first is not None else 0
    return status, late, first


# the planned settings that make a finished record the same point's (attempt aside)
SAME_POINT = ("model", "gpus_asked", "nodes", "strategy", "precision", "keras_asked",
              "backend", "batch_per_gpu", "global_batch", "epochs")


def snakemake_ancestor() -> dict | None:
    """The Snakemake process that started this job on this host ({pid, since}), the
    nearest ancestor whose command line runs snakemake; None under a SLURM job or where
    none is found."""
    import psutil

    if os.environ.get("SLURM_JOB_ID"):
        return None
    try:
        for process in psutil.Process().parents():
            words = process.cmdline()
            if any(Path(w).name == "snakemake" or w == "snakemake" for w in words[:3]):
                return {"pid": process.pid, "since": process.create_time()}
    except psutil.Error:
        return None
    return None


def note_unattended(out: Path, started_by: dict | None) -> None:
    """Mark a completed record made after its Snakemake was gone (KEPT/UNATTENDED), so
    that the restarted Snakemake's job keeps it instead of training the point again."""
    import psutil

    record = out / KEPT / RUN_JSON
    if started_by is None or not record.exists():
        return
    try:
        alive = psutil.Process(started_by["pid"]).create_time() == started_by["since"]
    except psutil.Error:
        alive = False
    if not alive and RunRecord.read(record).status is Status.COMPLETED:
        write_json_atomic(out / KEPT / UNATTENDED, {"snakemake_pid": started_by["pid"],
                                                     "noted": time.time()})


def forced(out: Path) -> bool:
    """Whether the user forced this point's rerun (rulefunctions.note_forced)."""
    from dlscale.core.vocabulary import FORCED_ENV

    named = os.environ.get(FORCED_ENV, "").split()
    return "*" in named or any(Path(n).parent == out or Path(n) == out for n in named)


def finished_meanwhile(out: Path, plan: Plan, waited: bool, forced: bool = False) -> bool:
    """Whether another job of this point completed the same settings while this one
    waited: for the lock (`waited`), or in SLURM's queue behind it (finished after this
    job was submitted; Snakemake's job step may have removed its run.json since, so the
    kept copy counts too, and is put back), or while no Snakemake was there (KEPT holds
    UNATTENDED: its Snakemake was killed, the training went on). A completed record from
    before this job was submitted (the user asked for the point again) does not count,
    nor does any with `forced` (snakemake -R/-F)."""
    planned = plan.record_keys()
    job = os.environ.get("SLURM_JOB_ID")
    submitted = None if waited or not job else slurm.job_submitted(job)
    unattended = not forced and (out / KEPT / UNATTENDED).exists()
    if not (planned and (waited or submitted or unattended)):
        return False
    for path in (out / RUN_JSON, out / KEPT / RUN_JSON):
        try:
            record = RunRecord.read(path)
        except (OSError, RecordError):
            continue
        if record.status is not Status.COMPLETED or not all(
                record.get(k) == planned[k] for k in SAME_POINT if k in planned):
            continue
        finished = record.get("finished")
        if not waited and not unattended:
            try:
                if datetime.fromisoformat(finished).timestamp() < submitted:
                    continue
            except (TypeError, ValueError):
                continue
        if path.parent != out:  # put the kept outputs back in place
            restore_completed(out)
        if unattended:  # kept once: a later rerun the user asks for trains again
            (out / KEPT / UNATTENDED).unlink(missing_ok=True)
            print(f"dlscale launch: kept {out}: completed while Snakemake was away",
                  file=sys.stderr, flush=True)
        return True
    return False


def take_back_consequence(out: Path) -> list[str]:
    """A rank was killed by a signal: the record rank 0 wrote of what followed (its
    collective failed: gloo's "Connection reset by peer", status failed) is taken back,
    run.json and its attempt line, so that the point is recorded `killed` naming the rank
    (a kill in between leaves no run.json: the point is planned again). Its failure
    becomes a note; a completed record (the kill came after it) is kept."""
    try:
        record = RunRecord.read(out / RUN_JSON)
    except RecordError:
        return []  # none (or unreadable: replaced whole)
    if record.status is Status.COMPLETED:
        return []
    (out / RUN_JSON).unlink()
    drop_last_attempt(out)
    return [f"rank 0 then recorded {record.status.value}: {record['failure']}"]


def record_end(out: Path, returncode: int, log: str | None, started: datetime,
               plan: Plan, terminated: int = 0, late: bool = False,
               notes: list[str] | None = None, who: str = "the training process",
               out_of_memory: str | None = None) -> None:
    """run.json for a training that ended without writing one (see --record); `late`:
    the watchdog stopped it before the job's time limit; `out_of_memory`: why it ran out
    of memory (the hold killed it, or the kernel in its cgroup); `terminated`: the signal
    (SIGTERM, SIGINT) that stopped launch.py itself, or 0; `who` was killed by the
    signal of a negative `returncode`."""
    from dlscale.core.contract import EPOCHS, STATE, read_epochs
    from dlscale.train.telemetry import describe_system
    from dlscale.train.timelimit import WATCHDOG_RESERVE_S
    from dlscale.train.training import environment_facts

    see = f"; see {log}" if log else ""
    notes = list(notes or [])
    planned = plan.record_keys()
    finished = len(read_epochs(out / STATE / EPOCHS))
    # dlscale's training resumes from its backup; a command of yours is started over
    rerun = ("a rerun starts the command over" if plan.command else
             "a rerun continues from the last finished epoch")
    if out_of_memory:
        status, reason = Status.OUT_OF_MEMORY, out_of_memory + see
    elif late:
        status = Status.TIMEOUT
        epochs = planned.get("epochs")
        where = (f"all {epochs} epochs had finished but the evaluation and records had not"
                 if epochs and finished >= epochs else f"inside epoch {finished + 1}")
        reason = (f"still running {WATCHDOG_RESERVE_S:.0f} s before the job's time limit "
                  f"({where}): stopped so that the job ends in time; the epoch in progress "
                  f"is lost and {rerun}, with more time") + see
    elif terminated == signal.SIGINT:
        status, reason = Status.KILLED, stopped_reason(terminated) + see
    elif terminated:
        job = os.environ.get("SLURM_JOB_ID")
        try:
            left = slurm.time_left(job) if job else None
        except slurm.SlurmError as exc:
            left = None
            notes.append(f"cannot tell a time limit from a cancel: {exc}")
        timeout = left is not None and left <= 5
        status = Status.TIMEOUT if timeout else Status.KILLED
        reason = (f"SLURM ended the job at its time limit before an epoch boundary; {rerun}"
                  if timeout else stopped_reason(terminated)) + see
    elif returncode < 0:
        status, reason = Status.KILLED, killed_reason(-returncode, who) + see
    else:
        status = Status.FAILED
        reason = f"the training process exited with status {returncode} without a record{see}"
    phases.finish(RunRecord.ending(status, reason, planned, environment_facts(),
                                   epochs_completed=finished, notes=notes,
                                   system=describe_system(),
                                   started=started.isoformat(timespec="seconds")), out)


def run(args: argparse.Namespace, command: list[str]) -> int:
    """launch.py's work, its flags parsed (scripts/launch.py)."""
    sys.stdout.flush()
    os.environ.update(workers.threads_env(getattr(args, "threads", None), args.plan.tasks,
                                          dict(os.environ)))
    if args.plan.nccl_debug and args.record:
        os.environ.update(workers.nccl_debug_env(args.record, dict(os.environ)))
    if args.plan.timeline:
        os.environ["HOROVOD_TIMELINE"] = str((args.record / "timeline.json").resolve())
    if not args.record:
        return start(args, command)[0]
    from dlscale.jobs.phases import start_of_rule

    if slurm.OWN_STEP_ENV in os.environ:  # started by as_own_step: its environment back
        restored = slurm.from_own_step(dict(os.environ))  # (the job's starts included)
        os.environ.clear()
        os.environ.update(restored)
    else:
        os.environ.update(start_of_rule())  # where the job's time went: in every record
        name = f"dlscale-launch-{os.getpid()}"
        own = slurm.own_step_command([sys.executable, *sys.argv], dict(os.environ), name)
        if own and (returncode := as_own_step(args, command, *own, name)) is not None:
            return returncode
    started = datetime.now(UTC)
    for signum in (signal.SIGTERM, signal.SIGINT):  # while waiting for another holder
        signal.signal(signum, stop_waiting)
    try:
        with PointLock(args.record) as lock:  # released however the training ends
            return locked(args, command, started, lock.waited)
    except Stopped as stop:  # nothing of the point was touched: its holder goes on
        print(f"dlscale launch: stopped by {signal.Signals(stop.args[0]).name} while "
              f"waiting for {args.record}'s lock: nothing was trained or recorded here",
              file=sys.stderr, flush=True)
        return 128 + stop.args[0]


class Stopped(Exception):  # noqa: N818 (a stop, not an error)
    """SIGTERM or SIGINT before the point's lock was taken; args[0] the signal."""


def stop_waiting(signum, _frame):
    raise Stopped(signum)


def locked(args: argparse.Namespace, command: list[str], started: datetime,
           waited: bool) -> int:
    """The point's training, its lock held: kept if another job completed it meanwhile,
    else trained, and recorded whatever becomes of it; launch.py's exit status."""
    from dlscale.train.timelimit import JOB_END_ENV, WATCHDOG_RESERVE_S, job_deadline

    if finished_meanwhile(args.record, args.plan, waited, forced(args.record)):
        print(f"dlscale launch: another job completed {args.record} with the same "
              "settings: its record is kept, nothing is trained again", file=sys.stderr,
              flush=True)
        return 0
    started_by = snakemake_ancestor()
    (args.record / RUN_JSON).unlink(missing_ok=True)  # the last attempt's: attempts.jsonl has it
    notes: list[str] = []
    end = job_deadline(args.time_limit_min, started.timestamp(), notes)
    if end is not None:
        os.environ[JOB_END_ENV] = f"{end:.3f}"
    # SIGTERM (scancel) or SIGINT (Ctrl-C): noted; the supervision loop ends the workers
    # in full, and a second signal cannot cut that short
    signal.signal(signal.SIGTERM, lambda signum, frame: STOPS.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: STOPS.append(signum))
    adopt_orphans()  # what the training leaves behind is ended with it (end_tree)
    hold = (MemoryHold(args.plan.mem_mb) if args.plan.mem_mb
            and not os.environ.get("SLURM_JOB_ID") else None)  # SLURM's cgroup holds a job
    kills = KernelKills()  # or a cgroup: the kernel's out-of-memory kills in it
    returncode, late, rank = start(args, command,
                                   None if end is None else end - WATCHDOG_RESERVE_S, hold)
    if late:
        print(f"dlscale launch: still running {WATCHDOG_RESERVE_S:.0f} s before the job's "
              "time limit: the training was stopped", file=sys.stderr, flush=True)
    held = hold.reason if hold is not None else None  # why the hold killed it, if it did
    who = "the training process"
    if rank is not None and returncode < 0 and not (late or STOPS or held):
        # one rank killed
        who = f"rank {rank} of the training's {args.plan.tasks} processes"
        notes += take_back_consequence(args.record)
    if not (args.record / RUN_JSON).exists():
        record_end(args.record, returncode, args.log, started, args.plan,
                   terminated=STOPS[0] if STOPS else 0, late=late, notes=notes, who=who,
                   out_of_memory=held or kills.reason(returncode))
    note_unattended(args.record, started_by)
    return 128 + STOPS[0] if STOPS else 0


def as_own_step(args: argparse.Namespace, command: list[str], srun: list[str], env: dict,
                name: str) -> int | None:
    """launch.py again, as the one task of a job step of its own (slurm.own_step_command:
    where SLURM tracks processes by cgroup, a job's end sends its SIGTERM to the tasks
    only), and its exit status. A SIGTERM or SIGINT that reaches this process is passed
    on to that task (srun would answer it by killing the step); a step that ends without
    a record (srun could not start it, or it was killed) gets one here. None, said in
    one line, when srun cannot be run at all: the point then runs in this process."""
    started = datetime.now(UTC)
    try:
        proc = spawn(srun, env=env)
    except OSError as exc:
        print(f"dlscale launch: cannot start a job step of its own ({srun[0]}: "
              f"{exc.strerror or exc}); running in the job step it was started in",
              file=sys.stderr, flush=True)
        return None

    def pass_on(signum, _frame):
        if not slurm.signal_step(env["SLURM_JOB_ID"], name, signum):
            STOPS.append(signum)  # no such step (yet): srun's own end stops it
            proc.terminate()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, pass_on)
    returncode = proc.wait()
    if (args.record / RUN_JSON).exists():  # the step's launcher recorded the point: its
        # status stands (srun exits 1 after a step the kernel's out-of-memory killer was
        # in, whatever its task returned), a stop's goes on
        return returncode if returncode > 128 else 0
    killed = returncode - 128 if 128 < returncode < 128 + signal.NSIG else 0
    record_end(args.record, -killed if killed else returncode, args.log, started, args.plan,
               terminated=STOPS[0] if STOPS else 0,
               notes=[f"the point's job step ({shlex.join(srun[:6])} ...) exited with "
                      f"status {returncode} without a record"])
    return 128 + STOPS[0] if STOPS else 0


def start(args: argparse.Namespace, command: list[str], stop_at: float | None = None,
          hold: MemoryHold | None = None) -> tuple[int, bool, int | None]:
    """Run the worker processes: (exit status, negative if killed by that signal; whether
    they were stopped at `stop_at`; the rank whose end ended the point where this process
    started each rank itself, local workers, else None); `hold`: their memory's."""
    plan = args.plan
    if plan.tasks == 1:
        return *supervise([spawn(command)], stop_at, hold=hold)[:2], None
    if plan.horovod:
        # TensorFlow 2.15 (the Horovod environment) has Keras 2 built in; asked for
        # tf_keras, which it lacks, horovodrun's own import of TensorFlow fails
        env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
        if plan.nodes > 1 and workers.is_mpirun(plan.mpi_launcher):
            env = slurm.allocation_env(env, plan.nodes, plan.tasks_per_node)
        return *supervise([spawn(
            workers.horovod_command(plan.tasks, plan.nodes, command, plan.mpi_launcher,
                            plan.tasks_per_node), env=env)], stop_at, hold=hold)[:2], None
    if os.environ.get("SLURM_JOB_ID"):
        return *supervise([spawn(slurm.srun_command(plan.tasks, plan.tasks_per_node,
                                                    command))], stop_at)[:2], None
    return supervise(workers.local_workers(plan.tasks, command), stop_at, hold=hold)
