"""Horovod's timeline as events of the step split (dlscale.measure.stepsplit): a Horovod point's
collectives run in Horovod's own threads, outside TensorFlow's trace, so the window also
records Horovod's timeline (`hvd.start_timeline`, rank 0 only, all ranks' activity;
`HOROVOD_TIMELINE=DYNAMIC` set before `hvd.init`) and its data-moving phases join the
trace as communication.

The file (horovod/common/timeline.cc): a Chrome trace, one "process" per tensor; its
first record carries `start_time_since_epoch_in_micros` (UTC) and every `ts` is
microseconds since then. TensorFlow's trace has a clock of its own (TensorFlow 2.15's
lines start near 0), so the window notes the UTC time at each traced step's begin and
the trace's step markers give the shift between the two (`shift`). Per tensor:
`NEGOTIATE_ALLREDUCE` (B ... E, with an X tick per ready rank), then the operation
(`ALLREDUCE`, B) enclosing its activities (`QUEUE`, `MEMCPY_IN_FUSION_BUFFER`,
`GLOO_ALLREDUCE` or `MPI_ALLREDUCE` or `NCCL_ALLREDUCE`, `MEMCPY_OUT_FUSION_BUFFER`,
B ... E each), closed by E.

Communication is the activities that move data: not the negotiation (ranks announcing a
tensor is ready: its span is the other ranks' compute), not `QUEUE` or `WAIT_FOR_*`
(waiting for the background thread or the GPU).
"""

from __future__ import annotations

import json
from pathlib import Path

from dlscale.measure.stepsplit import Event

TIMELINE = "horovod-timeline.json"  # in the window's trace folder
LINE = "horovod|timeline"
WAITING = ("NEGOTIATE_", "QUEUE", "WAIT_FOR_")


def records(path: Path) -> list[dict]:
    """The file's records; a file cut short (the writer stopped mid-record) up to its
    last whole record."""
    text = path.read_text()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        cut = text[:text.rfind("}") + 1].rstrip().rstrip(",")
        return json.loads(cut + "]")


def shift(trace: list[Event], wall: dict[int, int]) -> int:
    """Nanoseconds to add to a UTC time to place it on the trace's clock: the median, over
    the traced steps, of the step marker's start less the UTC time the window noted at
    that step's begin."""
    from dlscale.measure.stepsplit import steps_of

    steps = steps_of(trace)
    gaps = sorted(steps[n][0] - t for n, t in wall.items() if n in steps)
    if not gaps:
        raise ValueError("no traced step to line Horovod's timeline up with")
    return gaps[len(gaps) // 2]


def events(path: Path, offset: int = 0) -> list[Event]:
    """The timeline's data-moving activities as events named `horovod:<ACTIVITY>` on one
    line, in UTC nanoseconds plus `offset`."""
    recs = records(path)
    origin = next((r["args"]["start_time_since_epoch_in_micros"] for r in recs
                   if r.get("ph") == "M" and "start_time_since_epoch_in_micros"
                   in r.get("args", {})), None)
    if origin is None:
        raise ValueError(f"{path} has no start_time_since_epoch_in_micros")
    out: list[Event] = []
    stacks: dict[int, list[tuple[str, int]]] = {}
    for r in recs:
        phase, pid = r.get("ph"), r.get("pid")
        if phase == "B":
            stacks.setdefault(pid, []).append((r["name"], r["ts"]))
        elif phase == "E" and stacks.get(pid):
            name, start = stacks[pid].pop()
            inside = len(stacks[pid])  # 0: the negotiation or the operation itself
            if inside and not name.startswith(WAITING):
                out.append(Event(LINE, f"horovod:{name}", (origin + start) * 1000 + offset,
                                 (origin + r["ts"]) * 1000 + offset))
    return out
