#!/usr/bin/env python3
"""Do the model's priors carry to a series they were not set on? Leave-one-series-out over
bench/corpus (bench/prediction_corpus.py holds each series to its largest point).

The model has five figures set on the corpus (dlscale.reporting.prediction.model): the
compute's fixed share where the batch per GPU does not span enough to fit a line
(FIXED_SHARE) and a small batch's floor there (FLOOR_SAMPLES), the growth per doubling
with one GPU count (GROWTH_PRIOR), the span that lets a line be fitted (LINE_SPAN), and
the band's margin (BAND_MARGIN). The shipped values
were chosen looking at every series, so prediction_corpus.py's share is in-sample. Here,
for each series in turn:

  1. every combination of PRIORS is run on the corpus (each series' held-out error);
  2. the combination with the most of the *other* series within 10 % is taken (ties: the
     smaller median |error| on them, then the fewer values changed from the shipped ones);
  3. the margin is the smallest on MARGINS that holds the measured point inside the band
     on at least 90 % of the *other* series at that combination;
  4. the series left out is predicted with them: its error, and whether its point lies in
     its band, are the out-of-sample figures.

Prints each series' out-of-sample error beside its in-sample one (the shipped values), the
combination each fold chose where it is not the shipped one, and the two summaries.

  .venv/bin/python bench/prediction_crossval.py [--markdown]
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path
from unittest import mock

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "scripts")]

import corpus_series  # noqa: E402
import prediction_corpus  # noqa: E402

from dlscale.reporting.prediction import model  # noqa: E402

# the values tried for each prior: the shipped one and others either side
PRIORS = {"FIXED_SHARE": (0.0, 0.01, 0.02, 0.05, 0.1),
          "GROWTH_PRIOR": (0.0, 0.015, 0.03, 0.045, 0.06),
          "LINE_SPAN": (1.5, 2.0, 3.0, math.inf),
          "FLOOR_SAMPLES": (0.0, 0.5, 1.0, 2.0)}
MARGINS = tuple(i / 100 for i in range(61))
COVERAGE = 0.90  # the band's aim (docs/prediction.md)
SHIPPED = {name: getattr(model, name) for name in PRIORS}


def run(corpus: list, priors: dict) -> pd.DataFrame:
    """Every series' held-out error and band under `priors` (the shipped margin): one row a
    series (series, error, low, high, measured); NaN where the model predicts none."""
    with mock.patch.multiple(model, **priors):
        rows = [prediction_corpus.evaluate(s) for s in corpus]
    return pd.DataFrame([{"series": r["series"], "error": r["model_error"], "low": r["low"],
                          "high": r["high"], "measured": r["measured"]} for r in rows])


def within(errors: pd.Series) -> int:
    return int((errors.abs() <= prediction_corpus.WITHIN).sum())


def choose(runs: dict[tuple, pd.DataFrame], others: list[str]) -> tuple:
    """The combination with the most of `others` within 10 %, then the smaller median
    |error| on them, then the fewer values changed from the shipped ones (a key of `runs`)."""
    shipped = tuple(SHIPPED.values())

    def score(key):
        errors = runs[key].set_index("series").loc[others, "error"].dropna()
        changed = sum(v != s for v, s in zip(key, shipped, strict=True))
        return (-within(errors), errors.abs().median(), changed)

    return min(runs, key=score)


def inside(table: pd.DataFrame, margin: float) -> pd.Series:
    """Whether each row's measured point lies in its band widened to `margin` (the band is
    the alternative fits' ends times (1 + margin) either way: model.BAND_MARGIN's place)."""
    scale = (1 + margin) / (1 + model.BAND_MARGIN)
    return (table["low"] / scale <= table["measured"]) & (table["measured"]
                                                          <= table["high"] * scale)


def smallest_margin(table: pd.DataFrame) -> float:
    """The smallest of MARGINS that holds at least COVERAGE of `table`'s predicted rows."""
    predicted = table.dropna(subset=["error"])
    return next((m for m in MARGINS if inside(predicted, m).mean() >= COVERAGE), MARGINS[-1])


def cross_validate(corpus: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per series: in-sample and out-of-sample error, band, the fold's choice; the grid's
    in-sample share per combination)."""
    runs = {values: run(corpus, dict(zip(PRIORS, values, strict=True)))
            for values in itertools.product(*PRIORS.values())}
    shipped = runs[tuple(SHIPPED.values())].set_index("series")
    rows = []
    for series in shipped.index:
        others = [s for s in shipped.index if s != series]
        key = choose(runs, others)
        table = runs[key].set_index("series")
        margin = smallest_margin(table.loc[others])
        left_out = table.loc[[series]]
        predicted = pd.notna(left_out["error"].iloc[0])
        rows.append({"series": series, "in_sample_error": shipped.loc[series, "error"],
                     "in_sample_inside": bool(inside(shipped.loc[[series]],
                                                     model.BAND_MARGIN).iloc[0]),
                     "error": left_out["error"].iloc[0],
                     "inside": bool(inside(left_out, margin).iloc[0]) and predicted,
                     "margin": margin,
                     "chosen": "shipped" if key == tuple(SHIPPED.values()) else
                     ", ".join(f"{n}={v:g}" for n, v in zip(PRIORS, key, strict=True)
                               if v != SHIPPED[n])})
    grid = pd.DataFrame([{**dict(zip(PRIORS, key, strict=True)),
                          "within_10pct": within(t["error"].dropna()),
                          "median_abs_error": t["error"].abs().median()}
                         for key, t in runs.items()])
    return pd.DataFrame(rows), grid


def summary(folds: pd.DataFrame) -> pd.DataFrame:
    predicted = folds.dropna(subset=["error"])
    rows = []
    for name, column, covered in (
            ("in sample (the shipped priors)", "in_sample_error", "in_sample_inside"),
            ("left out (priors and margin from the others)", "error", "inside")):
        errors = predicted[column]
        rows.append({"priors": name, "series": len(errors),
                     "within_10pct": (errors.abs() <= prediction_corpus.WITHIN).mean(),
                     "median_abs_error": errors.abs().median(),
                     "band_holds": predicted[covered].mean()})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    args = parser.parse_args(argv)
    folds, grid = cross_validate(corpus_series.load())
    total = summary(folds)
    best = grid.sort_values(["within_10pct", "median_abs_error"],
                            ascending=[False, True]).head(5)
    shown = folds.copy()
    for column in ("in_sample_error", "error"):
        shown[column] = shown[column].map(lambda v: "–" if pd.isna(v) else f"{v:+.1%}")
    shown = shown.drop(columns="in_sample_inside")
    if args.markdown:
        print(shown.to_markdown(index=False))
        print()
        print(total.to_markdown(index=False, floatfmt=".3f"))
        print()
        print(best.to_markdown(index=False, floatfmt=".3f"))
    else:
        with pd.option_context("display.width", 200, "display.max_rows", 200):
            print(shown.to_string(index=False))
            print(total.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
            print("the grid's best combinations in sample:")
            print(best.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    predicted = folds.dropna(subset=["error"])
    print(f"folds that chose the shipped priors: {(predicted['chosen'] == 'shipped').sum()} "
          f"of {len(predicted)}; margins chosen: {folds['margin'].min():.2f} to "
          f"{folds['margin'].max():.2f} (shipped {model.BAND_MARGIN})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
