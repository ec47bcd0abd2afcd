"""A series made from the prediction's own formula: every expected figure follows from the
parameters below, not from a run."""

from __future__ import annotations

import pandas as pd

ALPHA, BANDWIDTH, GRADIENT = 20e-6, 5e9, 100 * 2**20  # s, bytes/s (bus), bytes
COMPUTE, BATCH = 0.2, 32  # seconds of a step no communication explains; images per GPU
SIZES = [4096, 65536, 2**20, 16 * 2**20, GRADIENT]


def series(steps: dict, scaling: str = "weak", batch: int = BATCH, **columns) -> pd.DataFrame:
    """scaling.csv rows of one series from {(gpus, nodes): step seconds}."""
    rows = []
    for (n, nodes), step in steps.items():
        global_batch = batch * n if scaling == "weak" else batch
        rows.append({"series": "Net", "model": "Net", "nodes": nodes, "gpus": n,
                     "scaling": scaling, "global_batch": global_batch,
                     "images_per_s": global_batch / step, **columns})
    frame = pd.DataFrame(rows)
    first = frame.iloc[0]
    frame["efficiency"] = (frame["images_per_s"] / frame["gpus"]
                           / (first["images_per_s"] / first["gpus"]))
    return frame


def records(points, collective=None, separable=True, summary=True) -> dict:
    """breakdown.json records by (gpus, nodes): the all-reduce timed as `collective`
    (n, nodes, size) -> seconds gives it, its exposed communication all of it."""
    out = {}
    for n, nodes in points:
        timed = None if n == 1 else {
            "bytes": SIZES, "seconds": [collective(n, nodes, s) for s in SIZES]}
        record = {"gradient_bytes": GRADIENT, "collective": timed, "notes": []}
        out[(n, nodes)] = [record]
    return out


def breakdown_of(frame: pd.DataFrame, exposed: dict) -> pd.DataFrame:
    """breakdown.csv rows: communication_share = exposed / step (NaN: not separable)."""
    rows = [{"series": "Net", "nodes": r.nodes, "gpus": r.gpus,
             "communication_share": exposed.get((r.gpus, r.nodes), 0.0)
             / (r.global_batch / r.images_per_s)} for r in frame.itertuples()]
    return pd.DataFrame(rows)
