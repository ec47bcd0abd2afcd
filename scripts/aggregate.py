#!/usr/bin/env python3
"""Aggregate per-run epoch tables into the study's tables.

  aggregate.py results/runs/*/*/*/epochs.csv --out-dir results/tables

Writes epochs.csv (every epoch of every run), runs.csv (one row per run, with whether
it counts and why not), failed.csv (the runs that failed or do not count, with status
and reason) and scaling.csv (one row per series, nodes and GPU count:
epoch time with std and 95% CI, images/s, speedup, efficiency, accuracy and its change
against the 1-GPU point, flagged beyond --accuracy-tolerance; Karp-Flatt serial fraction,
GPU-hours and cost per epoch, time to --target-accuracy; reference and verdict). Also
amdahl.csv (per series: the fitted serial fraction and the speedup it predicts at 2x and
4x the largest GPU count) and references.csv (the points with a reference value, their
verdicts; --references takes the entries as JSON) and systems.csv (each distinct
system description of the runs: host, CPU, memory, GPU, driver, CUDA, versions, container,
modules, partition). Definitions: dlscale/reporting/analysis.py,
dlscale/reporting/amdahl.py, dlscale/reporting/references.py and docs/analysis.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlscale.core.files import write_table
from dlscale.core.vocabulary import DEFAULTS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tables", nargs="+", type=Path, help="per-run epochs.csv files")
    parser.add_argument("--out-dir", required=True, type=Path)
    defaults = DEFAULTS["analysis"]
    parser.add_argument("--skip-epochs", type=int, default=defaults["skip_epochs"],
                        help="first epochs left out of the means (default: %(default)s)")
    parser.add_argument("--accuracy-tolerance", type=float,
                        default=defaults["accuracy_tolerance"],
                        help="flag |accuracy - 1-GPU accuracy| above this (default: %(default)s)")
    parser.add_argument("--target-accuracy", type=float,
                        help="time each run until its training accuracy reaches this")
    parser.add_argument("--gpu-hour-price", type=float, help="price of one GPU-hour")
    parser.add_argument("--references", default="[]", metavar="JSON",
                        help="reference entries (a JSON list), as checked at planning time")
    args = parser.parse_args(argv)

    import pandas as pd

    from dlscale.reporting.amdahl import fit_table
    from dlscale.reporting.analysis import (
        EPOCH_REQUIRED,
        failed_points,
        read_table,
        scaling,
        summarize_runs,
        systems,
    )
    from dlscale.reporting.references import judge

    try:
        epochs = pd.concat([read_table(t, list(EPOCH_REQUIRED)) for t in args.tables],
                           ignore_index=True)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    runs = summarize_runs(epochs, args.skip_epochs, args.target_accuracy)
    table = scaling(epochs, runs, args.skip_epochs, args.accuracy_tolerance,
                    args.gpu_hour_price)
    table, verdicts = judge(table, json.loads(args.references))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_table(epochs.dropna(subset=["epoch"]), args.out_dir / "epochs.csv")
    write_table(runs, args.out_dir / "runs.csv")
    write_table(failed_points(runs), args.out_dir / "failed.csv")
    write_table(table, args.out_dir / "scaling.csv")
    write_table(fit_table(table), args.out_dir / "amdahl.csv")
    write_table(verdicts, args.out_dir / "references.csv")
    write_table(systems(runs), args.out_dir / "systems.csv")
    checked = runs["log_check"].fillna("").astype(str)
    for _, run in runs[~checked.isin(["", "ok"])].iterrows():
        what = ("train.log does not match the records" if run["source"] == "dlscale" else
                f"{run.get('checked_against', 'its own lines')} differs from the log's records")
        print(f"warning: run {run['run']}: {what} ({run['log_check']}); the tables use the "
              "records", file=sys.stderr)
    for _, run in runs[~runs["counted"]].iterrows():
        print(f"warning: run {run['run']} is not counted: {run['problem']}", file=sys.stderr)
    if not table.empty and table["accuracy_flag"].any():
        for _, row in table[table["accuracy_flag"]].iterrows():
            print(f"warning: {row['series']} on {row['gpus']} GPU(s): accuracy differs from "
                  f"1 GPU by {row['accuracy_delta']:+.3f}", file=sys.stderr)
    for _, row in table[table["input_bound"].astype(bool)].iterrows():
        print(f"warning: {row['series']} on {row['gpus']} GPU(s) is input-bound: "
              f"{row['images_per_s']:.4g} images/s against {row['synthetic_images_per_s']:.4g} "
              f"on synthetic input (ratio {row['input_ratio']:.2f})", file=sys.stderr)
    for _, row in verdicts[verdicts["verdict"] == "fail"].iterrows():
        print(f"warning: {row['series']} on {row['gpus']} GPU(s): {row['reference_metric']} "
              f"{row['measured']:.4g} is outside [{row['reference_low']:.4g}, "
              f"{row['reference_high']:.4g}] of reference {row['reference']:.4g}",
              file=sys.stderr)
    print(f"wrote {args.out_dir}/epochs.csv, runs.csv, failed.csv, scaling.csv, amdahl.csv, "
          f"references.csv, systems.csv: {len(runs)} run(s), "
          f"{int(runs['counted'].sum())} counted, {len(table)} point(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
