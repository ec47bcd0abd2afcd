"""Your own training command as points of the study (sweep.commands).

A command is a template such as `python my_train.py --gpus {gpus} --epochs {epochs}`.
Each point fills its placeholders (PLACEHOLDERS), every value quoted for the shell, and
runs it once with bash in the workflow's working directory, inside the point's job (its
GPUs, and `tasks` SLURM tasks that the command starts itself, e.g. with srun, which
sees the allocation as in a batch script: dlscale.jobs.slurm). `{out_dir}` is a folder of
the run folder's own (COMMAND_OUT) that the command may empty: dlscale's files are beside
it. What the command prints goes to the run folder's train.log and is read as it comes
by the same readers as external logs (dlscale.logparse.reader: Keras lines from every version,
srun/mpirun prefixes, benchmark totals, the command's own `patterns`); each finished
epoch reaches the live epochs.jsonl when its line arrives. The run record and
epochs.jsonl are written from that reading, so the tables, plots, references and
failure semantics are those of dlscale's own points (`ending`):
- exit 0 with every epoch (or a benchmark's total images/s): completed;
- exit 0 without a result, with fewer epochs than planned (or than its `Epoch k/N`
  lines state), a NaN or infinite loss, an epoch time that is not a finite number of
  seconds, or a non-zero exit: failed, with the reason (the output's last lines);
- killed by a signal of its own (the out-of-memory killer's SIGKILL): killed;
- stopped from outside (the watchdog before the job's time limit, scancel, Ctrl-C):
  launch.py, which supervises this process, records it from the epochs read so far.
The command runs in a process group of its own and this process adopts what it leaves
behind (dlscale.jobs.processes): when the command exits, the processes it started that still
run (`tensorboard &`, a child holding its output open) are ended, and so is everything
when the point is stopped.
Images per epoch are the steps Keras printed x the global batch, or `train_images`.
Telemetry is sampled as for dlscale's own points (dlscale.train.telemetry), with the RSS of the
command's whole process tree; an epoch's window ends when its result line arrived.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import shlex
import signal
import string
import subprocess
import sys
import threading
from array import array
from datetime import UTC, datetime
from pathlib import Path

from dlscale.core.contract import (
    COMMAND_OUT,
    EPOCHS,
    STATE,
    TELEMETRY,
    TRAIN_LOG,
    RunRecord,
    Status,
)
from dlscale.core.errors import PlanError
from dlscale.core.files import write_jsonl_atomic
from dlscale.jobs import phases, slurm
from dlscale.jobs.memoryhold import KernelKills
from dlscale.jobs.processes import KILL_GRACE_S, adopt_orphans, end_tree, killed_reason, spawn

PLACEHOLDERS = ("gpus", "nodes", "tasks", "batch_per_gpu", "global_batch", "epochs", "lr",
                "seed", "out_dir")
STRATEGY = "command"
# what a command's output states of its run beyond epochs, kept in its record
RUN_FACTS = ("memory_gib", "memory_from", "memory_note", "mfu_percent", "tflops", "steps_done",
             "rate_scope", "train_seconds", "samples_per_s", "parameters", "step_time_s",
             "param_dtype", "precision_note")


def check_template(label: str, template: str, knobs=()) -> None:
    """PlanError naming the command when it is not a template of PLACEHOLDERS and the
    sweep's `knobs`, or leaves out a knob (each value of it would run the same command)."""
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(template)
                  if f is not None]
    except ValueError as exc:
        raise PlanError(f"sweep.commands.{label}: {template!r} is not a template ({exc}); "
                        "write a literal brace as {{ or }}") from None
    known = (*PLACEHOLDERS, *(k for k in knobs if k not in PLACEHOLDERS))
    for field, spec, conversion in fields:
        if field not in known:
            raise PlanError(f"sweep.commands.{label}: unknown placeholder {{{field}}}: "
                            f"expected one of {', '.join('{' + p + '}' for p in known)}"
                            "; a literal brace is written twice, as in ${{SLURM_NTASKS}} or "
                            "awk '{{print $1}}'")
        if spec or conversion:
            raise PlanError(f"sweep.commands.{label}: {{{field}}} takes no format or "
                            "conversion (values are put in as they are, quoted)")
    used = {field for field, _spec, _conversion in fields}
    for knob in knobs:
        if knob not in used and not (knob == "batch_per_gpu" and "global_batch" in used):
            raise PlanError(f"sweep.commands.{label}: the command does not use the knob "
                            f"{{{knob}}} (sweep.knobs): each of its values would run the same "
                            "command; put {" + knob + "} where the script takes it")


def render(template: str, values: dict) -> str:
    """The command with each placeholder replaced by its value, quoted for the shell."""
    return template.format(**{k: shlex.quote(str(v)) for k, v in values.items()})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Run one point of a sweep.commands entry: "
                                     "the command, its output read into the run's records.")
    add = parser.add_argument
    add("--command", required=True, help="the command template (sweep.commands)")
    add("--model", required=True, help="the command's label (its series)")
    add("--out", required=True, type=Path, help="the run folder")
    for name in ("gpus", "nodes", "tasks", "batch-per-gpu", "epochs", "seed", "attempt"):
        add(f"--{name}", type=int, default=1)
    add("--lr", type=float, required=True, help="the scaled learning rate ({lr})")
    add("--precision", default="float32")
    add("--device", choices=("gpu", "cpu"), default="gpu",
        help="gpu: sample the GPUs through NVML too")
    add("--telemetry-interval", type=float, default=1.0, metavar="SECONDS",
        help="sample into telemetry.csv every SECONDS; 0: off")
    add("--train-images", type=int, help="images per epoch when the output has no steps")
    add("--patterns", type=json.loads, default=None, help="patterns as JSON")
    add("--parameters", type=int, help="the model's parameters, where its output does not "
        "state them (the prediction's gradient)")
    add("--knob", action="append", default=[], metavar="NAME=VALUE",
        help="a sweep.knobs value: the command's {NAME}")
    return parser


def knobs(args) -> dict:
    return dict(item.split("=", 1) for item in args.knob)


def planned(args) -> dict:
    """The run record's planned keys (launch.py reads them from this command line too)."""
    return {"model": args.model, "gpus_asked": args.gpus, "replicas": args.gpus,
            "nodes": args.nodes, "strategy": STRATEGY, "precision": args.precision,
            "batch_per_gpu": args.batch_per_gpu, "global_batch": args.batch_per_gpu * args.gpus,
            "epochs": args.epochs, "attempt": args.attempt, "knobs": knobs(args)}


def values(args) -> dict:
    return {"gpus": args.gpus, "nodes": args.nodes, "tasks": args.tasks,
            "batch_per_gpu": args.batch_per_gpu, "global_batch": args.batch_per_gpu * args.gpus,
            "epochs": args.epochs, "lr": f"{args.lr:g}", "seed": args.seed,
            "out_dir": str(args.out / COMMAND_OUT), **knobs(args)}


def epoch_record(row: dict, args) -> dict:
    """epochs.jsonl's record of an epoch the output finished."""
    steps = row.get("steps")
    images = (args.train_images or (steps * args.batch_per_gpu * args.gpus if steps else None)
              or row.get("samples"))
    return {"epoch": row["epoch"], "seconds": row["seconds"], "steps": steps,
            "images": images,
            **{k: row[k] for k in ("loss", "accuracy") if row.get(k) is not None},
            # an epoch_time pattern without a loss: not logged, which is not NaN
            **({"loss_unknown": True} if row.get("loss_unknown") else {})}


def read_output(reader, args) -> tuple[list[dict], dict, str | None, dict[int, int]]:
    """(epoch records, facts for the record, why there is no result or None, the line
    of the log at which each epoch's result came) of the output `reader` has read."""
    from dlscale.logparse.runs import LogError

    try:
        runs = reader.runs()
    except LogError as exc:
        return [], {}, str(exc), {}
    run = runs[-1]  # a command that trains several times: its last run is the point's
    epochs = [epoch_record(row, args) for row in run.rows()]
    facts = {"images_per_epoch": epochs[0]["images"] if epochs else None,
             "logged_images_per_s": None, **run.rate_columns(args.gpus),
             "parameters": args.parameters,
             **{k: run.facts[k] for k in RUN_FACTS if k in run.facts},
             "time_to_solution_s": run.facts.get("train_seconds"),
             "streams": run.streams,
             "test_accuracy": run.test.get("test_accuracy"),
             "test_loss": run.test.get("test_loss"), "epochs_stated": run.epochs_total,
             "notes": run.warnings + ([f"the output holds {len(runs)} runs: the last is kept"]
                                      if len(runs) > 1 else [])}
    return epochs, facts, None, run.epochs.ended()


def cpu_memory(note: str | None) -> dict:
    """A CPU command's memory where its output gives none (or a GPU's 0: `note`): its
    largest process's peak resident memory (ru_maxrss of the children it waited for), as
    dlscale's own CPU points record theirs."""
    import resource

    kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: KiB
    if not kib:
        return {"memory_note": note} if note else {}
    said = f"; {note}" if note else ""
    return {"memory_gib": round(kib / 2 ** 20, 3),
            "memory_from": "the command's largest process's peak resident memory "
                           "(ru_maxrss: a CPU run; its libraries' pages included, which "
                           f"the local memory hold leaves out){said}"}


def add_telemetry(epochs: list[dict], ended: dict[int, int], arrived, sampler) -> None:
    """Each epoch's telemetry summary, over the window of its seconds that ends when its
    result line arrived (arrived[n - 1]: the sampler's time at the end of line n)."""
    for record in epochs:
        line = ended.get(record["epoch"])
        if line is not None and line <= len(arrived):
            summarize_epoch(record, sampler, arrived[line - 1])


def summarize_epoch(record: dict, sampler, end: float) -> None:
    from dlscale.train.telemetry import summarize

    record.update(summarize(sampler.rows, len(sampler.handles), end - record["seconds"], end,
                            record["images"] or 0, sampler.interval))


class Output:
    """The command's output as it comes: kept in train.log, echoed to the job's log, and
    read line by line (reader.LogReader). Each epoch the output finishes is appended to
    the live epochs.jsonl as its line arrives, so `dlscale status` follows a command as
    it follows dlscale's own training; the whole record is written at the end."""

    def __init__(self, log: Path, epochs: Path, args, sampler):
        from dlscale.logparse.lines import Lines
        from dlscale.logparse.reader import LogReader, compile_patterns

        self.log = open(log, "ab", buffering=0)  # noqa: SIM115 (closed by finish)
        self.epochs, self.args, self.sampler = epochs, args, sampler
        self.lines = Lines()
        self.reader = LogReader(str(log), compile_patterns(args.patterns, "patterns"))
        self.arrived = array("d")  # when each line ended, in the sampler's seconds
        self.run, self.shown = None, 0  # the run shown live, how many of its epochs
        self.error: BaseException | None = None

    def clock(self) -> float:
        return self.sampler.now() if self.sampler else 0.0

    def pump(self, pipe) -> None:
        """Read the pipe to its end (a thread of its own)."""
        try:
            for chunk in iter(lambda: pipe.read1(65536), b""):
                self.add(chunk)
        except BaseException as exc:  # noqa: BLE001 (said in the record by finish)
            self.error = exc

    def add(self, chunk: bytes) -> None:
        self.log.write(chunk)
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        lines = self.lines.add(chunk)
        if not lines:
            return
        now = self.clock()
        for line in lines:
            self.reader.feed(line)
            self.arrived.append(now)
        self.show()

    def show(self) -> None:
        """Append the epochs finished since the last call to the live epochs.jsonl, in one
        write (no telemetry: the record at the end has it)."""
        run = self.reader.current()
        if run is None:
            return
        if run is not self.run:  # the command began another run: it is the point's
            self.run, self.shown = run, 0
            self.epochs.write_text("")
        if len(run.epochs) > self.shown:  # the epochs as they first finished
            new = itertools.islice(run.epochs.index, self.shown, None)
            with open(self.epochs, "a") as handle:
                handle.write("".join(json.dumps(epoch_record(run.epochs[n], self.args)) + "\n"
                                     for n in new))
            self.shown = len(run.epochs)

    def finish(self, whole: bool) -> None:
        """The text after the last newline: a whole line when the command exited by
        itself (`whole`), a line that was cut when it was stopped."""
        rest = self.lines.rest()
        if rest.strip():
            self.reader.feed(rest, ended=whole)
            self.arrived.append(self.clock())
        self.log.close()


def ending(returncode: int, epochs: list[dict], facts: dict, problem: str | None,
           planned_epochs: int | None, log: Path, out_of_memory: str | None = None
           ) -> tuple[Status, str | None]:
    """How the command's point ended, by the rules of dlscale's own points: out of memory
    (`out_of_memory`: the kernel's kill in its cgroup, KernelKills), killed by a signal, a
    non-zero exit, no result, a NaN or infinite loss, an epoch time that is not a finite
    non-negative number, fewer epochs than planned; else completed."""
    from dlscale.logparse.lines import last_lines

    if out_of_memory:
        return Status.OUT_OF_MEMORY, (f"{out_of_memory}; its last lines: "
                                      + " | ".join(last_lines(log, 3)))
    if returncode < 0:
        return Status.KILLED, killed_reason(-returncode, "the command") + (
            "; its last lines: " + " | ".join(last_lines(log, 3)))
    if returncode != 0:
        return Status.FAILED, (f"the command exited with status {returncode}; its last "
                               "lines: " + " | ".join(last_lines(log, 3)))
    if problem:
        return Status.FAILED, f"the command finished but {problem}"
    for record in epochs:
        seconds = record["seconds"]
        if not (math.isfinite(seconds) and seconds >= 0):
            return Status.FAILED, (f"epoch {record['epoch']}'s time is {seconds:g} s: "
                                   "expected a finite number of seconds, 0 or more")
        if any(not math.isfinite(record.get(k, 0.0)) for k in ("loss", "accuracy")):
            return Status.FAILED, (f"the loss became NaN or infinite at epoch "
                                   f"{record['epoch']} (the command exited 0)")
    expected = planned_epochs or facts.get("epochs_stated")
    if epochs and expected and len(epochs) < expected:
        where = "planned" if planned_epochs else "the output states (Epoch k/N)"
        return Status.FAILED, (f"the command exited 0 after {len(epochs)} of the "
                               f"{expected} epochs {where}")
    return Status.COMPLETED, None


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    started = datetime.now(UTC)
    state = args.out / STATE
    state.mkdir(parents=True, exist_ok=True)
    for name in (TRAIN_LOG, EPOCHS):  # each attempt starts over: the command resumes itself
        (state / name).unlink(missing_ok=True)
    (args.out / COMMAND_OUT).mkdir(exist_ok=True)  # {out_dir}: the command's own files
    command = render(args.command, values(args))
    print(f"dlscale command: {command}", flush=True)  # the job's log; train.log is the output's
    log = state / TRAIN_LOG
    # the command's environment, and the record's: the allocation as sbatch gives it
    os.environ.update(slurm.allocation_env(dict(os.environ), args.nodes,
                                       args.tasks // args.nodes, True))
    if args.tasks == 1 and "SLURM_JOB_ID" in os.environ:
        # the SLURM plugin runs a one-task rule inside a job step of its own, which holds
        # the job's CPUs: an srun in the command shares them (srun --overlap)
        os.environ["SLURM_OVERLAP"] = "1"
    adopt_orphans()  # what the command leaves running is ended with it
    stopped: list[int] = []  # the signal that stopped this process (launch.py, Ctrl-C)

    def stop(signum, _frame):  # the whole command stops; its output is still read
        stopped.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
            os.killpg(proc.pid, signal.SIGCONT)  # a stopped command acts on it once continued

    phases.mark("first_step")
    kills = KernelKills()  # a cgroup's (SLURM's ConstrainRAMSpace): its out-of-memory kills
    proc = spawn(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                 stdin=subprocess.DEVNULL)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    sampler = None
    if args.telemetry_interval > 0:
        from dlscale.train.telemetry import Sampler

        sampler = Sampler(args.out / TELEMETRY, args.telemetry_interval,
                          gpus=args.device == "gpu", pid=proc.pid).start()
    output = Output(log, state / EPOCHS, args, sampler)
    reader = threading.Thread(target=output.pump, args=(proc.stdout,), daemon=True)
    reader.start()
    returncode = proc.wait()
    # the command has ended: what it started and left running (holding its output open,
    # or not) ends with it
    left = end_tree(grace=0 if stopped else KILL_GRACE_S)
    reader.join(KILL_GRACE_S)
    proc.stdout.close()
    phases.mark("last_step")
    output.finish(whole=not stopped and returncode >= 0)
    notes = []
    if left:
        notes.append(f"the command left {left} process(es) running when it exited: they "
                     "were ended")
    if output.error is not None:
        notes.append(f"reading the output stopped: {output.error!r}")
    if sampler:
        sampler.stop()
        if sampler.error:
            notes.append(f"telemetry stopped sampling: {sampler.error}")
    epochs, facts, problem, ended = read_output(output.reader, args)
    if args.device == "cpu" and "memory_gib" not in facts:
        facts.update(cpu_memory(facts.pop("memory_note", None)))
    if sampler:
        add_telemetry(epochs, ended, output.arrived, sampler)
    write_jsonl_atomic(state / EPOCHS, epochs)  # what finished, also for launch.py's record
    if stopped:  # stopped from outside: launch.py records it (timeout, killed by whom)
        signal.signal(stopped[0], signal.SIG_DFL)
        os.kill(os.getpid(), stopped[0])
    from dlscale.train.telemetry import describe_system
    from dlscale.train.training import environment_facts

    uses_epochs = any(f == "epochs" for _, f, _, _ in string.Formatter().parse(args.command))
    status, reason = ending(returncode, epochs, facts, problem,
                            args.epochs if uses_epochs else None, log,
                            kills.reason(returncode))
    facts["notes"] = facts.get("notes", []) + notes
    telemetry = ({"file": TELEMETRY, "interval_s": args.telemetry_interval,
                  "gpu_note": sampler.gpu_note} if sampler else None)
    phases.mark("evaluated")
    phases.finish(RunRecord.ending(
        status, reason, planned(args), environment_facts(), facts, command=command,
        epochs_completed=len(epochs), telemetry=telemetry, system=describe_system(),
        device_kind=args.device,
        # the training's time, as the command printed it
        fit_seconds=round(sum(e["seconds"] for e in epochs if math.isfinite(e["seconds"])),
                          3),
        started=started.isoformat(timespec="seconds")), args.out)
    return 0 if status is Status.COMPLETED else 1
