"""What fits in a GPU's memory (issue 98, item 2): per series (its batch per GPU aside) and
GPU count, the largest batch per GPU that trained and the smallest that ran out of memory,
the chapter 11 question "the largest batch that fits" answered from the points themselves.
A point out of memory is a result: runs.csv's status out_of_memory, failed.csv's row."""

from __future__ import annotations

import pandas as pd

from dlscale.core.contract import Status
from dlscale.core.vocabulary import BATCH_KNOB
from dlscale.reporting.seriesparts import rate_per_gpu, without_knob


def family(series: str) -> str:
    """A series' name without its batch per GPU (the knob's word)."""
    return without_knob(series, BATCH_KNOB)


def per_gpu(frame: pd.DataFrame) -> pd.Series:
    return pd.to_numeric(frame["global_batch"], errors="coerce") / pd.to_numeric(
        frame["gpus"], errors="coerce")


def fits(scaling: pd.DataFrame, failed: pd.DataFrame) -> list[dict]:
    """One row per series family and GPU count with a point out of memory: the largest
    batch per GPU that fit below it (its throughput per GPU and memory) and the smallest
    that did not."""
    if failed.empty or not {"status", "global_batch", "gpus", "series"} <= set(failed):
        return []
    oom = failed[failed["status"] == Status.OUT_OF_MEMORY.value]
    # the points that trained: their family and batch per GPU, once (none: an empty table)
    trained = scaling.assign(family=scaling["series"].map(family), size=per_gpu(scaling)) \
        if len(scaling) else pd.DataFrame(columns=["family", "gpus", "size"])
    rows = []
    for (name, gpus), part in oom.groupby([oom["series"].map(family), "gpus"], sort=False):
        smallest = per_gpu(part).min()
        below = trained[(trained["family"] == name) & (trained["gpus"] == gpus)
                        & (trained["size"] < smallest)]
        row = {"series": name, "gpus": int(gpus), "did_not_fit": smallest}
        if len(below):
            best = below.loc[[below["size"].idxmax()]]  # one row, as a table
            rate, unit = rate_per_gpu(best)
            row |= {"fit": float(best["size"].iloc[0]), "rate_per_gpu": rate.iloc[0],
                    "unit": unit,
                    "memory_gib": best["memory_gib"].iloc[0] if "memory_gib" in best
                    else float("nan")}
        rows.append(row)
    return rows
