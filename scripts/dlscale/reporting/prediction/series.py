"""prediction.csv's rows for one series: the model (dlscale.reporting.prediction.model)
fitted on every point but the largest and checked on it (the held-out error), then fitted
on every point for the next two doublings, each with its band."""

from __future__ import annotations

import math

import pandas as pd

from dlscale.reporting.prediction import model, tokens
from dlscale.reporting.prediction.links import (
    FITTED,
    FROM_STEP_TIMES,
    LEVELS,
    MEASURED,
    NO_NETWORK,
    Link,
    allreduce_time,
    fitted_link,
    links,
    median,
    missing_link,
)

EXPLAINED_ERROR = 0.10  # |predicted - measured| / measured step time on the held-out point
ABOVE_ONE = ("the model's step is faster than perfect scaling from the base point (the "
             "measured points scale super-linearly{swapped}): its efficiency is shown as 1")
SWAPPED = "; the links given within a node are slower than between nodes: swapped?"
NOT_DATA_PARALLEL = ("not predicted: {batch:g} images a step on {gpus:g} GPUs, fewer than one a "
                     "GPU, is not data-parallel alone (the model's replicas each train their "
                     "share of the batch)")
# the widest band (high / low step) a prediction is given with; past it the row is not
# predictable from its points: a band of a hundredfold holds every point and says nothing
MAX_BAND = 3.0
NOT_PREDICTABLE = ("not predictable from these points ({why}): the fits they allow span "
                   "{low:.3g} to {high:.3g} s, {width:.1f} times, where a band of at most "
                   "{most:g} times is given; measure a count nearer to it")
SPREAD_WIDE = ("the band is {width:.1f} times wide from the points' own timing spread (their "
               "epochs' 95 % interval, {spread:.0%} of a step: few epochs, or noisy ones); "
               "the fits alone agree within 3 times")
NOT_CHECKED = "not checked: the held-out point is not predictable from the points below it"
CAPPED = ("capped at the largest measured efficiency: nothing the model holds (a faster "
          "link, a larger batch per GPU) makes it rise")


def node_size(keys: list[tuple[int, int]], gpus_per_node: int | None, shared_cores: bool,
              notes: list[str]) -> float:
    """The GPUs a node holds: stated (analysis.gpus_per_node, or what the runs report), a
    series over nodes' most per node, else the largest point's node (said in `notes`);
    no limit where the replicas share one machine's cores."""
    most = max(math.ceil(g / n) for g, n in keys)
    if shared_cores:
        return math.inf
    if gpus_per_node:
        return max(most, gpus_per_node)
    if not any(n > 1 for _, n in keys):
        notes.append(f"no run says how many GPUs a node has: a node is taken to hold {most} "
                     "(the largest point's; analysis.gpus_per_node says otherwise)")
    return most


def exposed_of(keys, steps, shares, timed, fitted: bool) -> tuple[dict, dict, list[float]]:
    """Each point's exposed communication (the trace's share of its step, never more than
    the step nor the all-reduce timed alone; all of the all-reduce where no trace tells),
    what its trace shows beyond the timed all-reduce (a collective's own cost or a wait),
    and the hidden share of compute at each multi-GPU point with a trace."""
    exposed, beyond, hidden = {}, {}, []
    for g, n in keys:
        total, step = timed(g, n), steps[(g, n)]
        row = shares.get((g, n))
        share = getattr(row, "communication_share", math.nan) if row is not None else math.nan
        traced = getattr(row, "window_step_s", math.nan) if row is not None else math.nan
        traced = step if pd.isna(traced) else traced
        seen = math.nan if pd.isna(share) or fitted else min(share * traced, step)
        exposed[(g, n)] = min(total, step) if math.isnan(seen) else min(seen, total)
        beyond[(g, n)] = 0.0 if math.isnan(seen) or g < 2 else max(seen - total, 0.0)
        compute = step - exposed[(g, n)] - beyond[(g, n)]
        if g > 1 and not math.isnan(seen) and compute > 0:
            hidden.append((total - exposed[(g, n)]) / compute)
    return exposed, beyond, hidden


def banded(fits: list[model.Fit], g: int, n: int, b: float,
           allreduce: float) -> tuple[float, float]:
    """What the fits allow at (g, n, b), (low, high) step: the alternative `fits`' ends,
    widened by the corpus' margin, a factor either way (never below 0). The band shown
    widens it again by the points' timing spread."""
    ends = [f.step(g, n, b, allreduce)[0] for f in fits]
    return min(ends) / (1 + model.BAND_MARGIN), max(ends) * (1 + model.BAND_MARGIN)


def series_prediction(series: str, points: pd.DataFrame, breakdown: pd.DataFrame,
                      found: dict[tuple[int, int], list[dict]], known_size: int | None = None,
                      shared_cores: bool = False, gpus_per_node: int | None = None,
                      network: dict[str, tuple[Link, str]] | None = None) -> list[dict]:
    """prediction.csv's rows for one series: its data-parallel points predicted
    (`data_parallel`); a point that trains fewer images a step than it has GPUs is not data-
    parallel alone (its replicas split an image, or some GPUs do other work): no model of
    replicas each on its share of the batch holds it, so it is a measured row, not predicted,
    and the note says why."""
    points = points.assign(nodes=points["nodes"] if "nodes" in points else 1)
    if tokens.is_token_series(points):  # its tokens a step as the batch (prediction.tokens)
        frame, known_size, note = tokens.token_points(points)
        if frame is None:
            return [measured_row(series, int(p.gpus), int(p.nodes), p.step_time_s
                                 if "step_time_s" in points else math.nan, p.efficiency, note)
                    for p in points.sort_values(["gpus", "nodes"]).itertuples()]
        return with_note(data_parallel(series, frame, breakdown, found, known_size,
                                        shared_cores, gpus_per_node, network), note)
    split = ~is_data_parallel(points)
    rows = data_parallel(series, points[~split], breakdown, found, known_size, shared_cores,
                         gpus_per_node, network) if (~split).any() else []
    # a count measured, though not data-parallel, is its measured row, never also extrapolated
    taken = set(points.loc[split, "gpus"].astype(int))
    rows = [r for r in rows if r["role"] != "extrapolated" or r["gpus"] not in taken]
    for point in points[split].sort_values(["gpus", "nodes"]).itertuples():
        rows.append(measured_row(
            series, int(point.gpus), int(point.nodes), point.global_batch / point.images_per_s,
            point.efficiency, NOT_DATA_PARALLEL.format(batch=point.global_batch,
                                                       gpus=point.gpus)))
    return rows


def is_data_parallel(points: pd.DataFrame) -> pd.Series:
    """Which points train at least one image a step on each GPU (NOT_DATA_PARALLEL)."""
    return points["global_batch"] >= points["gpus"]


def measured_row(series: str, g: int, n: int, step: float, efficiency: float,
                 note: str) -> dict:
    """A measured point's row that no model predicts, with the note that says why."""
    return {"series": series, "nodes": n, "gpus": g, "role": "measured",
            "measured_step_s": step, "measured_efficiency": efficiency, "note": note}


def data_parallel(series: str, points: pd.DataFrame, breakdown: pd.DataFrame,
                  found: dict[tuple[int, int], list[dict]], known_size: int | None = None,
                  shared_cores: bool = False, gpus_per_node: int | None = None,
                  network: dict[str, tuple[Link, str]] | None = None) -> list[dict]:
    """`fitted`, with a link given for a level (analysis.network, nccl-tests) that cannot
    carry the steps set aside (SET_ASIDE): its all-reduce alone fills a fit point's step,
    or leaves it less than its compute (a negative growth). The series is then predicted
    from its steps: that level's communication fitted with the rest of each step."""
    args = (series, points, breakdown, found, known_size, shared_cores, gpus_per_node)
    rows = fitted(*args, network)
    wrong = next(({**r} for r in rows if r.get("contradicts")), None)
    for row in rows:
        row.pop("contradicts", None)
    if wrong is None:
        return rows
    level, key = ((LEVELS[0], "within_node") if wrong["nodes"] == 1
                  else (LEVELS[1], "between_nodes"))
    link, source = (network or {}).get(key, (None, ""))
    if link is None or found:  # measured, or fitted from the steps: kept, and named
        return rows
    note = SET_ASIDE.format(level=level, source=source, g=wrong["gpus"],
                            comm=wrong["contradicts"], step=wrong["measured_step_s"]) + (
        SWAPPED if swapped(network) else "")
    rows = fitted(*args, {**network, key: (NO_LINK, f"set aside ({source})")})
    return with_note(rows, note)


# a link set aside: its all-reduce takes no time, its level's cost is the steps' residual
NO_LINK = Link(0.0, math.inf)
SET_ASIDE = ("the link {level} ({source}) cannot carry the steps: its all-reduce alone at "
             "the {g}-GPU point would take {comm:.3g} s of a {step:.3g} s step, leaving "
             "less than its compute: set aside, the series is predicted from its steps "
             "(that level's communication fitted with the rest of each step)")


def set_aside(note: str) -> str:
    """What a row's note says of a link it set aside (SET_ASIDE, up to `: set aside`), or ''."""
    return note.split(": set aside")[0] if "cannot carry the steps" in note else ""


def not_predictable(note: str) -> str:
    """A row's NOT_PREDICTABLE note up to its fits' span ('not predictable from these points
    (why)'), or ''."""
    return note.split(": the fits")[0] if note.startswith("not predictable") else ""


def fitted(series: str, points: pd.DataFrame, breakdown: pd.DataFrame,
           found: dict[tuple[int, int], list[dict]], known_size: int | None = None,
           shared_cores: bool = False, gpus_per_node: int | None = None,
           network: dict[str, tuple[Link, str]] | None = None) -> list[dict]:
    """prediction.csv's rows for one series (its scaling.csv rows, over any node counts):
    the held-out point (the largest) predicted from the others, then the next two
    doublings from all of them, on as many nodes as hold them. `found`: the
    breakdown.json records by (gpus, nodes); `known_size`: the gradient's bytes where none
    gives them (an external log); `network`: the links given for the levels no point
    measured (links.given_links); `gpus_per_node`: the node's GPUs, as stated."""
    points = points.sort_values(["gpus", "nodes"])  # (its nodes column: series_prediction)
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
        return [measured_row(series, g, n, steps[(g, n)], eff[(g, n)], note) for g, n in keys]

    size = next((r.get("gradient_bytes") for k in keys for r in found.get(k, [])
                 if r.get("gradient_bytes")), known_size)
    if not size:
        return note_rows("no breakdown.json and no known model to take the gradient's size "
                         "from: not predicted")
    on_fit = link_set(fit, found, network, keys, steps, size, weak)
    if isinstance(on_fit, str):
        return note_rows(on_fit)
    on_all = link_set(keys, found, network, keys, steps, size, weak)
    on_all = on_fit if isinstance(on_all, str) else on_all
    intra, inter, source, fitted, notes = on_fit
    # the extrapolations' links: every point's (the held-out's timed all-reduce too)
    intra_all, inter_all = on_all[:2]
    # each row's link columns: the links its prediction used (a measured point's from the
    # fit points, an extrapolation's from every point), with where they came from
    row_links = {True: on_fit[:4], False: on_all[:4]}

    def timed(g, n):
        return allreduce_time(g, n, size, intra, inter)

    def timed_all(g, n):
        return allreduce_time(g, n, size, intra_all, inter_all)

    usable = [k for k in keys if not math.isnan(timed(*k))]
    if not usable or usable[0] != keys[0]:
        return note_rows(NO_NETWORK)
    fit = [k for k in fit if k in usable]
    exposed, beyond, hidden = exposed_of(fit, steps, shares, timed, fitted)
    reach = [k for k in keys if not math.isnan(timed_all(*k))]
    exposed_all, beyond_all, hidden_all = exposed_of(reach, steps, shares, timed_all, fitted)
    # a link whose all-reduce alone fills a point's step leaves it no compute: likely wrong
    starved = [k for k in usable if k[0] > 1 and timed(*k) >= steps[k]]
    hideable = median(hidden) if hidden else 0.0
    hideable_all = median(hidden_all) if hidden_all else 0.0
    # (the model, the band's fits, the all-reduce's time, hideable, the points' spread): a
    # measured point's from the fit points, an extrapolation's from every point
    sides = {measured: (
        model.fit(on, steps, batch, x, y, h, shared_cores),
        model.alternatives(on, steps, batch, x, y, h, shared_cores), t, h,
        max([spread[k] for k in on] + [0.0]))
        for measured, on, x, y, h, t in (
            (True, fit, exposed, beyond, hideable, timed),
            (False, reach, exposed_all, beyond_all, hideable_all, timed_all))}
    per_node = node_size(keys, gpus_per_node, shared_cores, notes)
    # the next doublings go on from the largest point: its batch per GPU under weak scaling
    # (a series that changed its batch per GPU carries on with the last it ran), its global
    # batch under strong scaling
    per_gpu = batch[keys[-1]] / keys[-1][0]
    largest = keys[-1][0]
    doublings = [(m, max(1, math.ceil(m / per_node))) for m in (2 * largest, 4 * largest)
                 # under strong scaling, never where a GPU would get less than an image
                 # a step: such a point is not data-parallel (NOT_DATA_PARALLEL)
                 if weak or batch[keys[-1]] >= m]
    if len(doublings) < 2:
        notes = [*notes, f"no doubling beyond {largest} GPUs is predicted: the global batch "
                 f"of {batch[keys[-1]]:g} would give a GPU less than an image a step"]
    cause = model.growth_cause(usable, shares, steps)
    base = keys[0]
    rows = []
    for g, n in [*keys, *doublings]:
        measured = (g, n) in steps
        b = batch[(g, n)] if measured else (per_gpu * g if weak else batch[keys[-1]])
        fitted_on, fits, t, h, widest = sides[measured]
        if measured and (g, n) not in usable:
            step = comm = growth = low = high = fits_low = fits_high = math.nan
        else:
            step, comm, growth = fitted_on.step(g, n, b, t(g, n))
            # what the fits allow, the points' timing spread aside (a wide spread of a few
            # timed epochs widens the band shown, but says nothing of what the model holds)
            fits_low, fits_high = banded(fits, g, n, b, t(g, n))
            low, high = fits_low / (1 + widest), fits_high * (1 + widest)
        if (g, n) not in fit and not math.isnan(step) and max(fits_high, step) > MAX_BAND * min(
                fits_low, step):
            row_notes_first = [NOT_PREDICTABLE.format(
                why=unpredictable_why(fit, batch, g, b), low=min(fits_low, step),
                high=max(fits_high, step), width=max(fits_high, step) / min(fits_low, step),
                most=MAX_BAND)]
            step = comm = growth = low = high = math.nan
        else:  # a band widened past MAX_BAND by the points' timing spread alone: said
            row_notes_first = [SPREAD_WIDE.format(width=high / low, spread=widest)] if (
                low > 0 and high > MAX_BAND * low) else []
        speedup = (b / step) / (batch[base] / steps[base]) if step > 0 else math.nan
        efficiency = speedup / (g / base[0])
        row_notes = [*row_notes_first, *notes]
        if not measured and efficiency > eff[keys[-1]] and not math.isnan(step):
            efficiency, step = eff[keys[-1]], step * efficiency / eff[keys[-1]]
            row_notes.append(CAPPED)
        if efficiency > 1:  # the step is kept for its error; no efficiency above 1 is shown
            efficiency = 1.0
            row_notes.append(ABOVE_ONE.format(swapped=SWAPPED if swapped(network) else ""))
        total = t(g, n) if g > 1 else 0.0
        rows.append({
            "series": series, "nodes": n, "gpus": g,
            "role": "fit" if (g, n) in fit else "held out" if (g, n) == held
            else "extrapolated" if not measured else "measured",
            "measured_step_s": steps.get((g, n), math.nan), "predicted_step_s": step,
            "predicted_step_low_s": min(low, step), "predicted_step_high_s": max(high, step),
            "error": (step - steps[(g, n)]) / steps[(g, n)] if measured else math.nan,
            "measured_efficiency": eff.get((g, n), math.nan),
            "predicted_efficiency": efficiency,
            "predicted_efficiency_low": efficiency * step / max(high, step),
            # (never above 1, as the efficiency itself: docs/prediction.md)
            "predicted_efficiency_high": min(efficiency * step / min(low, step), 1.0)
            if low > 0 else math.nan,
            "comm_s": comm, "exposure": comm / total if total > 0 else math.nan,
            "hideable": h, "growth_s": growth,
            "growth_cause": (cause or "fitted from step times") if growth > 0 else "",
            **link_columns(*row_links[measured]), "gradient_bytes": size, "verdict": "",
            "note": "; ".join(row_notes + [missing_link(n)] if math.isnan(step)
                              and not row_notes_first and missing_link(n) not in row_notes
                              else row_notes)})
        # the link leaves a fit point less than its compute: no compute's noise (a
        # growth below 0 by more than the error the model is held to) and its own doing
        # (its all-reduce half the shortfall at least: a super-linear step is not)
        if (g, n) in fit and g > 1 and ((g, n) in starved or growth < -EXPLAINED_ERROR * step
                                        and t(g, n) >= -growth / 2):
            rows[-1]["contradicts"] = t(g, n)
    verdict = judge(rows[keys.index(held)] if held else None, starved, source, steps, timed)
    for row in rows:
        row["verdict"] = verdict
    return rows


def with_note(rows: list[dict], note: str) -> list[dict]:
    """`rows` with `note` first in each row's note (a note of the whole series: a language
    model's gradient, a link set aside)."""
    for row in rows:
        said = row.get("note")
        row["note"] = note if not isinstance(said, str) or not said else f"{note}; {said}"
    return rows


def unpredictable_why(fit: list, batch: dict, g: int, b: float) -> str:
    """Why the fit points leave a row's step open: one GPU count, or a batch per GPU far
    below theirs."""
    if len({k[0] for k in fit}) < 2:
        return f"one GPU count, {fit[0][0]}, to fit on"
    shrink = min(batch[k] / k[0] for k in fit) / (b / g)
    if shrink >= 4:
        return f"its batch per GPU {shrink:.0f} times smaller than the fit points'"
    return "the fits the points allow disagree"


def link_columns(intra, inter, source: str, fitted: bool) -> dict:
    """A row's latency and bus bandwidth per level, and where they came from (none within
    a node where the link was fitted on step times: no latency or bandwidth is claimed)."""
    return {"latency_us": intra.alpha * 1e6 if intra and not fitted else math.nan,
            "bus_bandwidth_gbs": intra.bandwidth / 1e9 if intra and not fitted else math.nan,
            "latency_inter_us": inter.alpha * 1e6 if inter else math.nan,
            "bus_bandwidth_inter_gbs": inter.bandwidth / 1e9 if inter else math.nan,
            "link_source": source}


def judge(held: dict | None, starved: list, source: str, steps: dict, timed) -> str:
    """The series' verdict: the held-out error against EXPLAINED_ERROR; a link that leaves
    a point no compute is named as the likely wrong figure, whatever the error."""
    if starved:
        g, n = starved[0]
        level = LEVELS[0] if n == 1 else LEVELS[1]
        return (f"not explained: the link {level} ({source}) leaves the "
                f"{g}-GPU point no compute (its all-reduce alone {timed(g, n):.3g} s, the "
                f"step {steps[(g, n)]:.3g} s): that link's figure is likely wrong")
    if held is None:
        return "no held-out point (one GPU count below the largest is needed)"
    if math.isnan(held["error"]) and not_predictable(str(held["note"])):
        return NOT_CHECKED
    if math.isnan(held["error"]):
        return "not predicted: " + missing_link(int(held["nodes"]))
    if abs(held["error"]) <= EXPLAINED_ERROR:
        return "explained"
    return f"not explained: the held-out error is over {EXPLAINED_ERROR:.0%}"


def swapped(network) -> bool:
    """Whether the links given say a node's own is slower than the one between nodes."""
    given = network or {}
    if "within_node" not in given or "between_nodes" not in given:
        return False
    return given["within_node"][0].bandwidth < given["between_nodes"][0].bandwidth


def link_set(pts, found, network, keys, steps, size, weak):
    """(within a node, between nodes, where they came from, whether fitted from step
    times, notes) from the timed all-reduces of `pts`, the network given or probed for the
    levels they lack, or a link fitted on the step times; a note where there is none."""
    intra, inter = links(pts, found)
    sources = {level: MEASURED for level, link in zip(LEVELS, (intra, inter), strict=True)
               if link}
    for level, key in zip(LEVELS, ("within_node", "between_nodes"), strict=True):
        if level not in sources and key in (network or {}):  # measured wins over given
            link, sources[level] = network[key]
            intra, inter = (link, inter) if key == "within_node" else (intra, link)
    fitted, notes = False, []
    if intra is None and inter is None:
        if found or not (guess := fitted_link(keys, steps, size, weak)):
            return ("no multi-GPU point below the largest timed its all-reduce: nothing to "
                    "fit (a sweep of 1, 2 and 4 GPUs fits on 2, checks 4)" if found
                    else "no timed all-reduce, no network given, and not three counts on "
                    "one node from 1 GPU (one to fit the communication on, one to check): "
                    "not predicted")
        intra, fitted, sources = guess, True, {LEVELS[0]: FITTED}
        notes.append(FROM_STEP_TIMES)
    if inter is None and any(n > 1 for _, n in keys):
        notes.append(NO_NETWORK)
    kinds = set(sources.values())
    source = kinds.pop() if len(kinds) == 1 else "; ".join(f"{k}: {v}" for k, v in sources.items())
    return intra, inter, source, fitted, notes
