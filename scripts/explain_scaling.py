#!/usr/bin/env python3
"""Where each point's step time goes, and what more GPUs would give.

  explain_scaling.py results/tables/scaling.csv --runs results/tables/runs.csv \
      --runs-dir results/runs --breakdown results/tables/breakdown.csv \
      --prediction results/tables/prediction.csv

Reads each counted run's breakdown.json (its profiled window and its timed all-reduce)
beside its records; writes breakdown.csv (per point) and prediction.csv (per series and
GPU count, with the next two doublings). Definitions: dlscale/reporting/explain.py and
docs/analysis.md ("Why it scales").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from dlscale.core.files import write_table
from dlscale.reporting.explain import gradient_sizes, tables
from dlscale.reporting.gradients import model_gradient_bytes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scaling", type=Path)
    ap.add_argument("--runs", type=Path, required=True)
    ap.add_argument("--runs-dir", type=Path, required=True)
    ap.add_argument("--breakdown", type=Path, required=True)
    ap.add_argument("--prediction", type=Path, required=True)
    ap.add_argument("--network", type=json.loads, metavar="JSON",
                    help="analysis.network: the links no point measured (numbers, or "
                         "nccl-tests outputs)")
    ap.add_argument("--gpus-per-node", type=int, metavar="N",
                    help="analysis.gpus_per_node: the GPUs a node holds, where no run says")
    ap.add_argument("--probes", type=Path, nargs="*", default=[], metavar="JSON",
                    help="the network's probes (results/network/STRATEGY/nodesN.json)")
    args = ap.parse_args()
    scaling, runs = pd.read_csv(args.scaling), pd.read_csv(args.runs)
    sizes = gradient_sizes(scaling, runs, model_gradient_bytes)
    breakdown, prediction = tables(scaling, runs, args.runs_dir, sizes, args.network,
                                   args.probes, args.gpus_per_node)
    write_table(breakdown, args.breakdown)
    write_table(prediction, args.prediction)
    for _, row in prediction.drop_duplicates("series").iterrows():
        said = [row[k] for k in ("verdict", "note") if isinstance(row[k], str) and row[k]]
        print(f"{row['series']}: {said[0] if said else 'not predicted'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
