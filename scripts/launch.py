#!/usr/bin/env python3
"""Start the worker processes of one training point (dlscale.launch.launcher says how).

  launch.py -- python train.py ...                          # one task
  launch.py --plan '{"tasks": 2}' -- python train.py ...
  launch.py --plan PLAN --record DIR --log LOG [--time-limit-min T] -- python train.py ...

The plan (one JSON object, planning's: dlscale.plan.pointflags.launch_plan) says how the
workers start: tasks, tasks_per_node, nodes, horovod, mpi_launcher, timeline; and what a
record made here says of the point: planned (run.json's planned keys), batch_file.
One task runs as it is; several run through srun inside a SLURM allocation, as local
processes with TF_CONFIG outside one, or as Horovod ranks. With --record the point's
outcome is recorded in DIR whatever happens, and the exit status is 0 once it is (128 +
the signal when SIGTERM or SIGINT stopped it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlscale.launch import launcher


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--plan", type=launcher.read_plan, default=launcher.read_plan("{}"),
                        help="how the workers start and the planned record, as one JSON "
                             "object (default: one task, nothing planned)")
    parser.add_argument("--record", type=Path, metavar="DIR",
                        help="run folder: record the outcome whatever happens, then exit 0")
    parser.add_argument("--log", help="the job's log, named in a recorded failure")
    parser.add_argument("--time-limit-min", type=float,
                        help="outside SLURM: the job's time limit, for the watchdog "
                             "(inside a SLURM job its end is read from squeue)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="outside SLURM: the cores granted to the point (Snakemake's "
                             "{threads}), shared by its workers (their thread count)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the worker command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads {args.threads}: expected at least 1")
    if args.plan.timeline and not args.record:
        parser.error("a plan with a timeline needs --record DIR (it is written there)")
    return launcher.run(args, command)


if __name__ == "__main__":
    sys.exit(main())
