"""The model of a series' step: compute in the form the hardware gives it, the gradient's
all-reduce beyond what compute hides, and what else grows with the replica count (the
input pipeline on the host's cores, the wait for the slowest replica, host-side work),
which no link explains and which is carried forward, never dropped. docs/prediction.md
says how and why; bench/prediction_corpus.py checks it on real series of other centres.

Each fit point reproduces its own step: its growth is what its step holds beyond compute
and exposed communication. Past the largest fit point the growth goes on at the rate the
fit points show, in the shape the corpus favours (GROWTH_SHAPE); the band's ends are the
other shape and the compute's other split, widened by the timing spread and the margin
the corpus calibrates (BAND_MARGIN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlscale.reporting.prediction.links import fit_line, median

# what else grows with the replica count, as a function of the GPUs: per doubling (a
# tree's depth; the slowest of n replicas grows as sigma x sqrt(2 ln n)) or per replica
# (contention on a shared host: USL's first term)
SHAPES = {"per doubling": math.log2, "per replica": lambda g: g - 1.0}
GROWTH_SHAPE = "per doubling"
# the compute's fixed part at the base point, where the fit points' batches per GPU leave
# it unknown (one batch per GPU, or a span under LINE_SPAN): the prior (weak scaling never
# needs it) and the band's ends: none of it, and the largest share a fitted line shows on
# the corpus of v1.0 to v4.0 (Dell XE8545 BERT, 0.36 at 64 sequences a GPU). With 0.1 the
# band missed v5.0's GB200 NVL72 BERT, its batch per GPU from 72 to 16 (docs/prediction.md)
FIXED_SHARE, FIXED_SHARES = 0.02, (0.0, 0.36)
# ... and at least the floor of a small batch per GPU: a GPU given a few samples a step does
# not run them at full occupancy, so a step of x samples costs what x + FLOOR_SAMPLES would
# (the prior share at the base point at least FLOOR_SAMPLES / (FLOOR_SAMPLES + x); above
# 49 samples a GPU the prior share is the larger). Set on the corpus's three Mask R-CNN
# series, from 12 images a GPU to 4 and 2 (each alone asks for 0.9 to 1.05), the only
# series it moves (docs/prediction.md)
FLOOR_SAMPLES = 1.0
# with one GPU count no growth is seen: it takes this share of compute per doubling (what
# the corpus' pairs of counts show), the band spanning none and twice it
GROWTH_PRIOR = 0.03
# the band's margin beyond its ends, either way (the corpus holds the measured held-out
# point inside on at least 90 % of series: docs/benchmarks.md)
BAND_MARGIN = 0.14
# the compute's line is fitted on the points only where their batch per GPU spans this
# factor: over a narrower range the fixed part is noise (the prior split is taken)
LINE_SPAN = 2.0

Key = tuple[int, int]  # (gpus, nodes)


@dataclass(frozen=True)
class Fit:
    """A series' step fitted on some of its points."""
    fixed: float          # compute's fixed part (s)
    per_image: float      # compute per image of the batch per GPU (s)
    hideable: float       # the share of compute that hides communication
    overhead: float       # what the trace shows of collectives beyond the timed all-reduce
    own_comm: dict        # {fit point: its exposed communication and overhead (s)}
    growth: dict          # {fit point: growth as a share of its compute}: each its own
    rate: float           # growth's share per unit of the shape past the largest fit point
    shape: str
    own_compute: dict     # shared cores: each fit point's compute
    shared_k: float       # shared cores: compute per image of the global batch
    shared_cores: bool

    def compute(self, g: int, n: int, b: float) -> float:
        if self.shared_cores:
            return self.own_compute.get((g, n), self.shared_k * b)
        return self.fixed + self.per_image * b / g

    def growth_at(self, g: int, n: int) -> float:
        """What else the step holds, as a share of its compute (the slowest of n replicas,
        the input pipeline on shared cores: each grows with the work of a step)."""
        if (g, n) in self.growth:
            return self.growth[(g, n)]
        if self.shared_cores:
            return 0.0
        f = SHAPES[self.shape]
        last = max(self.growth)
        return self.growth[last] + self.rate * max(f(g) - f(last[0]), 0.0)

    def step(self, g: int, n: int, b: float, allreduce: float) -> tuple[float, float, float]:
        """(step, exposed communication, growth) at g GPUs on n nodes, global batch b,
        the all-reduce taking `allreduce` alone; a fit point's own step."""
        c = self.compute(g, n, b)
        if (g, n) in self.own_comm:
            comm = self.own_comm[(g, n)]
        else:
            comm = (max(allreduce - self.hideable * c, 0.0) + self.overhead) if g > 1 else 0.0
        growth = c * self.growth_at(g, n)
        return c + comm + growth, comm, growth


def prior_share(batch_per_gpu: float) -> float:
    """The compute's fixed share at a point of `batch_per_gpu` where the points leave the
    split unknown: FIXED_SHARE, or a small batch's floor (FLOOR_SAMPLES) where larger."""
    return max(FIXED_SHARE, FLOOR_SAMPLES / (FLOOR_SAMPLES + batch_per_gpu))


def compute_line(points: list[Key], rest: dict, batch: dict, fixed_share: float | None
                 ) -> tuple[float, float]:
    """(fixed, per image of the batch per GPU): a straight line through the points where
    their batch per GPU spans LINE_SPAN (a and k at least 0); else through the base point
    with `fixed_share` of it fixed (None: the prior, prior_share)."""
    xs = [batch[p] / p[0] for p in points]
    ys = [rest[p] for p in points]
    if len(set(xs)) > 1 and max(xs) >= LINE_SPAN * min(xs):
        a, k = fit_line(xs, ys)
        if k < 0:  # more work per GPU, less time: no per-image part to be seen
            return median(ys), 0.0
        if a < 0:  # no fixed part: all of it per image
            return 0.0, median([y / x for x, y in zip(xs, ys, strict=True)])
        return a, k
    share = prior_share(xs[0]) if fixed_share is None else fixed_share
    return share * ys[0], (1 - share) * ys[0] / xs[0]


def fit(points: list[Key], steps: dict, batch: dict, exposed: dict, beyond: dict,
        hideable: float, shared_cores: bool = False, shape: str | None = None,
        fixed_share: float | None = None, prior_growth: float | None = None) -> Fit:
    """The model through `points` (sorted by GPUs): the compute's line; each point's
    growth what its step holds beyond that compute, its `exposed` communication and what
    its trace shows `beyond` the timed all-reduce (a collective's own cost, the same at
    every multi-replica count); the growth's rate from the base to the largest point
    (`prior_growth` per unit of the shape where there is one count)."""
    shape = GROWTH_SHAPE if shape is None else shape
    prior_growth = GROWTH_PRIOR if prior_growth is None else prior_growth
    multi = [beyond[p] for p in points if p[0] > 1]
    overhead = median(multi) if multi else 0.0
    own = {p: exposed[p] + beyond[p] for p in points}
    rest = {p: max(steps[p] - own[p], 0.0) for p in points}
    base, last = points[0], points[-1]
    if shared_cores:  # replicas on one machine's cores: its work grows with the global batch
        return Fit(0.0, 0.0, hideable, overhead, own, {p: 0.0 for p in points}, 0.0, shape,
                   rest, rest[last] / batch[last], True)
    fixed, per_image = compute_line(points, rest, batch, fixed_share)
    compute = {p: fixed + per_image * batch[p] / p[0] for p in points}
    growth = {p: rest[p] / compute[p] - 1 if compute[p] > 0 else 0.0 for p in points}
    f = SHAPES[shape]
    span = f(last[0]) - f(base[0])
    rate = (max(growth[last] - growth[base], 0.0) / span if span > 0 else prior_growth)
    return Fit(fixed, per_image, hideable, overhead, own, growth, rate, shape, {}, 0.0, False)


def alternatives(points: list[Key], steps: dict, batch: dict, exposed: dict, beyond: dict,
                 hideable: float, shared_cores: bool) -> list[Fit]:
    """The fits the band spans: the other shape, the compute's other splits (none fixed,
    and the larger of FIXED_SHARES' top and the prior's), and with one count the prior
    growth, none or twice it, in the prior's own shape: one count shows no shape, and the
    prior per doubling taken per replica would grow 8 GPUs' step fourfold by 64."""
    one = len({p[0] for p in points}) < 2
    low, high = FIXED_SHARES
    high = max(high, prior_share(batch[points[0]] / points[0][0]))
    return [fit(points, steps, batch, exposed, beyond, hideable, shared_cores, shape, share,
                growth)
            for shape in ((GROWTH_SHAPE,) if one else SHAPES) for share in (low, high)
            for growth in ((0.0, 2 * GROWTH_PRIOR) if one else (None,))]


def growth_cause(points: list[Key], shares: dict, steps: dict) -> str:
    """What the growth from the base to the largest point is, where the points' breakdown
    says it: the input pipeline, the wait for the slowest replica, other; '' where no
    breakdown of both tells."""
    base, last = points[0], points[-1]
    rows = shares.get(base), shares.get(last)
    if len(points) < 2 or any(r is None for r in rows):
        return ""
    grown = {}
    for cause, column in (("input pipeline", "input_share"),
                          ("wait for the slowest replica", "wait_share"),
                          ("other", "other_share")):
        before, after = (getattr(r, column, math.nan) for r in rows)
        if not (math.isnan(before) or math.isnan(after)):
            grown[cause] = after * steps[last] - before * steps[base]
    named = max(grown, key=grown.get) if grown else ""
    return named if named and grown[named] > 0 else ""
