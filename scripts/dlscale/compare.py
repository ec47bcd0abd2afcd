"""This study's scaling table beside other studies' (config `compare:`), in one table.

  dlscale compare results/tables/scaling.csv --compare "2025 on V100=old/scaling.csv" \
      -o results/tables/compared.csv

One row per study, series, nodes and GPU count, with a `study` column ("this study" or
the label) and the columns every scaling.csv has (dlscale.vocabulary.COMPARED_COLUMNS).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlscale.analysis import parse_compare, read_studies
from dlscale.vocabulary import COMPARED_COLUMNS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scaling", type=Path, help="this study's scaling.csv")
    parser.add_argument("--compare", action="append", default=[], metavar="LABEL=PATH")
    parser.add_argument("--compare-json", metavar="JSON",
                        help="[[label, path], ...]: other studies, as the workflow passes them")
    parser.add_argument("-o", "--out", required=True, type=Path)
    args = parser.parse_args(argv)

    import pandas as pd

    from dlscale.files import write_table

    try:
        studies = read_studies(args.scaling, parse_compare(args.compare, args.compare_json))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    table = pd.concat([t[list(COMPARED_COLUMNS)].assign(study=label) for label, t in studies],
                      ignore_index=True)[["study", *COMPARED_COLUMNS]]
    write_table(table, args.out)
    print(f"wrote {args.out}: {len(studies)} studies, {len(table)} points")
    return 0

