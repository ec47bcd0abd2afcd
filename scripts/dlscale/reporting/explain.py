"""Why a series scales as it does, and what more GPUs would give: breakdown.csv and
prediction.csv from the points' breakdown.json (dlscale.train.profwindow) and scaling.csv.

breakdown.csv, one row per point: the traced steps' covered time per part (shares of the
step's wall time, pooled over the point's repeats), communication exposed and total, the
dominant part, and the all-reduce of the model's gradient timed alone on the point's
replicas with its bus bandwidth (nccl-tests: busbw = bytes / time x 2(n-1)/n).

prediction.csv, one row per series and GPU count, measured and beyond: a communication
model fitted on the series' smaller points and checked on its largest.
- the all-reduce of S bytes on n replicas takes t(n, S) = 2(n-1) alpha + 2(n-1)/n S / B
  (ring all-reduce in alpha-beta form); each multi-GPU point's timings (six sizes up to
  the gradient's) give its alpha and B by least squares, the fit points' medians are the
  series';
- a step is the part no communication explains, C(n) = measured step - exposed
  communication, taken linear in n through the fit points (constant with one: on GPUs
  each replica's work is the same at any n; replicas sharing one machine's cores make it
  grow), plus the exposed part of the all-reduce: r x t(n, gradient), r the fit points'
  median of exposed communication per step over the all-reduce timed alone (1 where no
  trace says: no overlap);
- fit points: every measured GPU count but the largest; the largest is predicted
  ("held out") and its error reported; then the next two doublings ("extrapolated").
  A held-out error beyond EXPLAINED_ERROR flags the series "not explained".
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from dlscale.core import columns
from dlscale.core.contract import BREAKDOWN
from dlscale.reporting.gradients import ASSUMED_CLASSES, ASSUMED_SIZE

EXPLAINED_ERROR = 0.25  # |predicted - measured| / measured step time on the held-out point
# a traced step this much slower than the epochs' step gets a note: the window runs each
# step to its end, so what the epochs overlap shows there (on an H200, ResNet50V2's
# traced steps took 34 ms against 15 ms: docs/benchmarks.md, "GPUs")
WINDOW_SLOWER = 1.2
PARTS = {"compute": "compute_s", "communication": "comm_exposed_s", "input": "input_s",
         "other": "other_s"}
KEYS = ["series", "model", "strategy", "precision", "nodes", "gpus"]


def read_breakdowns(runs: pd.DataFrame, runs_dir: Path) -> dict[str, dict]:
    """Each counted dlscale run's breakdown.json, by run."""
    out = {}
    counted = runs[(runs["source"] == "dlscale") & runs["counted"].astype(bool)]
    for run in counted["run"].drop_duplicates():
        path = Path(runs_dir) / str(run) / BREAKDOWN
        if path.is_file():
            out[run] = json.loads(path.read_text())
    return out


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line; slope 0 through one point."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return (sum(ys) / len(ys), 0.0) if ys else (math.nan, 0.0)
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
             / sum((x - mx) ** 2 for x in xs))
    return my - slope * mx, slope


def alpha_beta(collective: dict | None, n: int) -> tuple[float, float] | None:
    """(latency s, bus bandwidth bytes/s) of one point's timed all-reduce, or None."""
    if not collective or "seconds" not in collective or n < 2:
        return None
    a, b = fit_line([float(s) for s in collective["bytes"]], collective["seconds"])
    alpha = max(a, 0.0) / (2 * (n - 1))
    bandwidth = 2 * (n - 1) / (n * b) if b > 0 else math.inf
    return alpha, bandwidth


FROM_STEP_TIMES = ("no timed all-reduce (an external log): the bandwidth is fitted on the "
                   "step times of 1 GPU and the next count, the latency taken as 0, the "
                   f"gradient of the model with {ASSUMED_CLASSES} classes at {ASSUMED_SIZE} px")


def from_step_times(gpus: list[int], steps: dict[int, float],
                    size: float) -> tuple[float, float] | None:
    """(0, bus bandwidth) from step times alone: the 1-GPU step is all compute, the next
    count's extra time is the all-reduce of `size` bytes; None without a 1-GPU point, a
    third count to check on, or an extra time."""
    if 1 not in gpus or len(gpus) < 3:
        return None
    n = gpus[gpus.index(1) + 1]
    extra = steps[n] - steps[1]
    return (0.0, 2 * (n - 1) / n * size / extra) if extra > 0 else None


def allreduce_s(n: float, size: float, alpha: float, bandwidth: float) -> float:
    if n < 2:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size / bandwidth


def point_rows(scaling: pd.DataFrame, runs: pd.DataFrame,
               found: dict[str, dict]) -> pd.DataFrame:
    """breakdown.csv: one row per point of scaling.csv."""
    rows = []
    for _, point in scaling.iterrows():
        mine = runs[(runs["run"].isin(found)) & (runs["series"] == point["series"])
                    & (runs["gpus"] == point["gpus"]) & (runs["nodes"] == point["nodes"])]
        records = [found[r] for r in mine["run"].drop_duplicates()]
        row = {k: point[k] for k in KEYS}
        row["step_s"] = point["global_batch"] / point["images_per_s"]
        summaries = [r["summary"] for r in records if r.get("summary")]
        notes = sorted({n for r in records for n in r.get("notes", [])})
        if not records:
            notes.append("no breakdown.json: analysis.breakdown is 0, or the point is an "
                         "external log or a command")
        wall = sum(s["wall_s"] for s in summaries)
        row["window_steps"] = sum(s["steps"] for s in summaries)
        row["window_step_s"] = (sorted(s["step_s"] for s in summaries)[len(summaries) // 2]
                                if summaries else math.nan)
        if summaries and row["window_step_s"] > WINDOW_SLOWER * row["step_s"]:
            notes.append(f"the traced steps took {row['window_step_s'] * 1e3:.1f} ms, the "
                         f"epochs' {row['step_s'] * 1e3:.1f} ms: the window runs each step "
                         "to its end before the next (what the epochs overlap with the "
                         "device's work, the next batch's preparation, is input or other "
                         "there) and the profiler adds its own cost")
        for part, key in PARTS.items():
            row[f"{part}_share"] = sum(s[key] for s in summaries) / wall if wall else math.nan
        row["comm_total_share"] = (sum(s["comm_total_s"] for s in summaries) / wall
                                   if wall else math.nan)
        kinds = {r.get("communication") for r in records} - {None}
        row["communication"] = ("not separable" if "not separable" in kinds
                                else kinds.pop() if len(kinds) == 1 else "")
        if row["communication"] == "not separable":
            row["communication_share"] = math.nan  # never 0: the trace cannot tell
        shares = {p: row[f"{p}_share"] for p in PARTS if not pd.isna(row[f"{p}_share"])}
        row["dominant"] = max(shares, key=shares.get) if shares else ""
        colls = [r.get("collective") for r in records]
        row["gradient_bytes"] = records[0].get("gradient_bytes") if records else math.nan
        timed = [c for c in colls if c and "seconds" in c]
        row["allreduce_s"] = (sorted(c["seconds"][-1] for c in timed)[len(timed) // 2]
                              if timed else math.nan)
        n = int(point["gpus"])
        row["bus_bandwidth_gbs"] = (timed[0]["bytes"][-1] / row["allreduce_s"]
                                    * 2 * (n - 1) / n / 1e9 if timed and n > 1 else math.nan)
        notes += [f"the all-reduce was not timed: {c['error']}" for c in colls
                  if c and "error" in c]
        row["method"] = records[0].get("method", "") if records else ""
        checked = [r for r in records if r.get("xprof")]
        row["xprof_check"] = ("" if not checked else "differs" if any(
            n.startswith("xprof") for r in checked for n in r.get("notes", [])) else "agrees")
        row["notes"] = "; ".join(notes)
        rows.append(row)
    return pd.DataFrame(rows, columns=[*KEYS, *BREAKDOWN_ORDER])


BREAKDOWN_ORDER = [c.name for c in columns.BREAKDOWN]
PREDICTION_ORDER = [c.name for c in columns.PREDICTION]


def series_prediction(series: str, points: pd.DataFrame, breakdown: pd.DataFrame,
                      found_by_gpus: dict[int, list[dict]],
                      known_size: int | None = None) -> list[dict]:
    """prediction.csv's rows for one series (its scaling.csv rows, one node count).
    `known_size`: the gradient's bytes where no breakdown.json gives them (an external
    log of a keras.applications model)."""
    points = points.sort_values("gpus")
    gpus = [int(g) for g in points["gpus"]]
    steps = dict(zip(gpus, points["global_batch"] / points["images_per_s"], strict=True))
    batch = dict(zip(gpus, points["global_batch"], strict=True))
    eff = dict(zip(gpus, points["efficiency"], strict=True))
    mine = breakdown[breakdown["series"] == series].set_index("gpus")
    fit = gpus[:-1] if len(gpus) > 1 else gpus
    held = gpus[-1] if len(gpus) > 1 else None
    base = {"series": series}

    def note_rows(note):
        return [{**base, "gpus": g, "role": "measured", "measured_step_s": steps[g],
                 "measured_efficiency": eff[g], "note": note} for g in gpus]

    params = [ab for g in fit if g > 1 for r in found_by_gpus.get(g, [])
              if (ab := alpha_beta(r.get("collective"), g))]
    size = next((r.get("gradient_bytes") for g in gpus for r in found_by_gpus.get(g, [])
                 if r.get("gradient_bytes")), known_size)
    note = ""
    if not size:
        return note_rows("no breakdown.json and no known model to take the gradient's size "
                         "from: not predicted")
    if not params and not found_by_gpus and (fitted := from_step_times(gpus, steps, size)):
        params, note = [fitted], FROM_STEP_TIMES  # an external log: its step times only
    elif not params:
        return note_rows("no multi-GPU point below the largest timed its all-reduce: "
                         "nothing to fit (a sweep of 1, 2 and 4 GPUs fits on 2, checks 4)")
    alpha = sorted(p[0] for p in params)[len(params) // 2]
    bandwidth = sorted(p[1] for p in params)[len(params) // 2]

    def exposed(g):  # a log's step times alone: its all-reduce taken as wholly exposed
        if note:
            return allreduce_s(g, size, alpha, bandwidth)
        share = mine["communication_share"].get(g, math.nan) if g in mine.index else math.nan
        return 0.0 if pd.isna(share) else share * steps[g]

    ratios = [exposed(g) / t for g in fit if g > 1
              and (t := allreduce_s(g, size, alpha, bandwidth)) > 0]
    exposure = sorted(ratios)[len(ratios) // 2] if ratios else 1.0
    c0, c1 = fit_line([float(g) for g in fit], [steps[g] - exposed(g) for g in fit])
    weak = points["scaling"].iloc[0] != "strong" if "scaling" in points else True
    per_gpu = batch[gpus[0]] / gpus[0]

    def predict(g):
        return c0 + c1 * g + exposure * allreduce_s(g, size, alpha, bandwidth)

    t1 = predict(1)
    rows = []
    for g in [*gpus, gpus[-1] * 2, gpus[-1] * 4]:
        measured = g in steps
        step = predict(g)
        global_batch = per_gpu * g if weak else batch[gpus[0]]
        speedup = (global_batch / step) / ((per_gpu if weak else batch[gpus[0]]) / t1)
        row = {**base, "gpus": g,
               "role": "fit" if g in fit else "held out" if g == held else "extrapolated",
               "measured_step_s": steps.get(g, math.nan), "predicted_step_s": step,
               "error": (step - steps[g]) / steps[g] if measured else math.nan,
               "measured_efficiency": eff.get(g, math.nan),
               "predicted_efficiency": speedup / g, "latency_us": alpha * 1e6,
               "bus_bandwidth_gbs": bandwidth / 1e9, "gradient_bytes": size,
               "exposure": exposure, "verdict": "", "note": note}
        rows.append(row)
    verdict = ("no held-out point (one GPU count below the largest is needed)" if held is None
               else "explained" if abs(rows[gpus.index(held)]["error"]) <= EXPLAINED_ERROR
               else f"not explained: the held-out error is over {EXPLAINED_ERROR:.0%}")
    for row in rows:
        row["verdict"] = verdict
    return rows


def external_models(scaling: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """The models of the series whose runs are all external logs."""
    theirs = runs.groupby("series")["source"].agg(lambda s: set(s) == {"external"})
    return sorted({m for s, m in zip(scaling["series"], scaling["model"], strict=True)
                   if theirs.get(s, False)})


def tables(scaling: pd.DataFrame, runs: pd.DataFrame, runs_dir: Path,
           sizes: dict[str, int] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(breakdown.csv, prediction.csv); `sizes`: gradient bytes by model, for the series
    without breakdown.json (external logs)."""
    found = read_breakdowns(runs, runs_dir)
    breakdown = point_rows(scaling, runs, found)
    rows = []
    for (series, nodes), points in scaling.groupby(["series", "nodes"], sort=False):
        by_gpus: dict[int, list[dict]] = {}
        for _, r in runs[runs["run"].isin(found) & (runs["series"] == series)
                         & (runs["nodes"] == nodes)].iterrows():
            by_gpus.setdefault(int(r["gpus"]), []).append(found[r["run"]])
        label = series if scaling["nodes"].nunique() == 1 else f"{series} ({nodes} node(s))"
        part = breakdown[breakdown["nodes"] == nodes]
        size = (sizes or {}).get(points["model"].iloc[0])
        rows += [{**r, "series": label}
                 for r in series_prediction(series, points, part, by_gpus, size)]
    return breakdown, pd.DataFrame(rows, columns=PREDICTION_ORDER)

