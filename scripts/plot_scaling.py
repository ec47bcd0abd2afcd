#!/usr/bin/env python3
"""Draw the scaling plots from scaling.csv.

  plot_scaling.py results/tables/scaling.csv --runs results/tables/runs.csv \
      --out-dir results/plots

Writes epoch_time, throughput, speedup (with the ideal line and, with --amdahl, each
series' fitted Amdahl model dashed to 4x the largest GPU count), efficiency, accuracy,
cost (epoch time against GPU-hours per epoch: the fastest and the cheapest point), an
overview of them, and knobs (throughput and memory per GPU against each knob of
sweep.knobs), each as PNG (for reading) and SVG (for papers). One line per
series (model, and strategy/precision when the sweep compares them; split by nodes only
where a series has one GPU count on several node counts), so ResNet50V2 and ResNet152V2
share a chart; error bars show the 95% confidence interval when a point has repeats or
several timed epochs. --compare LABEL=PATH draws another study's scaling.csv beside
this one (dashed, open markers); --history CSV draws each earlier study of the results
history the same way. Only measured points are drawn; with --runs, every
figure says how many points failed or do not count and are missing from it, and the
subtitle gains what the drawn runs used (batch per GPU and epochs per model, precisions,
strategies, weak or strong scaling). Labels are drawn as written ($, _, % and braces
included: no mathtext).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scaling", type=Path, help="scaling.csv from aggregate.py")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--subtitle", default="", help="a line shown under each title")
    parser.add_argument("--runs", type=Path,
                        help="runs.csv: the figures name the runs that are not drawn and "
                             "the subtitle says what the drawn ones used")
    parser.add_argument("--amdahl", type=Path,
                        help="amdahl.csv: each series' fitted model in the speedup plot")
    parser.add_argument("--compare", action="append", default=[], metavar="LABEL=PATH",
                        help="another study's scaling.csv, drawn beside this one")
    parser.add_argument("--compare-json", metavar="JSON",
                        help="[[label, path], ...]: other studies, as the workflow passes them")
    parser.add_argument("--history", type=Path, metavar="CSV",
                        help="earlier studies from the results history (a `study` column), "
                             "each drawn beside this one")
    args = parser.parse_args(argv)

    from dlscale.core.vocabulary import COMPARED_COLUMNS, KNOBS
    from dlscale.reporting.amdahl import AMDAHL_COLUMNS
    from dlscale.reporting.analysis import (
        SCALING_COLUMNS,
        compared_study,
        parse_compare,
        read_studies,
        read_table,
    )
    from dlscale.reporting.knobplots import draw_knobs
    from dlscale.reporting.plots import plot_all

    try:
        table = read_table(args.scaling, SCALING_COLUMNS)
        runs = read_table(args.runs, ["run", "counted", "problem"]) if args.runs else None
        amdahl = read_table(args.amdahl, AMDAHL_COLUMNS) if args.amdahl else None
        others = read_studies(args.scaling, parse_compare(args.compare, args.compare_json))[1:]
        if args.history:
            earlier = read_table(args.history, ["study", *COMPARED_COLUMNS])
            others += [(label, compared_study(group.drop(columns="study")))
                       for label, group in earlier.groupby("study", sort=False)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    written = plot_all(table, args.out_dir, args.subtitle, runs, others, amdahl)
    written += draw_knobs(table, runs, args.out_dir / KNOBS)
    print(f"wrote {len(written)} files to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
