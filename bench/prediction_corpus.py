#!/usr/bin/env python3
"""The prediction against real series of other centres (bench/corpus: MLPerf Training's
through bench/corpus_series.py, NVIDIA DeepLearningExamples' READMEs through corpus_dle.py):
each series' largest point held out and predicted from the others, by dlscale's model and
by four baselines side by side:

  last      the last measured efficiency carried to the held-out count
  ratio     the last efficiency ratio per doubling carried on (needs two fit counts)
  amdahl    Amdahl's law fitted on the fit points' speedups
  usl       Gunther's universal scalability law (contention, coherency) fitted likewise

Per method: the share of series within 10 % of the measured step, the median |error|; for
the model, whether the measured point lay inside its band, and how wide the band is (its
high / low step: median, 90th percentile, widest) and its interval score (Gneiting and
Raftery's for a 90 % band, relative to the measured step: the width plus 20 times any
miss; lower is better). Each error is (predicted - measured) / measured step time, as
prediction.csv's. `--doublings` gives the mean and median |error| of every method by the
ratio of the held-out count to the largest fit count (x2, x4, x8, more), as predictors of
scale (Lumos, Echo, SimAI) report error per scale step.

  .venv/bin/python bench/prediction_corpus.py [--markdown] [--series ID ...]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "scripts")]

import corpus_dle  # noqa: E402
import corpus_series  # noqa: E402

from dlscale.reporting.prediction.links import Link  # noqa: E402
from dlscale.reporting.prediction.series import (  # noqa: E402
    is_data_parallel,
    series_prediction,
)

WITHIN = 0.10
METHODS = ("model", "last", "ratio", "amdahl", "usl")


def network_links(network: dict) -> dict:
    """The series' stated network as the prediction's given links."""
    return {level: (Link(v["latency_us"] * 1e-6, v["bus_bandwidth_gbs"] * 1e9), "given")
            for level, v in network.items()}


def speedups(points: pd.DataFrame) -> tuple[list[float], list[float]]:
    """(count over the base's, throughput over the base's) per point."""
    base = points.iloc[0]
    return (list(points["gpus"] / base["gpus"]),
            list(points["images_per_s"] / base["images_per_s"]))


def grid_fit(model, ms: list[float], ss: list[float], grids: list[list[float]]):
    """The parameters on `grids` that fit the speedups best (least squares)."""
    best, chosen = math.inf, None
    for values in _product(grids):
        err = sum((model(m, *values) - s) ** 2 for m, s in zip(ms, ss, strict=True))
        if err < best:
            best, chosen = err, values
    return chosen


def _product(grids):
    if not grids:
        yield ()
        return
    for v in grids[0]:
        for rest in _product(grids[1:]):
            yield (v, *rest)


def amdahl(m: float, p: float) -> float:
    return 1 / ((1 - p) + p / m)


def usl(m: float, sigma: float, kappa: float) -> float:
    return m / (1 + sigma * (m - 1) + kappa * m * (m - 1))


FINE = [i / 1000 for i in range(1001)]
COARSE = [0.0] + [10 ** (e / 10) for e in range(-60, 1)]


def baselines(points: pd.DataFrame) -> dict[str, float]:
    """Each baseline's predicted step at the held-out (last) point from the others."""
    fit, held = points.iloc[:-1], points.iloc[-1]
    eff = list(fit["efficiency"])
    gpus = list(fit["gpus"])
    base = fit.iloc[0]
    per_gpu_base = base["images_per_s"] / base["gpus"]

    def step_at(efficiency):
        rate = efficiency * per_gpu_base * held["gpus"]
        return held["global_batch"] / rate if rate > 0 else math.nan

    out = {"last": step_at(eff[-1])}
    if len(eff) >= 2 and gpus[-1] > gpus[-2]:
        per = (eff[-1] / eff[-2]) ** (1 / math.log2(gpus[-1] / gpus[-2]))
        out["ratio"] = step_at(eff[-1] * per ** math.log2(held["gpus"] / gpus[-1]))
    else:
        out["ratio"] = math.nan
    ms, ss = speedups(fit)
    m_held = held["gpus"] / base["gpus"]
    if len(ms) >= 2:
        (p,) = grid_fit(amdahl, ms[1:], ss[1:], [FINE])
        out["amdahl"] = step_at(amdahl(m_held, p) / m_held)
        kappas = COARSE if len(ms) >= 3 else [0.0]
        sigma, kappa = grid_fit(usl, ms[1:], ss[1:], [COARSE, kappas])
        out["usl"] = step_at(usl(m_held, sigma, kappa) / m_held)
    else:  # one fit point: nothing to fit a law on
        out["amdahl"] = out["usl"] = math.nan
    return out


def evaluate(series: corpus_series.Series) -> dict:
    """The held-out error of every method on the series' data-parallel points (a point with
    fewer images a step than GPUs is not: series.NOT_DATA_PARALLEL; every method leaves it
    out alike, and `counts` marks it with a *)."""
    every = series.points.sort_values(["gpus", "nodes"]).reset_index(drop=True)
    parallel = is_data_parallel(every)
    points = every[parallel].reset_index(drop=True)
    held = points.iloc[-1]
    measured = held["global_batch"] / held["images_per_s"]
    empty = pd.DataFrame(columns=["series", "gpus", "nodes", "communication_share"])
    rows = series_prediction(series.id, points, empty, {}, known_size=series.gradient_bytes,
                             gpus_per_node=series.gpus_per_node,
                             network=network_links(series.network))
    row = next((r for r in rows if r["role"] == "held out"), {"note": rows[-1].get("note")})
    out = {"series": series.id,
           "counts": "/".join(f"{g}{'' if ok else '*'}"
                              for g, ok in zip(every["gpus"], parallel, strict=True)),
           "model": row.get("predicted_step_s", math.nan),
           "low": row.get("predicted_step_low_s", math.nan),
           "high": row.get("predicted_step_high_s", math.nan), "measured": measured,
           "note": row.get("note") or ""}
    out["ratio_of_counts"] = points["gpus"].iloc[-1] / points["gpus"].iloc[-2] \
        if len(points) > 1 else math.nan
    out |= baselines(points)
    for method in METHODS:
        out[f"{method}_error"] = (out[method] - measured) / measured
    out["inside"] = out["low"] <= measured <= out["high"]
    return out


ALPHA = 0.10  # the band as a 90 % interval (the coverage asked of it)


def interval_score(low: float, high: float, measured: float) -> float:
    """Gneiting and Raftery's interval score of [low, high] at `measured`, relative to
    it: the width, plus 2 / ALPHA times how far outside the point lies."""
    miss = max(low - measured, 0.0) + max(measured - high, 0.0)
    return (high - low + 2 / ALPHA * miss) / measured


def band_figures(table: pd.DataFrame) -> dict[str, float]:
    """The band's sharpness and coverage over the series it was given for."""
    banded = table.dropna(subset=["model", "low", "high"])
    width = banded["high"] / banded["low"]
    scores = [interval_score(r.low, r.high, r.measured) for r in banded.itertuples()]
    return {"series": len(banded), "coverage": banded["inside"].mean(),
            "median_width": width.median(), "p90_width": width.quantile(0.9),
            "widest": width.max(), "interval_score": sum(scores) / len(scores)}


def by_doubling(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and median |error| of each method by held-out count / largest fit count."""
    steps = pd.cut(table["ratio_of_counts"], [1, 2, 4, 8, math.inf],
                   labels=["x2", "x4", "x8", "more"])
    rows = []
    for label in ("x2", "x4", "x8", "more"):
        part = table[steps == label]
        row = {"held out / largest fit": label, "series": len(part)}
        for method in METHODS:
            errors = part[f"{method}_error"].dropna().abs()
            row[f"{method} mean"] = errors.mean() if len(errors) else math.nan
            row[f"{method} median"] = errors.median() if len(errors) else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def every_series() -> list[corpus_series.Series]:
    """The corpus: MLPerf Training's series (corpus_series), then DeepLearningExamples'
    READMEs' (corpus_dle)."""
    return [*corpus_series.load(), *corpus_dle.load()]


def summary(table: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for method in METHODS:
        errors = table[f"{method}_error"].dropna()
        rows.append({"method": method, "series": len(errors),
                     "within_10pct": (errors.abs() <= WITHIN).mean(),
                     "median_abs_error": errors.abs().median()})
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--series", nargs="*", help="only these series ids")
    parser.add_argument("--doublings", action="store_true",
                        help="also the |error| by held-out count / largest fit count")
    args = parser.parse_args(argv)
    corpus = [s for s in every_series() if not args.series or s.id in args.series]
    table = pd.DataFrame([evaluate(s) for s in corpus])
    total = summary(table)
    predicted = table.dropna(subset=["model"])
    coverage = predicted["inside"].mean()
    if args.markdown:
        cols = ["series", "counts", *(f"{m}_error" for m in METHODS), "inside"]
        shown = table[cols].copy()
        for m in METHODS:
            shown[f"{m}_error"] = shown[f"{m}_error"].map(
                lambda v: "–" if pd.isna(v) else f"{v:+.1%}")
        print(shown.to_markdown(index=False))
        print()
        print(total.to_markdown(index=False, floatfmt=".3f"))
    else:
        with pd.option_context("display.width", 200, "display.max_rows", 200):
            print(table[["series", "counts", *(f"{m}_error" for m in METHODS),
                         "inside"]].to_string(float_format=lambda v: f"{v:+.3f}"))
            print(total.to_string(float_format=lambda v: f"{v:.3f}"))
    unpredicted = {n.split(": the fits")[0] for n in table.loc[table["model"].isna(), "note"]}
    band = band_figures(table)
    print(f"band (high / low): median {band['median_width']:.2f}, 90th percentile "
          f"{band['p90_width']:.2f}, widest {band['widest']:.2f}; interval score (90 %, "
          f"relative) {band['interval_score']:.3f}; holds the point on "
          f"{band['coverage']:.0%} of {band['series']}")
    if args.doublings:
        print()
        doubling = by_doubling(table)
        print(doubling.to_markdown(index=False, floatfmt=".3f") if args.markdown
              else doubling.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"band holds the measured held-out point on {coverage:.0%} of the {len(predicted)} "
          f"series predicted ({len(table) - len(predicted)} not predicted: "
          f"{'; '.join(sorted(unpredicted))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
