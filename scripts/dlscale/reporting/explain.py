"""Why a series scales as it does, and what more GPUs would give: breakdown.csv and
prediction.csv from the points' breakdown.json (dlscale.train.profwindow) and scaling.csv.

breakdown.csv: per point, the traced steps' time per part, communication exposed and
total, the dominant part, the gradient's all-reduce timed alone (nccl-tests' busbw).
prediction.csv: per series (all its node counts), a model of the step fitted on the
smaller points and checked on the largest: compute in the form the hardware gives it, plus
the ring all-reduce's time (a node's links, or the network across nodes) beyond what
compute hides. docs/analysis.md, "The model", says how.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from dlscale.core import columns
from dlscale.core.contract import BREAKDOWN
from dlscale.reporting.gradients import ASSUMED_CLASSES, ASSUMED_SIZE, known
from dlscale.train.stepsplit import most_named

EXPLAINED_ERROR = 0.25  # |predicted - measured| / measured step time on the held-out point
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


def allreduce_s(n: float, size: float, alpha: float, bandwidth: float) -> float:
    """A ring all-reduce of `size` bytes over n members (alpha-beta form)."""
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

FROM_STEP_TIMES = ("no timed all-reduce (an external log): the communication is fitted on "
                   "the step times of 1 GPU and the next count, with the gradient of the "
                   f"model at {ASSUMED_CLASSES} classes and {ASSUMED_SIZE} px; no latency or "
                   "bandwidth is claimed")
NO_NETWORK = ("across nodes: no link between nodes was measured on a smaller point or by "
              "a probe, or given, so nothing is predicted past a node boundary")
MEASURED, FITTED, GIVEN = "measured", "fitted from step times", "given"
LEVELS = ("within a node", "between nodes")


@dataclass(frozen=True)
class Link:
    """One level of the all-reduce as a ring: latency per hop (s), bus bandwidth (B/s)."""
    alpha: float
    bandwidth: float

    def ring_s(self, members: int, size: float) -> float:
        return allreduce_s(members, size, self.alpha, self.bandwidth)


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else math.nan


def allreduce_time(gpus: int, nodes: int, size: float, intra: Link | None,
                   inter: Link | None) -> float:
    """The gradient's ring all-reduce on `gpus`: within one node at that level's pace; a
    ring that crosses nodes goes at the network's (the level between nodes, as a
    multi-node nccl-tests run measures it over all its ranks). NaN where the level it
    needs has no link."""
    link = intra if nodes == 1 else inter
    if gpus < 2:
        return 0.0
    return math.nan if link is None else link.ring_s(gpus, size)


def links(fit: list[tuple[int, int]], records: dict) -> tuple[Link | None, Link | None]:
    """(within a node, between nodes) from the fit points' timed all-reduces: the one-node
    points' medians, and the medians of the points over several nodes."""
    levels: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for g, n in fit:
        for r in records.get((g, n), []):
            if g > 1 and (ab := alpha_beta(r.get("collective"), g)):
                levels[n > 1].append(ab)
    return tuple(Link(median([a for a, _ in found]), median([b for _, b in found]))
                 if found else None for found in (levels[False], levels[True]))


def fit_compute(points: list[tuple[int, int]], compute: dict, batch: dict,
                shared_cores: bool):
    """C(gpus, nodes, global batch): the step's time that no communication explains, in
    the form the hardware gives it, never below 0. On GPUs each replica works on its own
    share of the batch: C = a + k x (x the batch per GPU, a and k at least 0), which weak
    scaling (x kept: C kept) and strong scaling (x = B/n: a fixed part and a part that
    falls as 1/n) both are; one x: the fit points' median. Replicas sharing one machine's
    cores (logical CPU devices) share its work: past the largest fit point, where the
    cores are busiest, C grows with the global batch; below it one replica may leave
    cores idle, so each fit point keeps its own."""
    values = {p: max(compute[p], 0.0) for p in points}
    if shared_cores:
        k = values[points[-1]] / batch[points[-1]]
        return lambda g, n, b: values[(g, n)] if (g, n) in values else k * b
    xs = [batch[p] / p[0] for p in points]
    ys = [values[p] for p in points]
    if len(set(xs)) < 2:
        c = median(ys)
        return lambda g, n, b: c
    a, k = fit_line(xs, ys)
    if k < 0:  # more work per GPU, less time: no per-image part to be seen
        a, k = median(ys), 0.0
    elif a < 0:  # no fixed part: all of it per image
        a, k = 0.0, median([y / x for x, y in zip(xs, ys, strict=True)])
    return lambda g, n, b: a + k * b / g


def series_prediction(series: str, points: pd.DataFrame, breakdown: pd.DataFrame,
                      found: dict[tuple[int, int], list[dict]], known_size: int | None = None,
                      shared_cores: bool = False, gpus_per_node: int | None = None,
                      network: dict[str, tuple[Link, str]] | None = None) -> list[dict]:
    """prediction.csv's rows for one series (its scaling.csv rows, over any node counts):
    fitted on every point but the largest, that one held out, then the next two
    doublings, on as many nodes as hold them (`gpus_per_node`: the node's GPUs, as its
    runs reported them). `found`: the breakdown.json records by (gpus, nodes);
    `known_size`: the gradient's bytes where none gives them (an external log);
    `network`: the links given for the levels no fit point measured (given_links)."""
    points = points.assign(nodes=points["nodes"] if "nodes" in points else 1)
    points = points.sort_values(["gpus", "nodes"])
    keys = [(int(g), int(n)) for g, n in zip(points["gpus"], points["nodes"], strict=True)]
    steps = dict(zip(keys, points["global_batch"] / points["images_per_s"], strict=True))
    batch = dict(zip(keys, points["global_batch"].astype(float), strict=True))
    eff = dict(zip(keys, points["efficiency"], strict=True))
    spread = dict(zip(keys, (points["epoch_time_ci95"] / points["epoch_time_s"]).fillna(0.0)
                      if "epoch_time_ci95" in points else [0.0] * len(keys), strict=True))
    fit = keys[:-1] if len(keys) > 1 else keys
    held = keys[-1] if len(keys) > 1 else None
    said = points["scaling"].iloc[0] if "scaling" in points else None
    # an outside log says no scaling: one global batch over its counts is strong scaling
    weak = (said != "strong" if said in ("weak", "strong")
            else len(keys) < 2 or len(set(batch.values())) > 1)
    mine = breakdown[breakdown["series"] == series]
    shares = {(int(r.gpus), int(r.nodes)): r for r in mine.itertuples()} \
        if "nodes" in mine else {(int(r.gpus), 1): r for r in mine.itertuples()}

    def note_rows(note):
        return [{"series": series, "nodes": n, "gpus": g, "role": "measured",
                 "measured_step_s": steps[(g, n)], "measured_efficiency": eff[(g, n)],
                 "note": note} for g, n in keys]

    size = next((r.get("gradient_bytes") for k in keys for r in found.get(k, [])
                 if r.get("gradient_bytes")), known_size)
    if not size:
        return note_rows("no breakdown.json and no known model to take the gradient's size "
                         "from: not predicted")
    intra, inter = links(fit, found)
    sources = {level: MEASURED for level, link in zip(LEVELS, (intra, inter), strict=True)
               if link}
    for level, key in zip(LEVELS, ("within_node", "between_nodes"), strict=True):
        if level not in sources and key in (network or {}):  # measured wins over given
            link, sources[level] = network[key]
            intra, inter = (link, inter) if key == "within_node" else (intra, link)
    fitted, notes = False, []
    if intra is None and inter is None:
        if found or not (guess := fitted_link(keys, steps, size, weak)):
            return note_rows("no multi-GPU point below the largest timed its all-reduce: "
                             "nothing to fit (a sweep of 1, 2 and 4 GPUs fits on 2, checks 4)"
                             if found else "no timed all-reduce, no network given, and not "
                             "three counts on one node from 1 GPU (one to fit the "
                             "communication on, one to check): not predicted")
        intra, fitted, sources = guess, True, {LEVELS[0]: FITTED}
        notes.append(FROM_STEP_TIMES)
    if inter is None and any(n > 1 for _, n in keys):
        notes.append(NO_NETWORK)
    kinds = set(sources.values())
    source = kinds.pop() if len(kinds) == 1 else "; ".join(f"{k}: {v}" for k, v in sources.items())

    def timed(g, n):
        return allreduce_time(g, n, size, intra, inter)

    # the step's compute: the step less its exposed communication (the trace's; all of
    # the all-reduce where no trace tells them apart: nothing hidden)
    compute, hidden = {}, []
    for g, n in fit:
        total = timed(g, n) if g > 1 else 0.0
        row = shares.get((g, n))
        share = getattr(row, "communication_share", math.nan) if row is not None else math.nan
        # a share of the traced steps (maybe slower than the epochs': profiled); never
        # more than the epochs' step nor the all-reduce timed alone (what the trace shows
        # beyond it, a collective's own cost or a wait, recurs at every multi-replica count)
        traced = getattr(row, "window_step_s", math.nan) if row is not None else math.nan
        traced = steps[(g, n)] if pd.isna(traced) else traced
        exposed = total if pd.isna(share) or fitted else min(share * traced, steps[(g, n)], total)
        compute[(g, n)] = steps[(g, n)] - exposed
        if g > 1 and not pd.isna(share) and not fitted and compute[(g, n)] > 0:
            hidden.append((total - exposed) / compute[(g, n)])  # exposed <= total
    usable = [k for k in fit if not math.isnan(compute[k])]
    if not usable:
        return note_rows(NO_NETWORK)
    hideable = median(hidden) if hidden else 0.0
    per_gpu = batch[keys[0]] / keys[0][0]
    c_of = fit_compute(usable, compute, batch, shared_cores)
    per_node = max(math.ceil(g / n) for g, n in keys)
    if shared_cores:  # logical devices: no node boundary to cross
        per_node = math.inf
    elif gpus_per_node:
        per_node = max(per_node, gpus_per_node)
    elif not any(n > 1 for _, n in keys):  # a series over nodes shows how many a node holds
        per_node = math.inf
        notes.append("no run says how many GPUs a node has: the doublings are taken "
                     "within one node")
    residual = max((abs(c_of(g, n, batch[(g, n)]) - max(compute[(g, n)], 0.0))
                    / steps[(g, n)] for g, n in usable), default=0.0)
    band = max([spread[k] for k in usable] + [0.0]) + residual

    def predict(g, n, b):
        c = c_of(g, n, b)
        comm = max(timed(g, n) - hideable * c, 0.0) if g > 1 else 0.0
        return c + comm, comm

    base = keys[0]
    base_step, _ = predict(*base, batch[base])
    rows = []
    largest = keys[-1][0]
    doublings = [(m, max(1, math.ceil(m / per_node))) for m in (2 * largest, 4 * largest)]
    for g, n in [*keys, *doublings]:
        measured = (g, n) in steps
        b = batch[(g, n)] if measured else (per_gpu * g if weak else batch[keys[-1]])
        step, comm = predict(g, n, b)
        speedup = (b / step) / (batch[base] / base_step)
        total = timed(g, n) if g > 1 else 0.0
        rows.append({
            "series": series, "nodes": n, "gpus": g,
            "role": "fit" if (g, n) in fit else "held out" if (g, n) == held
            else "extrapolated",
            "measured_step_s": steps.get((g, n), math.nan), "predicted_step_s": step,
            "predicted_step_low_s": step / (1 + band),  # a factor either way: never below 0
            "predicted_step_high_s": step * (1 + band),
            "error": (step - steps[(g, n)]) / steps[(g, n)] if measured else math.nan,
            "measured_efficiency": eff.get((g, n), math.nan),
            "predicted_efficiency": speedup / (g / base[0]),
            "comm_s": comm, "exposure": comm / total if total > 0 else math.nan,
            "hideable": hideable,
            "latency_us": intra.alpha * 1e6 if intra and not fitted else math.nan,
            "bus_bandwidth_gbs": intra.bandwidth / 1e9 if intra and not fitted
            else math.nan,
            "latency_inter_us": inter.alpha * 1e6 if inter else math.nan,
            "bus_bandwidth_inter_gbs": inter.bandwidth / 1e9 if inter else math.nan,
            "link_source": source, "gradient_bytes": size, "verdict": "",
            "note": "; ".join(notes + [NO_NETWORK] if math.isnan(step) and NO_NETWORK
                              not in notes else notes)})
    held_row = rows[keys.index(held)] if held else None
    verdict = ("no held-out point (one GPU count below the largest is needed)" if held is None
               else "not predicted: " + NO_NETWORK if math.isnan(held_row["error"])
               else "explained" if abs(held_row["error"]) <= EXPLAINED_ERROR
               else f"not explained: the held-out error is over {EXPLAINED_ERROR:.0%}")
    for row in rows:
        row["verdict"] = verdict
    return rows


def fitted_link(keys: list[tuple[int, int]], steps: dict, size: float, weak: bool
                ) -> Link | None:
    """A link standing for what an external log's step times imply: the 1-GPU step is all
    compute, the next count on one node spends the rest in the all-reduce's bandwidth
    term (no latency); None without a 1-GPU point, a count after it to fit and one more
    to check on, or an extra time. Never printed as a bandwidth: it is a residual."""
    single = [g for g, n in keys if n == 1]
    if 1 not in single or len(keys) < 3 or len(single) < 2:
        return None
    n = single[1]
    compute = steps[(1, 1)] if weak else steps[(1, 1)] / n
    extra = steps[(n, 1)] - compute
    return Link(0.0, 2 * (n - 1) / n * size / extra) if extra > 0 else None


def given_links(network: dict | None) -> dict[str, tuple[Link, str]]:
    """analysis.network as links by level ("within_node", "between_nodes") with where
    each came from: an nccl-tests output (its ranks' hosts say the level), or numbers."""
    from dlscale.logparse import nccltests

    out = {}
    for path in (network or {}).get("nccl_tests") or []:
        result = nccltests.parse(Path(path).read_text(errors="replace"), str(path))
        level, alpha, bandwidth = nccltests.ring_level(result)
        out[level] = (Link(alpha, bandwidth), f"nccl-tests ({Path(path).name})")
    for level in ("within_node", "between_nodes"):
        if given := (network or {}).get(level):
            out[level] = (Link(given["latency_us"] * 1e-6, given["bus_bandwidth_gbs"] * 1e9),
                          GIVEN)
    return out


def probe_links(paths: list[Path] | None) -> dict[str, dict[str, tuple[Link, str]]]:
    """The network's probes (dlscale.train.probe) as the link between nodes, by strategy:
    the probe over the most nodes of each strategy."""
    found: dict[str, dict] = {}
    for probe in (json.loads(Path(path).read_text()) for path in paths or []):
        if "collective" in probe and probe["nodes"] > found.get(probe["strategy"], {}).get(
                "nodes", 1):  # a failed probe says why instead (dlscale.train.probe)
            found[probe["strategy"]] = probe
    return {s: {"between_nodes": (Link(*ab), f"{MEASURED} (probe: {p['nodes']} nodes)")}
            for s, p in found.items() if (ab := alpha_beta(p["collective"], p["gpus"]))}


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
           probes: list[Path] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(breakdown.csv, prediction.csv); `sizes`: gradient bytes by model, for the series
    without breakdown.json (external logs). A series over several node counts is one
    series: its doublings cross node boundaries over the link measured between nodes, or
    the one `network` (analysis.network) gives, or the network's `probes` measured (they
    win over what is given)."""
    given, probed = given_links(network), probe_links(probes)
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
        rows += series_prediction(series, points, breakdown, by_point, size,
                                  shared_cores=devices == {"cpu"},
                                  gpus_per_node=int(counts.max()) if len(counts) else None,
                                  network={**given, **probed.get(
                                      points["strategy"].iloc[0], {})})
    return breakdown, pd.DataFrame(rows, columns=PREDICTION_ORDER)
