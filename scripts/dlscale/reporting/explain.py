"""Why a series scales as it does, and what more GPUs would give: breakdown.csv and
prediction.csv from the points' breakdown.json (dlscale.measure.profwindow) and scaling.csv.

breakdown.csv: per point, the traced steps' time per part, communication exposed and
total, the dominant part, the gradient's all-reduce timed alone (nccl-tests' busbw).
prediction.csv: per series (all its node counts), the model of its step
(dlscale.reporting.prediction) checked on its largest point and carried to the next two
doublings. docs/prediction.md says how.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from dlscale.core import columns
from dlscale.core.contract import BREAKDOWN
from dlscale.measure.stepsplit import most_named
from dlscale.reporting.gradients import known
from dlscale.reporting.prediction.links import failed_probes, given_links, probe_links
from dlscale.reporting.prediction.series import series_prediction

# a traced step this much slower than the epochs' gets a note: the window runs each step
# to its end (an H200's ResNet50V2: 34 ms against 15 ms, docs/benchmarks.md, "GPUs")
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
        for key in ("wait", "transfer"):  # older records lack them: empty, not 0
            said = [s[f"comm_{key}_s"] for s in summaries if f"comm_{key}_s" in s]
            row[f"{key}_share"] = sum(said) / wall if wall and said else math.nan
        row["slowest_replica"] = most_named(summaries)
        if row["wait_share"] > row["transfer_share"]:  # NaN compares false
            who = f" ({row['slowest_replica']})" if row["slowest_replica"] else ""
            notes.append(f"the replicas waited for the slowest{who} longer than the "
                         f"collectives moved data ({row['wait_share']:.0%} against "
                         f"{row['transfer_share']:.0%} of the step): skew, not the link")
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

def external_models(scaling: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """The models of the series whose runs are all external logs."""
    theirs = runs.groupby("series")["source"].agg(lambda s: set(s) == {"external"})
    return sorted({m for s, m in zip(scaling["series"], scaling["model"], strict=True)
                   if theirs.get(s, False)})


def gradient_sizes(scaling: pd.DataFrame, runs: pd.DataFrame, build) -> dict[str, int]:
    """The gradient's bytes by model, for series without breakdown.json: an external
    log's model as `build` (gradients.model_gradient_bytes) sizes it; dlscale's own
    points without a window (analysis.breakdown: 0) from the models table only (a model
    of yours is never built here)."""
    sizes = {m: size for m in external_models(scaling, runs) if (size := build(m))}
    table = known()
    return {**{m: table[m] for m in scaling["model"].dropna().unique() if m in table},
            **sizes}


def tables(scaling: pd.DataFrame, runs: pd.DataFrame, runs_dir: Path,
           sizes: dict[str, int] | None = None, network: dict | None = None,
           probes: list[Path] | None = None, gpus_per_node: int | None = None
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(breakdown.csv, prediction.csv); `sizes`: gradient bytes by model, for the series
    without breakdown.json (external logs). A series over several node counts is one
    series: its doublings cross node boundaries over the link measured between nodes, or
    the one `network` (analysis.network) gives, or the network's `probes` measured (they
    win over what is given); a node holds `gpus_per_node` (analysis.gpus_per_node) where
    given, else what the runs report."""
    given, probed, failed = given_links(network), probe_links(probes), failed_probes(probes)
    found = read_breakdowns(runs, runs_dir)
    breakdown = point_rows(scaling, runs, found)
    rows = []
    for series, points in scaling.groupby("series", sort=False):
        by_point: dict[tuple[int, int], list[dict]] = {}
        mine = runs[runs["run"].isin(found) & (runs["series"] == series)]
        for _, r in mine.iterrows():
            by_point.setdefault((int(r["gpus"]), int(r["nodes"])), []).append(found[r["run"]])
        devices = set(runs.loc[runs["series"] == series, "device"].dropna()) \
            if "device" in runs else set()
        size = (sizes or {}).get(points["model"].iloc[0])
        counts = pd.to_numeric(runs.loc[runs["series"] == series, "system_gpu_count"],
                               errors="coerce").dropna() if "system_gpu_count" in runs \
            else pd.Series(dtype=float)
        strategy = points["strategy"].iloc[0]
        mine = series_prediction(series, points, breakdown, by_point, size,
                                 shared_cores=devices == {"cpu"},
                                 gpus_per_node=gpus_per_node or (
                                     int(counts.max()) if len(counts) else None),
                                 network={**given, **probed.get(strategy, {})})
        for row in mine:  # a failed probe of its strategy: the note says which and why
            row["note"] = "; ".join(filter(None, [row.get("note"), *failed.get(strategy, [])]))
        rows += mine
    return breakdown, pd.DataFrame(rows, columns=PREDICTION_ORDER)
