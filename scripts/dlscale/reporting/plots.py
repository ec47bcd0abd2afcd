"""The scaling plots, drawn from the study's tables (scripts/plot_scaling.py runs them).

One line per series (model, and strategy/precision when the sweep compares them; split
by nodes only where a series has one GPU count on several node counts); error bars show
the 95% confidence interval; other studies (compare:) dashed with open markers; every
figure names the points it lacks; the subtitle says what the drawn runs used, read from
runs.csv. Labels are drawn as written ($, _, % and braces included: no mathtext).
"""

from __future__ import annotations

from pathlib import Path

from dlscale.core.vocabulary import COST, OVERVIEW, PLOTS


def with_errors(table):
    """Propagate the epoch-time CI to throughput and speedup (relative error); the
    columns newer than the table (a scaling.csv of an older dlscale) are left empty."""
    from dlscale.reporting.analysis import EXTRA_COLUMNS

    table = table.copy()
    for column in EXTRA_COLUMNS:
        if column not in table:
            table[column] = float("nan")
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


def lines(table):
    """(label, rows) per line: a series, split by nodes only where one GPU count of the
    series ran on several node counts (nodes: auto gives one line across nodes)."""
    for series, group in table.groupby("series", sort=True):
        if group["gpus"].duplicated().any():
            for nodes, part in group.groupby("nodes", sort=True):
                yield line_label(series, nodes, True), part
        else:
            yield line_label(series, 0, False), group


def scaling_mode(table) -> str:
    modes = sorted({m for m in table.get("scaling", []) if isinstance(m, str) and m})
    return " and ".join(modes)


def draw(ax, table, name: str, others=(), amdahl=None) -> None:
    column, _, ylabel, error = PLOTS[name]
    if name == "throughput" and len(table) and (table.get("unit") == "tokens").all():
        column, ylabel, error = "tokens_per_s", "throughput [tokens/s]", None  # an LLM's
    gpus = sorted(set(table["gpus"]).union(*[set(t["gpus"]) for _, t in others])) or [1]
    colours = {}
    for label, group in lines(table):
        group = group.sort_values("gpus").dropna(subset=[column])
        if group.empty:
            continue
        yerr = group[error] if error and group[error].notna().any() else None
        drawn = ax.errorbar(group["gpus"], group[column], yerr=yerr, marker="o", capsize=3,
                            label=label)
        colours[group["series"].iloc[0]] = drawn.lines[0].get_color()
        if name == "utilisation" and group["gpu_util_percent"].notna().any():
            ax.plot(group["gpus"], group["gpu_util_percent"], marker="s", linestyle="--",
                    color=drawn.lines[0].get_color(), label=f"{label} (GPU)")
        if name == "accuracy" and group["test_accuracy"].notna().any():
            ax.plot(group["gpus"], group["test_accuracy"], marker="s", linestyle="--",
                    color=drawn.lines[0].get_color(),  # same series, same colour
                    label=f"{label} (test)")
    draw_others(ax, others, "gpus", column)
    if name == "speedup":
        if amdahl is not None and not amdahl.empty:
            gpus = draw_amdahl(ax, amdahl, gpus, colours)
        mode = scaling_mode(table)
        ax.plot(gpus, gpus, color="grey", linestyle=":",
                label=f"ideal (linear{', ' + mode + ' scaling' if mode else ''})")
        relative = table[table["base_gpus"] > 1] if "base_gpus" in table else table[:0]
        for series, group in relative.groupby("series"):
            base = float(group["base_gpus"].iloc[0])  # a series over its fewest GPUs
            ax.plot(group["gpus"], group["gpus"] / base, linestyle=":",
                    color=colours.get(series), label=f"ideal from {base:g} GPUs")
    if name == "efficiency":
        ax.axhline(1.0, color="grey", linestyle=":", label="ideal")
        top = table["efficiency"].max() if len(table) else 1.0
        ax.set_ylim(0, max(1.1, float(top if top == top else 1.0) * 1.1))
    elif name == "accuracy":
        ax.set_ylim(0, 1)  # a full scale, so that small changes look small
    elif name == "utilisation":
        ax.set_ylim(0, 105)
        if table.empty or table[column].isna().all():
            ax.text(0.5, 0.4, "no telemetry recorded", ha="center", va="center",
                    transform=ax.transAxes)
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


def draw_others(ax, others, x: str, y: str) -> None:
    """Other studies' lines (compare:): dashed, open markers, labelled with the study."""
    for study, other in others:
        for label, group in lines(other):
            group = group.sort_values("gpus").dropna(subset=[y])
            if not group.empty:
                ax.plot(group[x], group[y], marker="o", markerfacecolor="none",
                        linestyle="--", label=f"{study}: {label}")


def draw_amdahl(ax, amdahl, gpus: list[int], colours: dict) -> list[int]:
    """Each series' Amdahl model from 1 GPU to 4x its largest measured count, dashed in
    the series' colour and labelled as a model; the GPU ticks gain the predicted counts."""
    import numpy as np

    from dlscale.reporting.amdahl import amdahl as model

    for _, row in amdahl.iterrows():
        n = np.geomspace(1, row["gpus_4x"], 50)
        se = row["serial_fraction_se"]
        spread = f" ± {se:.3f}" if se == se else ""
        ax.plot(n, model(n, row["serial_fraction"]), linestyle="--", linewidth=1,
                color=colours.get(row["series"]),
                label=f"{row['series']}: Amdahl model, f = {row['serial_fraction']:.3f}{spread}")
    return sorted(set(gpus) | set(amdahl["gpus_2x"].astype(int))
                  | set(amdahl["gpus_4x"].astype(int)))


def draw_cost(ax, table, others=()) -> None:
    """Epoch time against GPU-hours per epoch: down is faster, left is cheaper; each point
    is labelled with its GPU count, the fastest and the cheapest are named."""
    from dlscale.reporting.analysis import gpu_hours_per_epoch

    for label, group in lines(table):
        group = group.sort_values("gpus").dropna(subset=["epoch_time_s"])
        if group.empty:
            continue
        hours = gpu_hours_per_epoch(group)
        ax.plot(hours, group["epoch_time_s"], marker="o", label=label)
        for x, y, g in zip(hours, group["epoch_time_s"], group["gpus"]):
            ax.annotate(f"{g}", (x, y), textcoords="offset points", xytext=(4, 4),
                        fontsize="x-small")
    draw_others(ax, [(study, other.assign(gpu_hours=gpu_hours_per_epoch(other)))
                     for study, other in others], "gpu_hours", "epoch_time_s")
    done = table.dropna(subset=["epoch_time_s"])
    if not done.empty:
        hours = gpu_hours_per_epoch(done)
        fast, cheap = done["epoch_time_s"].idxmin(), hours.idxmin()
        for index, word in ((fast, "fastest"), (cheap, "cheapest")):
            ax.annotate(f"{word}: {done.loc[index, 'series']}, {done.loc[index, 'gpus']} GPU(s)",
                        (hours[index], done.loc[index, "epoch_time_s"]),
                        textcoords="offset points", xytext=(6, -12 if word == "fastest" else 10),
                        fontsize="x-small", color="dimgrey")
    else:
        ax.text(0.5, 0.5, "no completed point to draw", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("GPU-hours per epoch [GPU h]")
    ax.set_ylabel("epoch time [s]")
    ax.margins(x=0.35, y=0.15)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")


def describe_runs(runs) -> str:
    """What the drawn dlscale runs used: batch per GPU and epochs per model, precisions,
    strategies and the scaling mode (from runs.csv, not from the config)."""
    if runs is None or runs.empty or "source" not in runs:
        return ""
    ours = runs[runs["counted"].astype(bool) & (runs["source"] == "dlscale")]
    if ours.empty:
        return "external runs" if runs["counted"].astype(bool).any() else ""
    parts = []
    for column, fmt in (("dataset", "{}"), ("device", "device {}")):
        values = sorted({str(v) for v in ours.get(column, []) if isinstance(v, str) and v})
        if values:
            parts.append(fmt.format("/".join(values)))
    for model, group in ours.groupby("model", sort=False):
        per_gpu = sorted({int(b) for b in group["global_batch"] / group["gpus"] if b == b})
        epochs = sorted({int(e) for e in group["epochs_expected"] if e == e})
        batch = ("/".join(map(str, per_gpu)) + " per GPU") if per_gpu else ""
        parts.append(f"{model}: " + ", ".join(
            x for x in (batch, "/".join(map(str, epochs)) + " epochs" if epochs else "") if x))
    if "image_size" in ours:
        inputs = ours.dropna(subset=["image_size"]).drop_duplicates(["image_size", "resize"])
        for row in inputs.itertuples():
            resize = getattr(row, "resize", None)
            how = f" ({resize} resize)" if isinstance(resize, str) and resize != "none" else ""
            parts.append(f"{int(row.image_size)} px{how}")
    for column in ("precision", "strategy"):
        values = sorted({str(v) for v in ours.get(column, []) if isinstance(v, str) and v})
        if values:
            parts.append("/".join(values))
    mode = scaling_mode(ours)
    if mode:
        parts.append(f"{mode} scaling")
    gpu_models = {m for m in ours.get("system_gpu_model", []) if isinstance(m, str)}
    if len(gpu_models) == 1 and ours["system_gpu_model"].notna().all():
        parts.insert(0, gpu_models.pop())  # every drawn run on the same GPU model
    return "; ".join(parts)


def flag_note(table) -> str:
    """The flagged points (analysis.flags_of), one per line, for the subtitles."""
    if "flags" not in table:
        return ""
    flagged = table[table["flags"].fillna("").astype(str) != ""]
    return "\n".join(f"flagged: {row.series} on {int(row.gpus)} GPU(s), {int(row.nodes)} "
                     f"node(s): {row.flags}" for row in flagged.itertuples())


def save(fig, path_stem: Path, dpi: int = 120) -> list[Path]:
    """The figure as PNG and SVG, cropped to what it draws (notes below the axes too).
    The layout (the overview's constrained layout) and the crop are computed once, at
    the PNG's resolution, for both files: in each savefig they cost more than the
    drawing (docs/benchmarks.md)."""
    import matplotlib

    from dlscale.core.files import atomic

    fig.set_dpi(dpi)
    fig.draw_without_rendering()  # runs the layout engine, if the figure has one
    fig.set_layout_engine("none")  # keeps the positions it computed
    crop = fig.get_tightbbox().padded(matplotlib.rcParams["savefig.pad_inches"])
    written = []
    for ext in ("png", "svg"):
        final = path_stem.with_suffix(f".{ext}")
        with atomic(final) as tmp:
            fig.savefig(tmp, dpi=dpi, bbox_inches=crop)
        written.append(final)
    return written


def plot_all(table, out_dir: Path, subtitle: str = "", runs=None, others=(),
             amdahl=None) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["text.parse_math"] = False  # "$5" is five dollars, not maths
    note = missing_note(runs)
    subtitle = "\n".join(x for x in (subtitle, describe_runs(runs), flag_note(table)) if x)
    table = with_errors(table)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    titles = {name: spec[1] for name, spec in PLOTS.items()}
    titles[COST] = "Epoch time against GPU-hours"
    for name in (*PLOTS, COST):
        fig, ax = plt.subplots(figsize=(6, 4.2))
        if name == COST:
            draw_cost(ax, table, others)
        else:
            draw(ax, table, name, others, amdahl)
        ax.set_title((titles[name] if name == COST else f"{titles[name]} vs GPUs")
                     + (f"\n{subtitle}" if subtitle else ""), fontsize="medium")
        if note:
            fig.text(0.01, -0.02, note, fontsize="small", color="firebrick", wrap=True,
                     va="top")
        written += save(fig, out_dir / name)
        plt.close(fig)
    panels = (*PLOTS, COST)
    rows = -(-len(panels) // 3)
    fig, axes = plt.subplots(rows, 3, figsize=(16, 4.5 * rows), constrained_layout=True)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, name in zip(axes.flat, panels):
        if name == COST:
            draw_cost(ax, table, others)
        else:
            draw(ax, table, name, others, amdahl)
        ax.set_title(titles[name], fontsize="medium")
    if subtitle:
        fig.suptitle(subtitle)
    if note:
        fig.text(0.01, 0.01, note, fontsize="medium", color="firebrick", wrap=True)
    written += save(fig, out_dir / OVERVIEW)
    plt.close(fig)
    return written
