"""Where a step's time goes, from a profiler trace: each step's wall time split into
covered time (the union of intervals, never summed self-times) of compute, communication,
input wait and the rest.

Pure Python: the trace is read by the framework's own reader (dlscale.measure.profwindow) into
`Event`s; this module only names and unites intervals, so it is tested on traces
captured from the real profilers without any framework.

Which events are which is decided by their names (the profilers attach no category to a
CPU event), so the split is "approximate" wherever names decide:
- a step is the interval of the framework's step marker (`train` with a `step_num`:
  tf-keras emits it, dlscale's window emits it for Keras 3 and the custom loop);
- communication: XLA's collectives (`all-reduce.3`, `all-gather`, `reduce-scatter`,
  `collective-permute`, `all-to-all`), TensorFlow's collective and NCCL ops
  (`...:CollectiveReduceV2`, `NcclAllReduce`), NCCL kernels (`nccl...`), Horovod's
  data-moving phases from its timeline (`horovod:GLOO_ALLREDUCE`, dlscale.measure.hvdtimeline)
  and torch's c10d collectives (`gloo:all_reduce`, `nccl:all_reduce`);
- input wait: the consumer side of tf.data (`IteratorGetNext`, `GetNextFromShard`,
  `...GetNextAsOptional`); where the step holds none (Keras 3 on JAX fetches its batch in
  Python), the host time from the step's start to its first dispatch (`PjitFunction(...)`);
- on a GPU's `Stream #` lines (CUPTI's kernels and copies, seen in an H200's trace):
  every kernel is compute whatever its name (`void cutlass::Kernel2<...>`), the batch's
  copy to the device (`MemcpyH2D`) input, copies back to the host the rest;
- compute: every other event on a line that executes operations (TensorFlow's
  `tf_Compute` threads, XLA's CPU threads, a GPU's `XLA Ops` and `TensorFlow Ops`
  lines), except the runtime's own bookkeeping (names with `::`, rendezvous and waits);
  in torch.profiler's traces, aten's operations and a GPU's kernels;
- the rest: the step's wall time that none of these covers (host overhead, idle).

Overlaps are resolved as xprof does, compute first: communication under compute is not
exposed; `comm_total_s` is all of it, `comm_exposed_s` the part no compute hides.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

STEP_MARKER = "train"  # the step marker's name (tf-keras' own, and dlscale's)
COLLECTIVE = re.compile(
    r"(^|/)(all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all|"
    r"ragged-all-to-all|collective-broadcast)([.-]|$)"
    r"|:(Collective\w+|Nccl\w+)$|^nccl|^Nccl|^horovod:|^(gloo|nccl):")
INPUT = re.compile(r"IteratorGetNext|GetNextFromShard|GetNextAsOptional")
DISPATCH = "PjitFunction("  # JAX's dispatch of a compiled step
# lines whose events are operations: TensorFlow's executor threads, XLA:CPU's threads,
# a GPU's op lines and streams (not its "XLA Modules" or "Steps": a whole step each)
COMPUTE_LINE = re.compile(r"tf_Compute|tf_inter_op|tf_XLA|\|XLA Ops$|\|TensorFlow Ops$|"
                          r"\|Stream #")
RUNTIME = re.compile(r"::|^Rendezvous|^Wait|^H2D|^D2H|^Handle inputs|^Allocate|"
                     r"^ExecutorState|^ParallelFor|^Loop$|^ThreadpoolListener")
# a GPU's streams, as CUPTI names them in a real trace (an H200's: "Stream #14(Memset,
# Compute,MemcpyD2D)", "Stream #15(MemcpyH2D)"): every event is a kernel or a copy; the
# batch's copy to the device is input, as in xprof's GPU steps, and copies back the rest
GPU_STREAM = re.compile(r"^/device:GPU:\d+\|Stream #")
# torch.profiler's events by category (dlscale.measure.torchwindow): aten's operations on the
# host and a GPU's kernels are compute (their names hold `::`), a copy to the device input
TORCH_OPS = re.compile(r"^torch (cpu_op|kernel)\|")
TORCH_COPY = "torch gpu_memcpy|"
COPIES = {"MemcpyH2D": "copy", "MemcpyD2H": None}
PARTS = ("compute_s", "comm_exposed_s", "input_s", "other_s")


@dataclass(frozen=True)
class Event:
    """One event of a trace: the plane and line it is on ("plane|line"), its name, its
    start and end in nanoseconds (any origin shared by the trace) and its step number
    (step markers only)."""

    line: str
    name: str
    start: int
    end: int
    step: int | None = None


def kind(event: Event) -> str | None:
    """compute, comm, input, copy (the batch's copy to a GPU: input, beside tf.data's),
    or None (a marker, the runtime, an event of no line that executes operations)."""
    return kind_of(event.line, event.name)


@functools.lru_cache(maxsize=1 << 16)  # a trace repeats its names: each pair judged once
def kind_of(line: str, name: str) -> str | None:
    if COLLECTIVE.search(name):
        return "comm"
    if INPUT.search(name):
        return "input"
    if GPU_STREAM.search(line):  # kernels and copies: C++ names hold `::` too
        return COPIES.get(name, "compute")
    if TORCH_OPS.search(line):
        return "compute"
    if line.startswith(TORCH_COPY):
        return "copy" if "HtoD" in name else None
    if RUNTIME.search(name) or not COMPUTE_LINE.search(line):
        return None
    return "compute"


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The intervals' union, as sorted disjoint intervals."""
    out: list[list[int]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        elif end > start:
            out.append([start, end])
    return [(a, b) for a, b in out]


def length(intervals: list[tuple[int, int]]) -> int:
    return sum(b - a for a, b in intervals)


def minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The disjoint sorted intervals `a` without `b` (both disjoint and sorted)."""
    out, j = [], 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cur = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < end:
            out.append((cur, end))
    return out


def clip(intervals: list[tuple[int, int]], s: int, e: int) -> list[tuple[int, int]]:
    """The union of the intervals' parts within [s, e)."""
    return union([(max(a, s), min(b, e)) for a, b in intervals if a < e and b > s])


def steps_of(events: list[Event]) -> dict[int, tuple[int, int]]:
    """Each step number's interval: its widest marker (tf-keras and a window can both
    mark a step)."""
    steps: dict[int, tuple[int, int]] = {}
    for e in events:
        if e.name == STEP_MARKER and e.step is not None:
            a, b = steps.get(e.step, (e.start, e.end))
            steps[e.step] = (min(a, e.start), max(b, e.end))
    return steps


def replica(line: str) -> str:
    """Who ran an event: a device's plane (`/device:GPU:1`: its op and stream lines are
    one replica), else the line (a host thread: on CPUs each replica's collective runs on
    a thread of its own)."""
    plane = line.split("|", 1)[0]
    return plane if plane.startswith("/device:") else line


def skew(comms: list[Event]) -> tuple[float, float, str]:
    """(wait s, transfer s, the replica that arrived last most often) of one step's
    collectives: an instance is the replicas' overlapping events; each replica waits
    from its own start to the last replica's start, then all transfer together. The
    seconds are means over the replicas; the last one is named where it is a device."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for e in comms:
        spans.setdefault(replica(e.line), []).append((e.start, e.end))
    if len(spans) < 2:
        return 0.0, length(union([s for v in spans.values() for s in v])) / 1e9, ""
    events = sorted((a, b, who) for who, v in spans.items() for a, b in union(v))
    groups: list[list[tuple[int, int, str]]] = []
    end = None  # the last group's end so far
    for event in events:  # overlapping events of several replicas: one collective
        if end is not None and event[0] < end:
            groups[-1].append(event)
            end = max(end, event[1])
        else:
            groups.append([event])
            end = event[1]
    wait = transfer = 0
    last: dict[str, int] = {}
    for group in groups:
        latest = max(a for a, _, _ in group)
        for a, b, _ in group:
            wait += latest - a
            transfer += b - max(a, latest)
        if len({who for _, _, who in group}) > 1 and latest > min(a for a, _, _ in group):
            who = max(group)[2]  # the one the others waited for
            last[who] = last.get(who, 0) + 1
    slowest = max(last, key=last.get) if last else ""
    n = len(spans)
    return wait / n / 1e9, transfer / n / 1e9, slowest if slowest.startswith("/device:") else ""


def split(events: list[Event]) -> list[dict]:
    """One dict per marked step, in step order: step, wall_s, compute_s, comm_total_s,
    comm_exposed_s, input_s, other_s (seconds; the four parts add up to wall_s), and the
    collectives' comm_wait_s and comm_transfer_s per replica (skew) with the replica that
    arrived last (`slowest`, a device's name, else empty)."""
    steps = steps_of(events)
    by_kind: dict[str, list[tuple[int, int]]] = {"compute": [], "comm": [], "input": [],
                                                  "copy": []}
    dispatches: list[int] = []
    comms: list[Event] = []
    for e in events:
        if e.name.startswith(DISPATCH):
            dispatches.append(e.start)
        elif (k := kind(e)) is not None:
            by_kind[k].append((e.start, e.end))
            if k == "comm":
                comms.append(e)
    dispatches.sort()
    rows = []
    for number, (s, e) in sorted(steps.items()):
        compute, comm, inp = (clip(by_kind[k], s, e) for k in ("compute", "comm", "input"))
        if not inp and (first := next((d for d in dispatches if s <= d < e), None)):
            inp = [(s, first)]  # Keras 3 on JAX: the batch is fetched before the dispatch
        inp = union(inp + clip(by_kind["copy"], s, e))
        exposed = minus(comm, compute)
        waiting = minus(minus(inp, compute), comm)
        wall = e - s
        parts = [length(compute), length(exposed), length(waiting)]
        wait, transfer, slowest = skew([c for c in comms if c.start < e and c.end > s])
        rows.append({"step": number, "wall_s": wall / 1e9,
                     "compute_s": parts[0] / 1e9, "comm_total_s": length(comm) / 1e9,
                     "comm_exposed_s": parts[1] / 1e9, "input_s": parts[2] / 1e9,
                     "other_s": max(0, wall - sum(parts)) / 1e9,
                     "comm_wait_s": wait, "comm_transfer_s": transfer, "slowest": slowest})
    return rows


# compute after the last step's marker, as a share of the compute within the steps, above
# which the markers did not hold their steps' work (traces of dlscale's windows that
# waited: 0 to 0.4 %; an H200's window that did not: 2.6 to 73 %)
TRAILING = 0.05


def trailing_note(events: list[Event], rows: list[dict]) -> str | None:
    """A note where operations ran on after the last marked step ended: the markers
    closed before their steps' work was done (a window that did not wait for its steps;
    on a GPU the host runs ahead of the device), so the split (`rows`: `split(events)`)
    under-counts compute and over-counts the rest. None where the steps hold their work.
    Only the events that end after the last step are classified: the steps' compute is
    the split's."""
    steps = steps_of(events)
    inside = sum(r["compute_s"] for r in rows) * 1e9
    if not steps or not inside:
        return None
    last = max(e for _, e in steps.values())
    after = length(union([(max(e.start, last), e.end) for e in events
                          if e.end > last and kind(e) == "compute"]))
    if after <= TRAILING * inside:
        return None
    return (f"operations ran {after / 1e6:.1f} ms after the last traced step ended "
            f"({after / inside:.0%} of the steps' compute): the steps' markers closed "
            "before their work was done, so compute is under-counted")


def summary(rows: list[dict]) -> dict:
    """The window's totals: seconds per part summed over its steps, and the median
    step's wall time."""
    if not rows:
        return {}
    walls = sorted(r["wall_s"] for r in rows)
    total = {k: round(sum(r.get(k, 0.0) for r in rows), 9)
             for k in ("wall_s", "comm_total_s", *PARTS, "comm_wait_s", "comm_transfer_s")}
    return {"steps": len(rows), "step_s": round(walls[len(walls) // 2], 9), **total,
            "slowest": most_named(rows)}


def most_named(records: list[dict]) -> str:
    """The replica named `slowest` most often in `records` (steps, or windows' summaries;
    a tie goes to the first name in order, the same in every process), '' for none."""
    named = [r["slowest"] for r in records if r.get("slowest")]
    return max(sorted(set(named)), key=named.count) if named else ""
