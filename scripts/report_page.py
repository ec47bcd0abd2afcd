#!/usr/bin/env python3
"""Write the report's first page (dlscale/reporting/firstpage.py): the scaling answer, flags,
verdicts and failed points, with the overview figure.

  report_page.py results/tables/scaling.csv --amdahl results/tables/amdahl.csv \
      --failed results/tables/failed.csv --overview results/plots/overview.png \
      [--verdicts results/tables/history.csv] [--breakdown results/tables/breakdown.csv \
      --prediction results/tables/prediction.csv] -o results/report/first-page.rst
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scaling", type=Path)
    parser.add_argument("--amdahl", required=True, type=Path)
    parser.add_argument("--failed", required=True, type=Path)
    parser.add_argument("--overview", type=Path)
    parser.add_argument("--verdicts", type=Path, help="the history's verdicts (history.csv)")
    parser.add_argument("--breakdown", type=Path, help="breakdown.csv (dlscale.reporting.explain)")
    parser.add_argument("--prediction", type=Path, help="prediction.csv, with --breakdown")
    parser.add_argument("--min-efficiency", type=float, default=0.8,
                        help="analysis.min_efficiency: up to how many GPUs each series' "
                             "efficiency stays above it (default 0.8)")
    parser.add_argument("-o", "--out", required=True, type=Path)
    args = parser.parse_args(argv)

    from dlscale.core.files import atomic
    from dlscale.reporting.analysis import read_table
    from dlscale.reporting.firstpage import page

    try:
        text = page(read_table(args.scaling, ["series", "nodes", "gpus"]),
                    read_table(args.amdahl, ["series", "serial_fraction"]),
                    read_table(args.failed, ["run", "status"]), args.overview,
                    read_table(args.verdicts, ["series", "gpus", "verdict"])
                    if args.verdicts else None,
                    (read_table(args.breakdown, ["series", "nodes", "gpus"]),
                     read_table(args.prediction, ["series", "gpus"]))
                    if args.breakdown else None, args.min_efficiency)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic(args.out) as tmp:
        tmp.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
