#!/usr/bin/env python3
"""Start the worker processes of one training point (dlscale.launch.launcher says how).

  launch.py --tasks N [--tasks-per-node M] -- python train.py ...
  launch.py --horovod --tasks N [--nodes K] [--mpi-launcher mpirun] -- python ...
  launch.py --record DIR --log LOG [--time-limit-min T] -- python train.py ...

One task runs as it is; several run through srun inside a SLURM allocation, as local
processes with TF_CONFIG outside one, or as Horovod ranks (--horovod). With --record the
point's outcome is recorded in DIR whatever happens, and the exit status is 0 once it is
(128 + the signal when SIGTERM or SIGINT stopped it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlscale.launch import launcher


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1, help="worker processes (default: 1)")
    parser.add_argument("--tasks-per-node", type=int, help="workers per node under SLURM")
    parser.add_argument("--nodes", type=int, default=1, help="nodes the tasks span")
    parser.add_argument("--horovod", action="store_true", help="start the tasks as Horovod ranks")
    parser.add_argument("--mpi-launcher", help="Horovod across nodes: the site's MPI launcher")
    parser.add_argument("--record", type=Path, metavar="DIR",
                        help="run folder: record the outcome whatever happens, then exit 0")
    parser.add_argument("--log", help="the job's log, named in a recorded failure")
    parser.add_argument("--time-limit-min", type=float,
                        help="outside SLURM: the job's time limit, for the watchdog "
                             "(inside a SLURM job its end is read from squeue)")
    parser.add_argument("--timeline", action="store_true",
                        help="with --horovod: rank 0 writes Horovod's timeline to "
                             "DIR/timeline.json (--record DIR)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the worker command")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given after --")
    if args.tasks < 1:
        parser.error(f"--tasks must be at least 1, got {args.tasks}")
    if args.timeline and not (args.horovod and args.record):
        parser.error("--timeline goes with --horovod and --record DIR")
    return launcher.run(args, command)


if __name__ == "__main__":
    sys.exit(main())
