"""The links the prediction's all-reduce runs over: a ring's latency and bus bandwidth per
level (within a node, between nodes), from the points' timed all-reduces, an nccl-tests
output or figures given (analysis.network), the network's probes, or, for an outside log
with none of those, a residual fitted on its step times."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from dlscale.reporting.gradients import ASSUMED_CLASSES, ASSUMED_SIZE


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else math.nan


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


def tree_s(n: float, size: float, alpha: float, bandwidth: float) -> float:
    """The same over a tree: 2 log2 n hops, twice the bytes a member sends."""
    if n < 2:
        return 0.0
    return 2 * math.log2(n) * alpha + 2 * size / bandwidth


FROM_STEP_TIMES = ("no timed all-reduce (an external log): the communication is fitted on "
                   "the step times of 1 GPU and the next count, with the gradient of the "
                   f"model at {ASSUMED_CLASSES} classes and {ASSUMED_SIZE} px; no latency or "
                   "bandwidth is claimed")
NO_NETWORK = ("across nodes: no link between nodes was measured on a smaller point or by "
              "a probe, or given, so nothing is predicted past a node boundary")
NO_LINK_WITHIN = ("within a node: no link within a node was measured on a smaller point or "
                  "given (analysis.network has no within-node level), so nothing on one "
                  "node is predicted past the points measured")


def missing_link(nodes: int) -> str:
    """The note of a point whose level has no link: within a node, or between nodes."""
    return NO_LINK_WITHIN if nodes == 1 else NO_NETWORK


MEASURED, FITTED, GIVEN = "measured", "fitted from step times", "given"
LEVELS = ("within a node", "between nodes")


@dataclass(frozen=True)
class Link:
    """One level of the all-reduce as a ring: latency per hop (s), bus bandwidth (B/s)."""
    alpha: float
    bandwidth: float

    def ring_s(self, members: int, size: float) -> float:
        return allreduce_s(members, size, self.alpha, self.bandwidth)

    def time_s(self, members: int, size: float) -> float:
        """As NCCL's tuner picks: the ring or the tree, whichever is faster (at a few
        members always the ring; over hundreds of GPUs the ring's latency alone would
        exceed the step)."""
        return min(self.ring_s(members, size),
                   tree_s(members, size, self.alpha, self.bandwidth))


def allreduce_time(gpus: int, nodes: int, size: float, intra: Link | None,
                   inter: Link | None) -> float:
    """The gradient's all-reduce on `gpus` (ring or tree): within one node at that level's
    pace; one that crosses nodes goes at the network's (the level between nodes, as a
    multi-node nccl-tests run measures it over all its ranks). NaN where the level it
    needs has no link."""
    link = intra if nodes == 1 else inter
    if gpus < 2:
        return 0.0
    return math.nan if link is None else link.time_s(gpus, size)


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


def failed_probes(paths: list[Path] | None) -> dict[str, list[str]]:
    """The network's probes that failed, by strategy (their folder): a note naming each
    (its node count, from its file's name) and why, as its record says."""
    out: dict[str, list[str]] = {}
    for path in map(Path, paths or []):
        probe = json.loads(path.read_text())
        if "error" in probe:
            out.setdefault(path.parent.name, []).append(
                f"the network's probe over {path.stem.removeprefix('nodes')} nodes failed: "
                f"{probe['error']}; the prediction goes without it")
    return out
