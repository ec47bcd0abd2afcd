"""Serial fraction from measured speedups: Karp-Flatt per point, an Amdahl fit per series.

Definitions (docs/analysis.md states them for users):
- Amdahl's law with serial fraction f: S(N) = 1 / (f + (1 - f) / N).
- Karp-Flatt, the experimentally determined serial fraction of one point:
  e(N) = (1/S(N) - 1/N) / (1 - 1/N), for N > 1. A constant e over N means the loss is
  serial work; an e that grows with N means overhead that grows with N (communication).
- The fit: the f in [0, 1] that minimises sum over the points with N > 1 of
  (S_measured(N) - S(N; f))^2 (least squares on the speedups themselves). Its standard
  error, from the curvature of that sum: se = sqrt(RSS / (n - 1) / sum (dS/df)^2) with
  dS/df = -(1 - 1/N) / (f + (1 - f)/N)^2; given when n >= 2 points have N > 1.
- The model's prediction at 2x and 4x the largest measured GPU count: S(N; f).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

AMDAHL_COLUMNS = ["series", "points", "serial_fraction", "serial_fraction_se", "max_gpus",
                  "gpus_2x", "speedup_2x", "efficiency_2x", "gpus_4x", "speedup_4x",
                  "efficiency_4x"]


# decimals a serial fraction is given to: far finer than any measurement
DIGITS = 12


def amdahl(n, f: float):
    """Amdahl's speedup on n processors with serial fraction f."""
    n = np.asarray(n, dtype=float)
    return 1.0 / (f + (1.0 - f) / n)


def karp_flatt(speedup, n):
    """The experimentally determined serial fraction; NaN for N = 1 or no speedup."""
    speedup, n = np.asarray(speedup, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 / speedup - 1.0 / n) / (1.0 - 1.0 / n)
    return np.where(n > 1, np.round(e, DIGITS), np.nan)  # 1/s - 1/n leaves float noise


def _sse(f: float, n: np.ndarray, s: np.ndarray) -> float:
    return float(np.sum((s - amdahl(n, f)) ** 2))


def fit_serial_fraction(n, speedup) -> tuple[float, float]:
    """(f, its standard error) by least squares on the speedups of the points with N > 1;
    (nan, nan) without such a point, se nan with only one."""
    n, s = np.asarray(n, dtype=float), np.asarray(speedup, dtype=float)
    keep = (n > 1) & np.isfinite(s)
    n, s = n[keep], s[keep]
    if len(n) == 0:
        return math.nan, math.nan
    grid = np.linspace(0.0, 1.0, 2001)
    best = grid[int(np.argmin([_sse(f, n, s) for f in grid]))]
    lo, hi = max(0.0, best - 1 / 2000), min(1.0, best + 1 / 2000)
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(80):  # golden-section search inside the best grid cell's neighbours
        a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
        if _sse(a, n, s) <= _sse(b, n, s):
            hi = b
        else:
            lo = a
    # to the search's resolution: a perfect speedup is 0, not the 4.77e-21 where the
    # search stopped
    f = round((lo + hi) / 2, DIGITS)
    if len(n) < 2:
        return f, math.nan
    slope = -(1 - 1 / n) / (f + (1 - f) / n) ** 2
    se = math.sqrt(_sse(f, n, s) / (len(n) - 1) / float(np.sum(slope ** 2)))
    return f, se


def fit_table(scaling: pd.DataFrame) -> pd.DataFrame:
    """One row per series with a speedup beyond 1 GPU: f, its error, the predictions."""
    rows = []
    for series, group in scaling.dropna(subset=["speedup"]).groupby("series", sort=True):
        if "base_gpus" in group and (group["base_gpus"] != 1).any():
            continue  # a speedup over more GPUs than one: Amdahl's model is over 1 GPU
        used = group[group["gpus"] > 1]
        if used.empty:
            continue
        f, se = fit_serial_fraction(used["gpus"], used["speedup"])
        top = int(group["gpus"].max())
        rows.append({"series": series, "points": len(used), "serial_fraction": f,
                     "serial_fraction_se": se, "max_gpus": top,
                     "gpus_2x": 2 * top, "speedup_2x": float(amdahl(2 * top, f)),
                     "efficiency_2x": float(amdahl(2 * top, f)) / (2 * top),
                     "gpus_4x": 4 * top, "speedup_4x": float(amdahl(4 * top, f)),
                     "efficiency_4x": float(amdahl(4 * top, f)) / (4 * top)})
    return pd.DataFrame(rows, columns=AMDAHL_COLUMNS)
