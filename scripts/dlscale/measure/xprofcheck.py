"""xprof's own step breakdown of the window's trace, offline (no server, no TensorFlow),
as a cross-check of dlscale's split (dlscale.measure.stepsplit): where xprof is installed
(`xprof.convert.raw_to_tool_data`, requirements-xprof.txt), its overview page's steps
(the same `train` markers with `_r=1`) give each step's time and xprof's parts.

xprof files every CPU operation as host compute and never reports communication on CPUs
(it has no rule for it there), so on CPUs only the step times are compared; on GPUs its
device collectives (exposed, as it resolves overlaps compute first) are compared with
dlscale's exposed communication too. A difference over TOLERANCE of the step time is a
note: it never changes the split, and never fails the point.

xprof writes a cache (`ALL_HOSTS.op_stats_v2.pb`) beside the trace and reads it again
next time: it is removed after each conversion, so a replaced trace is never read stale.
"""

from __future__ import annotations

import json
from pathlib import Path

TOLERANCE = 0.05
CACHE = "ALL_HOSTS.op_stats_v2.pb"
FIELDS = {"stepTimeMs": "step_s", "deviceComputeTimeMs": "device_compute_s",
          "deviceCollectivesTimeMs": "device_collectives_s",
          "hostComputeTimeMs": "host_compute_s", "infeedTimeMs": "input_s",
          "otherTimeMs": "other_s"}


def available() -> bool:
    try:
        from xprof.convert import raw_to_tool_data  # noqa: F401
    except ImportError:
        return False
    return True


def steps(trace: Path) -> list[dict]:
    """xprof's steps of the trace: {step, step_s, device_compute_s, ...}; [] where it
    finds none."""
    from xprof.convert import raw_to_tool_data

    try:
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(trace)], "overview_page",
                                                        {"use_saved_result": False})
    finally:
        (trace.parent / CACHE).unlink(missing_ok=True)
    if not data:
        return []
    for table in json.loads(data):
        ids = [c["id"] for c in table.get("cols", [])]
        if "stepTimeMs" not in ids:
            continue
        rows = []
        for row in table["rows"]:
            values = dict(zip(ids, (c.get("v") for c in row["c"]), strict=True))
            rows.append({"step": int(str(values["stepnum"]).split()[-1]),
                         **{name: float(values.get(key) or 0) / 1e3
                            for key, name in FIELDS.items()}})
        return rows
    return []


def compare(ours: list[dict], theirs: list[dict]) -> tuple[dict, list[str]]:
    """(xprof's totals over the steps both found, notes where the two differ).

    Steps pair up in order where both found as many: xprof numbers a GPU trace's steps
    from 0 (an H200's trace: 0 to 4 for dlscale's 2 to 6), a CPU trace's by their markers.
    Otherwise they pair by number, and a note says how many each found."""
    notes = []
    ours, theirs = (sorted(rows, key=lambda r: r["step"]) for rows in (ours, theirs))
    if len(ours) == len(theirs):
        pairs = list(zip(ours, theirs, strict=True))
    else:
        mine = {r["step"]: r for r in ours}
        pairs = [(mine[r["step"]], r) for r in theirs if r["step"] in mine]
        notes.append(f"xprof found {len(theirs)} steps, dlscale {len(ours)}: compared by "
                     "step number")
    if not pairs:
        return {}, ["xprof found none of the window's steps"]
    both = [r for _, r in pairs]
    total = {name: round(sum(r[name] for r in both), 9) for name in FIELDS.values()}
    wall = sum(r["wall_s"] for r, _ in pairs)
    total["dlscale_step_s"] = round(wall, 9)
    if abs(total["step_s"] - wall) > TOLERANCE * wall:
        notes.append(f"xprof times the traced steps at {total['step_s']:.4f} s, dlscale at "
                     f"{wall:.4f} s")
    exposed = sum(r["comm_exposed_s"] for r, _ in pairs)
    if total["device_compute_s"] > 0 and abs(total["device_collectives_s"] - exposed) > (
            TOLERANCE * wall):
        notes.append(f"xprof's device collectives take {total['device_collectives_s']:.4f} "
                     f"s of the steps, dlscale's exposed communication {exposed:.4f} s")
    return {"steps": len(both), **total}, notes
