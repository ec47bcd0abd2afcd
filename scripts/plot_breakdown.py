#!/usr/bin/env python3
"""The plots of why the series scale as they do.

  plot_breakdown.py results/tables/breakdown.csv --prediction results/tables/prediction.csv \
      --out-dir results/plots

Writes where_the_time_goes.png/.svg and prediction.png/.svg (dlscale/reporting/whyplots.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from dlscale.reporting.whyplots import plot_why


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("breakdown", type=Path)
    ap.add_argument("--prediction", type=Path, required=True)
    ap.add_argument("--out-dir", type=Path, required=True)
    args = ap.parse_args()
    for path in plot_why(pd.read_csv(args.breakdown), pd.read_csv(args.prediction),
                         args.out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
