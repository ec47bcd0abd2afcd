"""The two plots of why a series scales (dlscale.reporting.explain): where the step time goes at
each GPU count (stacked seconds per part), and the communication model's predicted
efficiency against the measured one, its extrapolation shaded."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dlscale.core.vocabulary import WHY_PLOTS
from dlscale.reporting.plots import save

COLOURS = {"compute": "tab:blue", "communication": "tab:red", "input": "tab:orange",
           "other": "tab:grey"}


def panels(count: int):
    import matplotlib.pyplot as plt

    cols = min(count, 3) or 1
    rows = -(-max(count, 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax in axes.flat[count:]:
        ax.axis("off")
    return fig, list(axes.flat)


def label(ax, title: str, size: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=size)
    ax.set_xlabel("GPUs")
    ax.set_ylabel(ylabel)


def finish(fig, axes, title: str, stem: Path) -> list[Path]:
    """The figure's legend and title, saved as PNG and SVG, and closed."""
    import matplotlib.pyplot as plt

    axes[0].legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    written = save(fig, stem)
    plt.close(fig)
    return written


def draw_breakdown(breakdown: pd.DataFrame, out_dir: Path) -> list[Path]:

    keys = list(dict.fromkeys(zip(breakdown["series"], breakdown["nodes"], strict=True)))
    fig, axes = panels(len(keys))
    for ax, (series, nodes) in zip(axes, keys, strict=False):
        part = breakdown[(breakdown["series"] == series) & (breakdown["nodes"] == nodes)]
        part = part.sort_values("gpus")
        x = [str(int(g)) for g in part["gpus"]]
        bottom = [0.0] * len(part)
        for name, colour in COLOURS.items():
            seconds = (part[f"{name}_share"].fillna(0) * part["step_s"]).tolist()
            ax.bar(x, seconds, bottom=bottom, color=colour, label=name)
            bottom = [b + s for b, s in zip(bottom, seconds, strict=True)]
        for i, row in enumerate(part.itertuples()):
            if pd.isna(row.compute_share):
                ax.text(i, 0, "no window", ha="center", va="bottom", fontsize="small")
            elif row.communication == "not separable":
                ax.text(i, bottom[i], "communication\nnot separable", ha="center",
                        va="bottom", fontsize="x-small")
        title = series if breakdown["nodes"].nunique() == 1 else f"{series}, {nodes} node(s)"
        label(ax, title, "medium", "step time [s]")
    return finish(fig, axes, "Where the step time goes (traced steps, shares of the measured "
                  "step)", out_dir / WHY_PLOTS[0])


def draw_prediction(prediction: pd.DataFrame, out_dir: Path) -> list[Path]:

    names = list(dict.fromkeys(prediction["series"]))
    fig, axes = panels(len(names))
    for ax, series in zip(axes, names, strict=False):
        part = prediction[prediction["series"] == series].sort_values("gpus")
        measured = part[part["measured_efficiency"].notna()]
        ax.plot(measured["gpus"], measured["measured_efficiency"], "o", color="black",
                label="measured")
        model = part[part["predicted_efficiency"].notna()]
        if len(model):
            ax.plot(model["gpus"], model["predicted_efficiency"], "-", color="tab:red",
                    label="model")
            if "predicted_efficiency_low" in model:  # the band: its fits' ends, widened
                ax.fill_between(model["gpus"], model["predicted_efficiency_low"],
                                model["predicted_efficiency_high"].clip(upper=1.0),
                                color="tab:red", alpha=0.2, linewidth=0, label="band")
            beyond = model[model["role"] == "extrapolated"]
            if len(beyond):
                ax.axvspan(measured["gpus"].max(), beyond["gpus"].max(), color="tab:red",
                           alpha=0.08, label="extrapolated")
            verdict = model["verdict"].iloc[0]
        else:
            verdict = part["note"].iloc[0]
        ax.set_xscale("log", base=2)
        ax.set_xticks(part["gpus"].tolist(), [str(int(g)) for g in part["gpus"]])
        ax.set_ylim(bottom=0)
        label(ax, f"{series}\n{verdict}", "small", "parallel efficiency")
    return finish(fig, axes, "What more GPUs would give: the model against the measured",
                  out_dir / WHY_PLOTS[1])


def plot_why(breakdown: pd.DataFrame, prediction: pd.DataFrame, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["text.parse_math"] = False
    out_dir.mkdir(parents=True, exist_ok=True)
    return draw_breakdown(breakdown, out_dir) + draw_prediction(prediction, out_dir)
