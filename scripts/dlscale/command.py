"""Your own training command as points of the study (sweep.commands).

A command is a template such as `python my_train.py --gpus {gpus} --epochs {epochs}`.
Each point fills its placeholders (PLACEHOLDERS), every value quoted for the shell, and
runs it once with bash in the workflow's working directory, inside the point's job (its
GPUs, and `tasks` SLURM tasks that the command starts itself, e.g. with srun, which
sees the allocation as in a batch script: dlscale.slurmenv). What it
prints goes to the run folder's train.log and is read by the same readers as external
logs (dlscale.keraslog: Keras lines from every version, srun/mpirun prefixes, benchmark
totals, the command's own `patterns`). The run record and epochs.jsonl are written from
that reading, so the tables, plots, references and failure semantics are those of
dlscale's own points:
- exit 0 with finished epochs (or a benchmark's total images/s): completed;
- exit 0 without either, or a non-zero exit: failed, with the output's last lines;
- stopped by a signal (the watchdog before the job's time limit, scancel): launch.py,
  which supervises this process, records it from the epochs read so far.
Images per epoch are the steps Keras printed x the global batch, or `train_images`.
Telemetry is sampled as for dlscale's own points (dlscale.telemetry), with the RSS of the
command's whole process tree; an epoch's window ends when its result line arrived.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import string
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from dlscale import phases
from dlscale.contract import EPOCHS, STATE, TELEMETRY, TRAIN_LOG, RunRecord, Status
from dlscale.errors import PlanError
from dlscale.files import write_jsonl_atomic
from dlscale.slurmenv import slurm_allocation

PLACEHOLDERS = ("gpus", "nodes", "tasks", "batch_per_gpu", "global_batch", "epochs", "lr",
                "seed", "out_dir")
STRATEGY = "command"


def check_template(label: str, template: str) -> None:
    """PlanError naming the command when it is not a template of PLACEHOLDERS."""
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(template)
                  if f is not None]
    except ValueError as exc:
        raise PlanError(f"sweep.commands.{label}: {template!r} is not a template ({exc}); "
                        "write a literal brace as {{ or }}") from None
    for field, spec, conversion in fields:
        if field not in PLACEHOLDERS:
            raise PlanError(f"sweep.commands.{label}: unknown placeholder {{{field}}}: "
                            f"expected one of {', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        if spec or conversion:
            raise PlanError(f"sweep.commands.{label}: {{{field}}} takes no format or "
                            "conversion (values are put in as they are, quoted)")


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
    return parser


def planned(args) -> dict:
    """The run record's planned keys (launch.py reads them from this command line too)."""
    return {"model": args.model, "gpus_asked": args.gpus, "replicas": args.gpus,
            "nodes": args.nodes, "strategy": STRATEGY, "precision": args.precision,
            "batch_per_gpu": args.batch_per_gpu, "global_batch": args.batch_per_gpu * args.gpus,
            "epochs": args.epochs, "attempt": args.attempt}


def values(args) -> dict:
    return {"gpus": args.gpus, "nodes": args.nodes, "tasks": args.tasks,
            "batch_per_gpu": args.batch_per_gpu, "global_batch": args.batch_per_gpu * args.gpus,
            "epochs": args.epochs, "lr": f"{args.lr:g}", "seed": args.seed,
            "out_dir": str(args.out)}


def read_output(log: Path, args) -> tuple[list[dict], dict, str | None, dict[int, int]]:
    """(epoch records, facts for the record, why there is no result or None, the line
    of the log at which each epoch's result came)."""
    from dlscale.keraslog import LogError, compile_patterns, parse_file_runs

    try:
        runs = parse_file_runs(str(log), compile_patterns(args.patterns, "patterns"))
    except LogError as exc:
        return [], {}, str(exc), {}
    run = runs[-1]  # a command that trains several times: its last run is the point's
    global_batch = args.batch_per_gpu * args.gpus
    epochs = []
    for row in run.rows():
        steps = row.get("steps")
        images = (args.train_images or (steps * global_batch if steps else None)
                  or row.get("samples"))
        epochs.append({"epoch": row["epoch"], "seconds": row["seconds"], "steps": steps,
                       "images": images,
                       **{k: row[k] for k in ("loss", "accuracy") if row.get(k) is not None}})
    facts = {"images_per_epoch": epochs[0]["images"] if epochs else None,
             "logged_images_per_s": run.images_per_s, "streams": run.streams,
             "test_accuracy": run.test.get("test_accuracy"),
             "test_loss": run.test.get("test_loss"),
             "notes": run.warnings + ([f"the output holds {len(runs)} runs: the last is kept"]
                                      if len(runs) > 1 else [])}
    return epochs, facts, None, run.ended


def add_telemetry(epochs: list[dict], ended: dict[int, int], arrived: list[float],
                  sampler) -> None:
    """Each epoch's telemetry summary, over the window of its seconds that ends when its
    result line arrived (arrived[n - 1]: the sampler's time at the end of line n)."""
    from dlscale.telemetry import summarize

    for record in epochs:
        line = ended.get(record["epoch"])
        if line is None or line > len(arrived):
            continue
        end = arrived[line - 1]
        record.update(summarize(sampler.rows, len(sampler.handles), end - record["seconds"],
                                end, record["images"] or 0, sampler.interval))


def last_lines(path: Path, count: int) -> list[str]:
    """The last `count` non-empty lines of a file (its last 64 kB), each cut at 120."""
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - 65536))
        text = handle.read().decode("utf-8", "replace")
    lines = [x.strip() for x in text.splitlines() if x.strip()][-count:]
    return [x if len(x) <= 120 else x[:117] + "..." for x in lines]


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    started = datetime.now(UTC)
    state = args.out / STATE
    state.mkdir(parents=True, exist_ok=True)
    for name in (TRAIN_LOG, EPOCHS):  # each attempt starts over: the command resumes itself
        (state / name).unlink(missing_ok=True)
    command = render(args.command, values(args))
    log = state / TRAIN_LOG
    arrived: list[float] = []  # when each line of the log ended, in the sampler's seconds
    sampler = None
    with open(log, "ab", buffering=0) as out:
        header = f"dlscale command: {command}\n".encode()
        out.write(header)
        # the command's environment, and the record's: the allocation as sbatch gives it
        os.environ.update(slurm_allocation(dict(os.environ), args.nodes,
                                           args.tasks // args.nodes, True))
        if args.tasks == 1 and "SLURM_JOB_ID" in os.environ:
            # the SLURM plugin runs a one-task rule inside a job step of its own, which
            # holds the job's CPUs: an srun in the command shares them (srun --overlap)
            os.environ["SLURM_OVERLAP"] = "1"
        phases.mark("first_step")
        proc = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        if args.telemetry_interval > 0:
            from dlscale.telemetry import Sampler

            sampler = Sampler(args.out / TELEMETRY, args.telemetry_interval,
                              gpus=args.device == "gpu", pid=proc.pid).start()
        clock = sampler.now if sampler else lambda: 0.0
        arrived += [clock()] * header.count(b"\n")

        def forward(signum, _frame):  # launch.py's SIGTERM reaches the whole command
            os.killpg(proc.pid, signum)

        signal.signal(signal.SIGTERM, forward)
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            out.write(chunk)
            arrived.extend([clock()] * chunk.count(b"\n"))
            sys.stdout.buffer.write(chunk)
            sys.stdout.flush()
        returncode = proc.wait()
        phases.mark("last_step")
        notes = []
        if sampler:
            sampler.stop()
            if sampler.error:
                notes.append(f"telemetry stopped sampling: {sampler.error}")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # nothing left to forward to
    from dlscale.training import environment_facts  # after: it sets TF_USE_LEGACY_KERAS

    epochs, facts, problem, ended = read_output(log, args)
    if sampler:
        add_telemetry(epochs, ended, arrived, sampler)
    write_jsonl_atomic(state / EPOCHS, epochs)  # what finished, also for launch.py's record
    if returncode < 0:  # stopped by a signal: launch.py records it (timeout or killed)
        signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    if returncode != 0:
        status = Status.FAILED
        reason = f"the command exited with status {returncode}; its last lines: " + (
            " | ".join(last_lines(log, 3)))
    elif problem:
        status, reason = Status.FAILED, f"the command finished but {problem}"
    else:
        status, reason = Status.COMPLETED, None
    facts["notes"] = facts.get("notes", []) + notes
    telemetry = ({"file": TELEMETRY, "interval_s": args.telemetry_interval,
                  "gpu_note": sampler.gpu_note} if sampler else None)
    phases.mark("evaluated")
    RunRecord.ending(status, reason, planned(args), environment_facts(), facts,
                     command=command, epochs_completed=len(epochs), telemetry=telemetry,
                     # the training's time, as the command printed it
                     fit_seconds=round(sum(e["seconds"] for e in epochs), 3),
                     started=started.isoformat(timespec="seconds")).write(args.out)
    return 0 if status is Status.COMPLETED else 1
