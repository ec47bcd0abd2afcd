"""Throughput and memory against each knob (sweep.knobs), as the seed study's chapters
tabulate them (chapter 11: batch, DataLoader workers, precision, torch.compile on one GPU;
chapter 15: micro-batch, precision, attention, Liger kernels): plots/knobs.png and .svg.

A row of two panels per knob that takes two or more values: the throughput per GPU (tokens
where the points count tokens) and the peak memory per GPU against the knob's values, one
line per GPU count and combination of the other knobs (the series without the knob's
word). A value whose every point ran out of memory is marked at the axis' foot ("out of
memory"), as the chapters' tables write it in the row. A study without such a knob draws
one panel that says so.
"""

from __future__ import annotations

import pandas as pd

from dlscale.core.contract import Status
from dlscale.core.vocabulary import knob_text
from dlscale.reporting.seriesparts import rate_per_gpu, without_knob


def varied_knobs(scaling: pd.DataFrame) -> list[str]:
    """The knobs that take two or more values in scaling.csv: its columns between series
    and model (where analysis puts a column per knob of sweep.knobs)."""
    columns = list(scaling.columns)
    if "series" not in columns or "model" not in columns:
        return []
    names = columns[columns.index("series") + 1:columns.index("model")]
    return [n for n in names if scaling[n].dropna().nunique() > 1]


def ordered(values) -> list:
    """A knob's values in their order: numbers by size, words as written (false first)."""
    numbers = pd.to_numeric(pd.Series(list(values)), errors="coerce")
    if numbers.notna().all():
        return [v for _, v in sorted(zip(numbers, values))]
    return sorted(values, key=lambda v: (str(v).lower() not in ("false", "no", "0"), str(v)))


def knob_lines(scaling: pd.DataFrame, name: str):
    """(label, values, rates per GPU, each value's row of scaling.csv) per GPU count and
    combination of the other knobs."""
    rates, _ = rate_per_gpu(scaling)
    frame = scaling.assign(rest=scaling["series"].map(lambda s: without_knob(s, name)),
                           rate=rates, value=scaling[name].map(knob_text))
    for (rest, gpus), part in frame.groupby(["rest", "gpus"], sort=True):
        by_value = {v: row for v, row in part.set_index("value").iterrows()}
        values = ordered(list(by_value))
        yield (f"{rest}, {int(gpus)} GPU(s)", values, [by_value[v]["rate"] for v in values],
               [by_value[v] for v in values])


def memory_of(rows) -> list[float]:
    return [row.get("memory_gib", float("nan")) for row in rows]


def out_of_memory(runs: pd.DataFrame | None, scaling: pd.DataFrame, name: str) -> list[str]:
    """The knob's values whose every run (runs.csv) ran out of memory: none trained."""
    if runs is None or runs.empty or name not in runs or "status" not in runs:
        return []
    oom = runs[runs["status"] == Status.OUT_OF_MEMORY.value]
    trained = {knob_text(v) for v in scaling[name].dropna()} if name in scaling else set()
    return ordered(sorted({knob_text(v) for v in oom[name].dropna()} - trained))


def draw_knobs(scaling: pd.DataFrame, runs: pd.DataFrame | None, path_stem) -> list:
    """plots/knobs.png and .svg; the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dlscale.reporting.plots import save

    names = varied_knobs(scaling)
    fig, axes = plt.subplots(max(len(names), 1), 2, figsize=(11, 3.8 * max(len(names), 1)),
                             squeeze=False, constrained_layout=True)
    if not names:
        for ax in axes.flat:
            ax.axis("off")
        axes[0][0].text(0, 0.5, "no knob of sweep.knobs takes two values in this study",
                        va="center")
    unit = rate_per_gpu(scaling)[1]
    for row, name in zip(axes, names):
        for label, values, rates, rows in knob_lines(scaling, name):
            row[0].plot(values, rates, marker="o", label=label)
            row[1].plot(values, memory_of(rows), marker="o", label=label)
        for value in out_of_memory(runs, scaling, name):
            for ax in row:
                ax.plot([value], [0], marker="x", color="firebrick", linestyle="none",
                        clip_on=False, label=f"{name}={value}: out of memory")
        row[0].set_ylabel(f"throughput per GPU [{unit}/s]")
        row[1].set_ylabel("peak memory per GPU [GiB]")
        for ax, what in zip(row, ("Throughput", "Memory")):
            ax.set_title(f"{what} against {name}", fontsize="medium")
            ax.set_xlabel(name)
            ax.set_ylim(bottom=0)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
    written = save(fig, path_stem)
    plt.close(fig)
    return written
