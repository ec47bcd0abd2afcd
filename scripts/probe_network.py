#!/usr/bin/env python3
"""Time the all-reduce across one node count of the study (rule probe_network).

  probe_network.py --probe-out results/network/multiworker/nodes2.json \
      --largest-bytes 6316072 -- TRAIN.PY'S FLAGS
  probe_network.py --probe-out results/network/multiworker/nodes2.json --failed LOG
  probe_network.py --probe-out results/network/multiworker/nodes2.json --ended JOBFILE \
      --failed LOG

Runs on every worker that launch.py starts, with the flags of the study's largest point
on that node count (its strategy, devices and software); the chief writes the JSON:
the all-reduce's seconds per buffer size (dlscale.train.probe says how they are timed).
Where the workers fail, the rule calls it again with --failed: the JSON then says why (the
workers' error), the prediction goes without the probe, and the study's tables are made as
ever. Where SLURM ends the probe's job (scancel, its time limit, a node's failure), the
rule's retry calls it with --ended: the JSON gives that job's state.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dlscale.core.cli import exit_without_teardown


def main(argv=None) -> int:
    from dlscale.train import probe
    from dlscale.train.settings import parse

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe-out", type=Path, required=True, help="the JSON to write")
    parser.add_argument("--largest-bytes", type=int,
                        help="the largest buffer to time (the study's largest gradient)")
    parser.add_argument("--failed", type=Path, metavar="LOG",
                        help="the probe's workers failed: write their error in LOG "
                             "as the probe's record, so that the tables are still made")
    parser.add_argument("--ended", type=Path, metavar="JOBFILE",
                        help="with --failed: SLURM ended the probe's job, whose id JOBFILE "
                             "holds: write its state as the probe's record")
    parser.add_argument("train_flags", nargs=argparse.REMAINDER, help="-- then train.py's flags")
    args = parser.parse_args(argv)
    flags = args.train_flags[1:] if args.train_flags[:1] == ["--"] else args.train_flags
    if args.ended and not args.failed:
        parser.error("--ended needs --failed LOG (the probe's log, named in the record)")
    if args.ended:
        return probe.record_ended(args.probe_out, args.ended, args.failed)
    if args.failed:
        return probe.record_failure(args.probe_out, args.failed)
    if args.largest_bytes is None or args.largest_bytes < 4:
        parser.error(f"--largest-bytes must be at least 4, got {args.largest_bytes}")
    return probe.run(parse(flags, __doc__), args.largest_bytes, args.probe_out)


if __name__ == "__main__":
    exit_without_teardown(main)
