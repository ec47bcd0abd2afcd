#!/usr/bin/env python3
"""Fail when a training point of the study did not complete.

  check_points.py results/tables/runs.csv -o results/checks/points.txt

The last step of the workflow: the tables and plots are written by then and list the
failed points; this makes the workflow's exit status say so too. Writes OUT (one line
per point) and exits 0 when every dlscale point completed or ran out of memory (a
result: the first page names the largest batch that fit); otherwise prints each failed
point with its status and reason and exits 1, writing nothing. External runs are
reported by aggregate.py, not checked here: they were not run by this workflow.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlscale.core.contract import Status
from dlscale.core.files import atomic
from dlscale.jobs.outcomes import RESULTS
from dlscale.reporting.analysis import read_table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, help="runs.csv from aggregate.py")
    parser.add_argument("-o", "--out", required=True, type=Path, help="file written on success")
    args = parser.parse_args(argv)
    try:
        runs = read_table(args.runs, ["run", "source", "status", "problem"])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ours = runs[runs["source"] == "dlscale"]
    failed = ours[~ours["status"].isin([s.value for s in RESULTS])]
    for _, run in ours[ours["status"] == Status.OUT_OF_MEMORY].iterrows():
        print(f"out of memory: {run['run']}: a result, not a failure (the first page's "
              "What fits in memory)", file=sys.stderr)
    for _, run in failed.iterrows():
        print(f"failed point: {run['run']}: {run['problem']}", file=sys.stderr)
    if len(failed):
        print(f"error: {len(failed)} of {len(ours)} point(s) did not complete (listed in "
              "results/tables/failed.csv); run the same command again to rerun them",
              file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic(args.out) as tmp:
        tmp.write_text("".join(f"{run.run} {run.status}\n" for run in ours.itertuples()))
    print(f"all {len(ours)} point(s) completed or ran out of memory")
    return 0


if __name__ == "__main__":
    sys.exit(main())
