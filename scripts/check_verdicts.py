#!/usr/bin/env python3
"""Fail when a point is outside the tolerances of its reference value.

  check_verdicts.py results/tables/references.csv -o results/tables/verdicts.csv

references.csv (aggregate.py) holds every point that has a reference, with the measured
value, the accepted range and the verdict. When every verdict is pass, this copies it
to OUT and exits 0; otherwise it prints each failing point and exits 1, writing
nothing, so `snakemake results/tables/verdicts.csv` exits non-zero after a regression.
A study without any point that has a reference fails too: nothing was checked.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlscale.core.files import write_table
from dlscale.reporting.analysis import read_table
from dlscale.reporting.references import REFERENCE_COLUMNS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("references", type=Path, help="references.csv from aggregate.py")
    parser.add_argument("-o", "--out", required=True, type=Path, help="written when all pass")
    args = parser.parse_args(argv)
    try:
        table = read_table(args.references, REFERENCE_COLUMNS)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if table.empty:
        print(f"error: no point of the study has a reference value in {args.references}: "
              "check the model, gpus, strategy and precision of the references",
              file=sys.stderr)
        return 1
    failed = table[table["verdict"] != "pass"]
    for _, row in failed.iterrows():
        print(f"fail: {row['series']} on {row['gpus']} GPU(s), {row['nodes']} node(s): "
              f"{row['reference_metric']} {row['measured']:.4g}, expected "
              f"{row['reference_low']:.4g} to {row['reference_high']:.4g} "
              f"(reference {row['reference']:.4g})", file=sys.stderr)
    if len(failed):
        print(f"error: {len(failed)} of {len(table)} point(s) outside their reference's "
              f"tolerances (listed in {args.references})", file=sys.stderr)
        return 1
    write_table(table, args.out)
    print(f"all {len(table)} point(s) with a reference pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
