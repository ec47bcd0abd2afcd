#!/usr/bin/env python3
"""Draw the scaling plots from scaling.csv.

  plot_scaling.py results/tables/scaling.csv --runs results/tables/runs.csv \
      --out-dir results/plots --subtitle "cifar10, 128 px"

Writes epoch_time, throughput, speedup (with the ideal line), efficiency, accuracy and
an overview of all five, each as PNG (for reading) and SVG (for papers). One line per
series (model, and strategy/precision when the sweep compares them), so ResNet50V2 and
ResNet152V2 share a chart; error bars show the 95% confidence interval when a point
has repeats or several timed epochs. Only measured points are drawn; with --runs, every
figure says how many points failed or do not count and are missing from it. Labels are
drawn as written ($, _, % and braces included: no mathtext).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dlscale.vocabulary import OVERVIEW, PLOTS


def with_errors(table):
    """Propagate the epoch-time CI to throughput and speedup (relative error)."""
    table = table.copy()
    relative = table["epoch_time_ci95"] / table["epoch_time_s"]
    table["images_per_s_ci95"] = table["images_per_s"] * relative
    table["speedup_ci95"] = table["speedup"] * relative
    return table


def line_label(series: str, nodes: int, many_nodes: bool) -> str:
    label = f"{series}, {nodes} node{'s' if nodes > 1 else ''}" if many_nodes else series
    # matplotlib leaves labels that start with "_" out of legends: a zero-width space keeps them
    return "\u200b" + label if label.startswith("_") else label


def missing_note(runs) -> str:
    """'2 of 5 points are not drawn: X (timeout), Y (failed)' for runs that do not count."""
    if runs is None or runs.empty:
        return ""
    left_out = runs[~runs["counted"].astype(bool)]
    if left_out.empty:
        return ""
    names = ", ".join(f"{r['run']} ({str(r['problem']).split(':')[0]})"
                      for _, r in left_out.head(4).iterrows())
    more = f" and {len(left_out) - 4} more" if len(left_out) > 4 else ""
    return (f"{len(left_out)} of {len(runs)} run(s) failed or do not count and are not drawn: "
            f"{names}{more} (results/tables/failed.csv)")


def draw(ax, table, name: str) -> None:
    column, _, ylabel, error = PLOTS[name]
    many_nodes = table["nodes"].nunique() > 1
    gpus = sorted(table["gpus"].unique()) or [1]
    for (series, nodes), group in table.groupby(["series", "nodes"], sort=True):
        group = group.sort_values("gpus").dropna(subset=[column])
        if group.empty:
            continue
        yerr = group[error] if error and group[error].notna().any() else None
        drawn = ax.errorbar(group["gpus"], group[column], yerr=yerr, marker="o", capsize=3,
                            label=line_label(series, nodes, many_nodes))
        if name == "accuracy" and group["test_accuracy"].notna().any():
            ax.plot(group["gpus"], group["test_accuracy"], marker="s", linestyle="--",
                    color=drawn.lines[0].get_color(),  # same series, same colour
                    label=f"{line_label(series, nodes, many_nodes)} (test)")
    if name == "speedup":
        ax.plot(gpus, gpus, color="grey", linestyle=":", label="ideal (linear)")
    if name == "efficiency":
        ax.axhline(1.0, color="grey", linestyle=":", label="ideal")
        top = table["efficiency"].max() if len(table) else 1.0
        ax.set_ylim(0, max(1.1, float(top if top == top else 1.0) * 1.1))
    elif name == "accuracy":
        ax.set_ylim(0, 1)  # a full scale, so that small changes look small
    else:
        ax.set_ylim(bottom=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(gpus)
    ax.set_xticklabels([str(g) for g in gpus])
    ax.minorticks_off()
    ax.set_xlabel("GPUs (replicas)")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    if table.empty:
        ax.text(0.5, 0.5, "no completed point to draw", ha="center", va="center",
                transform=ax.transAxes)


def save(fig, path_stem: Path) -> list[Path]:
    written = []
    from dlscale.files import atomic

    for ext in ("png", "svg"):
        final = path_stem.with_suffix(f".{ext}")
        with atomic(final) as tmp:
            fig.savefig(tmp, dpi=120, bbox_inches="tight")
        written.append(final)
    return written


def plot_all(table, out_dir: Path, subtitle: str = "", runs=None) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["text.parse_math"] = False  # "$5" is five dollars, not maths
    note = missing_note(runs)
    table = with_errors(table)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    titles = {name: spec[1] for name, spec in PLOTS.items()}
    for name in PLOTS:
        fig, ax = plt.subplots(figsize=(6, 4.2))
        draw(ax, table, name)
        ax.set_title(f"{titles[name]} vs GPUs" + (f"\n{subtitle}" if subtitle else ""),
                     fontsize="medium")
        if note:
            fig.text(0.01, -0.02, note, fontsize="small", color="firebrick", wrap=True,
                     va="top")
        written += save(fig, out_dir / name)
        plt.close(fig)
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    for ax, name in zip(axes.flat, PLOTS):
        draw(ax, table, name)
        ax.set_title(titles[name], fontsize="medium")
    axes.flat[-1].axis("off")
    if subtitle:
        fig.suptitle(subtitle)
    if note:
        fig.text(0.01, 0.01, note, fontsize="medium", color="firebrick", wrap=True)
    written += save(fig, out_dir / OVERVIEW)
    plt.close(fig)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scaling", type=Path, help="scaling.csv from aggregate.py")
    parser.add_argument("--out-dir", required=True, type=Path)
    parser.add_argument("--subtitle", default="", help="what was run, shown under each title")
    parser.add_argument("--runs", type=Path,
                        help="runs.csv: the figures name the runs that are not drawn")
    args = parser.parse_args(argv)

    from dlscale.analysis import SCALING_COLUMNS, read_table

    try:
        table = read_table(args.scaling, SCALING_COLUMNS)
        runs = read_table(args.runs, ["run", "counted", "problem"]) if args.runs else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    written = plot_all(table, args.out_dir, args.subtitle, runs)
    print(f"wrote {len(written)} files to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
