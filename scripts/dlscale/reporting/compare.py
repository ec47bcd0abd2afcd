"""This study's scaling table beside other studies' (config `compare:`), in one table.

  dlscale compare results/tables/scaling.csv --compare "2025 on V100=old/scaling.csv" \
      -o results/tables/compared.csv

One row per study, series, nodes and GPU count, with a `study` column ("this study" or
the label) and the columns every scaling.csv has (dlscale.core.vocabulary.COMPARED_COLUMNS);
then why each point scales, where a study has breakdown.csv and prediction.csv beside its
scaling.csv (dlscale.reporting.explain): the dominant cost and the shares of compute, exposed
communication and input, the predicted efficiency and the model's verdict; and a row per
GPU count the model extrapolates to (`role` "extrapolated", its measured columns empty).
A study without them (an older dlscale's) has those columns empty.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlscale.core.vocabulary import COMPARED_COLUMNS
from dlscale.reporting.analysis import parse_compare, read_studies

WHY_COLUMNS = ("dominant", "compute_share", "communication_share", "input_share",
               "predicted_efficiency", "verdict")


def why(table, scaling: Path):
    """The study's points with WHY_COLUMNS from the breakdown.csv and prediction.csv
    beside its scaling.csv, and its extrapolated GPU counts as rows of their own."""
    import pandas as pd

    table = table.assign(role="measured")
    breakdown, prediction = (scaling.with_name(f"{n}.csv") for n in ("breakdown", "prediction"))
    keys = ["series", "nodes", "gpus"]
    if breakdown.is_file():
        parts = pd.read_csv(breakdown)[[*keys, *WHY_COLUMNS[:4]]]
        table = table.merge(parts, on=keys, how="left")
    if prediction.is_file():
        model = pd.read_csv(prediction)
        model = model[[*keys, "role", *WHY_COLUMNS[4:]]] if "nodes" in model else \
            model[["series", "gpus", "role", *WHY_COLUMNS[4:]]].assign(nodes=pd.NA)
        on = keys if model["nodes"].notna().all() else ["series", "gpus"]  # an older table
        table = table.merge(model[model["role"] != "extrapolated"].drop(
            columns=["role", *(k for k in keys if k not in on)]), on=on, how="left")
        table = pd.concat([table, model[model["role"] == "extrapolated"]], ignore_index=True)
    return table.reindex(columns=[*table.columns,
                                  *(c for c in WHY_COLUMNS if c not in table)])


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

    from dlscale.core.files import write_table

    try:
        studies = read_studies(args.scaling, parse_compare(args.compare, args.compare_json))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    paths = [args.scaling, *(p for _, p in parse_compare(args.compare, args.compare_json))]
    table = pd.concat([why(t[list(COMPARED_COLUMNS)], path).assign(study=label)
                       for (label, t), path in zip(studies, paths, strict=True)],
                      ignore_index=True)
    table = table[["study", "role", *COMPARED_COLUMNS, *WHY_COLUMNS]]
    write_table(table, args.out)
    print(f"wrote {args.out}: {len(studies)} studies, {len(table)} points")
    return 0

