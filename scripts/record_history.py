#!/usr/bin/env python3
"""Add the study's points to the results history, and compare them with it.

  record_history.py results/tables/scaling.csv --runs results/tables/runs.csv \
      --db history.sqlite --compare 3 --tolerance 0.1 --config-json '{...}' \
      --verdicts results/tables/history.csv --studies results/tables/history_studies.csv

Writes --verdicts (per point: its epoch time, the median of the same point in the last
--compare earlier studies on the same system, the change and pass/fail/none) and
--studies (those studies' points, for the plots). A point already in the history is not
added again (see dlscale/reporting/history.py). Exit status 0, also when a point is slower than
its history: the verdicts say so, and a warning names it.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
from pathlib import Path

from dlscale.core.files import write_table


def git_commit(folder: Path) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() or None


def version() -> str | None:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("dlscale")
    except PackageNotFoundError:
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scaling", type=Path)
    parser.add_argument("--runs", required=True, type=Path)
    parser.add_argument("--runs-dir", type=Path, default=Path("results/runs"))
    parser.add_argument("--db", required=True, type=Path, help="the history (SQLite)")
    parser.add_argument("--compare", type=int, default=0, help="earlier studies to compare")
    parser.add_argument("--tolerance", type=float, default=0.1)
    parser.add_argument("--system", help="the system's name (default: GPU or CPU model)")
    parser.add_argument("--config-json", default="{}", help="the study's config")
    parser.add_argument("--workflow", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the workflow's folder, for its git commit")
    parser.add_argument("--verdicts", required=True, type=Path)
    parser.add_argument("--studies", required=True, type=Path)
    args = parser.parse_args(argv)

    import pandas as pd

    from dlscale.core.contract import RecordError
    from dlscale.reporting import history
    from dlscale.reporting.analysis import SCALING_COLUMNS, read_table

    try:
        scaling = read_table(args.scaling, SCALING_COLUMNS)
        runs = read_table(args.runs, ["run", "source", "series", "nodes", "gpus", "counted"])
        points = history.study_points(scaling, runs, args.runs_dir, args.system)
        study = {"workdir": str(Path.cwd()), "host": socket.gethostname(),
                 "git_commit": git_commit(args.workflow),
                 "dlscale_version": version(),
                 "config": json.loads(args.config_json)}
    except (ValueError, RecordError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        added, earlier, verdicts = history.add_and_compare(args.db, study, points,
                                                           args.compare, args.tolerance)
    except (history.HistoryError, OSError) as exc:
        # an unusable history costs this step only: the tables say there is nothing to
        # compare with, and the plots are drawn without the history's lines
        print(f"warning: the history was not used: {exc}", file=sys.stderr)
        write_table(pd.DataFrame(columns=history.VERDICT_COLUMNS), args.verdicts)
        write_table(history.compared_table([]), args.studies)
        return 0
    write_table(pd.DataFrame(verdicts, columns=history.VERDICT_COLUMNS), args.verdicts)
    write_table(history.compared_table(earlier), args.studies)
    studies = len({h["study_id"] for h in earlier})
    print(f"history {args.db}: {added} new point(s) of {len(points)}; compared with "
          f"{studies} earlier stud{'y' if studies == 1 else 'ies'}")
    for row in verdicts:
        if row["verdict"] == "fail":
            print(f"warning: {row['series']} on {row['gpus']} GPU(s), {row['nodes']} node(s): "
                  f"epoch {row['epoch_time_s']:.3g} s is {row['change']:.0%} slower than the "
                  f"median {row['history_median_s']:.3g} s of {row['history_points']} earlier "
                  f"point(s) (tolerance {row['tolerance']:.0%})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
