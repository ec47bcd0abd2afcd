"""The report's first page: the answer of the study before anything else.

Snakemake's report opens on the workflow's description beside its rule graph; the
Snakefile's `report:` directive names this page (results/report/first-page.rst, written
by the `report_page` rule) once a study has written it. It holds the overview figure,
one line per series (the largest GPU count measured, its speedup and efficiency, the
fitted serial fraction, the accuracy change), the flags and history verdicts, and the
failed points with their reason. Snakemake renders it with Jinja2 and docutils: the page
is one raw Jinja block, and text from tables (series names, a log's last lines) is
escaped for reStructuredText.
"""

from __future__ import annotations

import base64
import math
import re
from pathlib import Path

import pandas as pd

from dlscale.logparse.lines import printable
from dlscale.reporting.explain import WINDOW_SLOWER
from dlscale.reporting.fits import fits
from dlscale.reporting.knobplots import knob_lines, memory_of, varied_knobs
from dlscale.reporting.prediction.series import not_predictable, set_aside
from dlscale.reporting.seriesparts import rate_per_gpu

# characters with a meaning in reStructuredText inline text: written escaped
RST_SPECIAL = re.compile(r"([\\`*_|\[\]<>])")


def rst(text) -> str:
    """Table text as reStructuredText shows it literally, on one line."""
    text = printable(" ".join(str(text).split()))
    return RST_SPECIAL.sub(r"\\\1", text).replace("{%", "{ %").replace("%}", "% }")


def number(value, digits: int = 3, percent: bool = False) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "n/a"
    if math.isnan(value):
        return "n/a"
    if percent:
        return f"{value:+.1%}"
    return f"{value:.{digits}g}"


def share(value) -> str:
    """A share of a step, as a whole percent."""
    return "n/a" if pd.isna(value) else f"{float(value):.0%}"


def series_lines(scaling: pd.DataFrame, amdahl: pd.DataFrame) -> list[list[str]]:
    """Per series: its largest measured GPU count and what it reached there."""
    serial = dict(zip(amdahl["series"], amdahl["serial_fraction"])) if len(amdahl) else {}
    rows = []
    for series, group in scaling.groupby("series", sort=True):
        measured = group.dropna(subset=["epoch_time_s"]) if "epoch_time_s" in group else group
        if measured.empty:
            measured = group
        top = measured.sort_values(["gpus", "nodes"]).iloc[-1]
        nodes = int(top["nodes"]) if pd.notna(top.get("nodes")) else 1
        rows.append([rst(series),
                     f"{int(top['gpus'])} GPU(s)" + (f" on {nodes} nodes" if nodes > 1 else ""),
                     number(top.get("speedup")), number(top.get("efficiency")),
                     number(serial.get(series)),
                     number(top.get("accuracy_delta"), percent=False),
                     number(top.get("time_to_solution_s"))])
    return rows


def list_table(header: list[str], rows: list[list[str]], widths: list[int]) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1",
             f"   :widths: {' '.join(str(w) for w in widths)}", ""]
    for row in [header, *rows]:
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" for cell in row[1:]]
    return lines + [""]


def ahead_of(prediction: pd.DataFrame, series: str, gpus: int) -> str:
    """'; predicted efficiency at 2n GPUs ... (model ...)', or why it is not predictable
    from the points, or '' where nothing is; a link set aside as contradicting the steps
    is named first."""
    mine = prediction[prediction["series"] == series]
    notes = mine["note"].dropna().astype(str) if "note" in mine else pd.Series(dtype=str)
    aside = next((found for n in notes if (found := set_aside(n))), "")
    said = f"; {rst(aside)}: set aside, predicted from the steps" if aside else ""
    ahead = mine[mine["gpus"] == 2 * gpus]
    if len(ahead) and (why := not_predictable(str(ahead.get("note", pd.Series([""])).iloc[0]))):
        return f"{said}; {2 * gpus} GPUs are {rst(why)}"
    if not len(ahead) or pd.isna(ahead["predicted_efficiency"].iloc[0]):
        return said
    return (f"{said}; predicted efficiency at {2 * gpus} GPUs "
            f"{number(ahead['predicted_efficiency'].iloc[0])} "
            f"(model {rst(ahead['verdict'].iloc[0])})")


def last_above(rows: pd.DataFrame, column: str, threshold: float) -> tuple[str, bool]:
    """('N GPUs on M node(s)', whether that is the largest count predicted): the largest
    count whose efficiency (measured where measured, else `column` of the prediction)
    stays at or above `threshold` with every count before it; '' where none does."""
    found, ordered = "", rows.sort_values(["gpus", "nodes"])
    for _, row in ordered.iterrows():
        value = (row["measured_efficiency"] if pd.notna(row["measured_efficiency"])
                 else row[column])
        if pd.isna(value) or value < threshold:
            return found, False
        found = f"{int(row['gpus'])} GPUs on {int(row['nodes'])} node(s)"
    return found, bool(found)


def holds_until(prediction: pd.DataFrame, series: str, threshold: float) -> str:
    """'; efficiency at or above 0.8 up to N GPUs on M node(s) (band: ... to ...)', or ''
    where the series has no prediction."""
    rows = prediction[prediction["series"] == series]
    if "predicted_efficiency_low" not in rows or rows["predicted_efficiency"].isna().all():
        return ""
    central, _ = last_above(rows, "predicted_efficiency", threshold)
    if not central:
        return f"; efficiency below {number(threshold, 6)} from its smallest count"
    low, _ = last_above(rows, "predicted_efficiency_low", threshold)
    high, beyond = last_above(rows, "predicted_efficiency_high", threshold)
    if "role" in rows and not (rows["role"] == "extrapolated").any() and beyond:
        # nothing predicted past the measured points: the end of the data, not a limit
        why = next((n for n in rows.sort_values("gpus")["note"][::-1] if isinstance(n, str)
                    and n), "") if "note" in rows else ""
        return (f"; efficiency at or above {number(threshold, 6)} at every count measured, up "
                f"to {central}, where the data ends: nothing beyond it is predicted"
                + (f" ({why.rstrip('.')})" if why else ""))
    return (f"; efficiency at or above {number(threshold, 6)} up to {central} (band: "
            f"{low or 'not even the smallest'} to {high}{' or beyond' if beyond else ''})")


def why_lines(breakdown: pd.DataFrame, prediction: pd.DataFrame,
              min_efficiency: float = 0.8) -> list[str]:
    """Per series: where the step goes at its largest GPU count, and the predicted
    efficiency at the next doubling (dlscale.reporting.explain)."""
    out = []
    for series, part in breakdown.groupby("series", sort=False):  # over its node counts
        row = part.sort_values(["gpus", "nodes"]).iloc[-1]
        gpus = int(row["gpus"])
        head = f"- {rst(series)} at {gpus} GPU(s)"
        if pd.isna(row.get("compute_share")):  # an outside log: still its prediction
            text = f"{head}: no traced steps ({rst(row.get('notes') or 'no window')})"
            out.append(text + ahead_of(prediction, series, gpus)
                       + holds_until(prediction, series, min_efficiency) + ".")
            continue
        comm = ("not separable" if row["communication"] == "not separable" else
                f"{share(row['communication_share'])} exposed "
                f"({share(row['comm_total_share'])} in all)")
        text = (f"{head}: compute {share(row['compute_share'])} of the step, "
                f"communication {comm}, input wait {share(row['input_share'])},"
                f" the rest {share(row['other_share'])}: the dominant cost is "
                f"{row['dominant']}")
        slower = row.get("window_step_s", math.nan) / row.get("step_s", math.nan)
        if slower > WINDOW_SLOWER:  # the shares are of the traced steps, not the epochs'
            text += (f" (of the traced steps, which took {slower:.1f}x the epochs' steps: "
                     "run one at a time and profiled)")
        text += ahead_of(prediction, series, gpus) + holds_until(prediction, series,
                                                                 min_efficiency)
        out.append(text + ".")
    if not out:
        return []
    return ["Why it scales", "-------------", "",
            "Where the step time goes at the largest GPU count (a few traced steps of the "
            "first epoch; results/tables/breakdown.csv) and what the next doubling would "
            "give, and up to how many GPUs the efficiency stays above "
            f"{number(min_efficiency, 6)} (the model fitted on every measured point: "
            "compute, the all-reduce over the links, what else grows with the GPUs; "
            "prediction.csv):",
            "", *out, ""]


def token_lines(scaling: pd.DataFrame) -> list[str]:
    """Language models' points (unit tokens): tokens/s per GPU and in all, memory, time
    to solution and the cost-efficiency proxy, per series and GPU count, as the 2026
    edition's chapter 15 tables them; [] where no point counts tokens."""
    if "unit" not in scaling or not (tokens := scaling[scaling["unit"] == "tokens"]).size:
        return []
    rows = [[rst(row["series"]), f"{int(row['gpus'])} on {int(row['nodes'])}",
             number(row["tokens_per_s_per_gpu"], 5), number(row["tokens_per_s"], 5),
             number(row["efficiency"]), number(row["memory_gib"]) if pd.notna(
                 row["memory_gib"]) else "unknown", number(row["time_to_solution_s"]),
             number(row["cost_efficiency"])] for _, row in tokens.iterrows()]
    return ["Language models' points count tokens, never images: their throughput per GPU "
            "and in all, the efficiency against the series' base point, the peak memory "
            "per GPU the output states (unknown where it printed 0: no GPU), the time to "
            "solution (warm-up included) and the throughput per GPU-hour against the base "
            "(cost efficiency):", "",
            *list_table(["series", "GPUs on nodes", "tokens/s per GPU", "tokens/s",
                         "efficiency", "memory (GiB)", "time to solution (s)",
                         "cost efficiency"], rows, [24, 10, 12, 12, 10, 10, 12, 10])]


def fit_lines(scaling: pd.DataFrame, failed: pd.DataFrame) -> list[str]:
    """'What fits in memory': per series and GPU count with a point out of memory, the
    largest batch per GPU that fit and the smallest that did not (reporting.fits); []
    where no point ran out of memory."""
    rows = fits(scaling, failed)
    if not rows:
        return []
    out = []
    for row in rows:
        head = f"- {rst(row['series'])} on {row['gpus']} GPU(s): "
        if "fit" not in row:
            out.append(head + f"no batch per GPU fit: the smallest tried, "
                       f"{row['did_not_fit']:g}, ran out of memory")
            continue
        memory = (f", {number(row['memory_gib'])} GiB" if pd.notna(row["memory_gib"])
                  else ", memory unknown")
        out.append(head + f"the largest batch per GPU that fit is {row['fit']:g} "
                   f"({number(row['rate_per_gpu'], 5)} {row['unit']}/s per GPU{memory}); "
                   f"{row['did_not_fit']:g} ran out of memory")
    return ["What fits in memory", "-------------------", "",
            "A point that runs out of memory is a result, not a failure of the study "
            "(runs.csv's status out_of_memory):", "", *out, ""]


def knob_section(scaling: pd.DataFrame) -> list[str]:
    """'By knob': per knob the study varies, each combination of the other knobs and GPU
    count with the throughput and peak memory per GPU at each value (the chapters'
    tables; plots/knobs.png draws them); [] where no knob takes two values."""
    names = varied_knobs(scaling)
    if not names:
        return []
    unit, out = rate_per_gpu(scaling)[1], []
    for name in names:
        for label, values, rates, rows in knob_lines(scaling, name):
            cells = [f"{rst(v)}: {number(r, 5)} {unit}/s per GPU, " + (
                f"{number(m)} GiB" if pd.notna(m) else "memory unknown")
                + (f", {number(t)} s in all" if pd.notna(t := row.get(
                    "time_to_solution_s", float("nan"))) else "")
                for v, r, m, row in zip(values, rates, memory_of(rows), rows)]
            out.append(f"- {rst(name)}, {rst(label)}: " + "; ".join(cells))
    return ["By knob", "-------", "",
            "Throughput and peak memory per GPU at each value of a knob (sweep.knobs), and "
            "the time to solution (the whole training, warm-up and compilation included), "
            "the other knobs and the GPUs as named (the knobs figure draws them; a value "
            "that ran out of memory is under What fits in memory and the failed points):",
            "", *out, ""]


def page(scaling: pd.DataFrame, amdahl: pd.DataFrame, failed: pd.DataFrame,
         overview: Path | None = None, verdicts: pd.DataFrame | None = None,
         why: tuple[pd.DataFrame, pd.DataFrame] | None = None,
         min_efficiency: float = 0.8) -> str:
    """The first page as reStructuredText (for Snakemake's report)."""
    lines = ["How this study scales", "=====================", ""]
    if scaling.empty:
        lines += ["No point of this study has a result yet: see the failed points below.", ""]
    else:
        lines += ["At the largest GPU count measured, per series (speedup and efficiency "
                  "against 1 GPU; the serial fraction fitted with Amdahl's law; the change "
                  "of the final training accuracy against 1 GPU; the time to solution, the "
                  "whole training with its warm-up and compilation):", ""]
        lines += list_table(["series", "largest measured", "speedup", "efficiency",
                             "serial fraction", "accuracy change", "time to solution (s)"],
                            series_lines(scaling, amdahl), [28, 16, 10, 10, 11, 11, 12])
    lines += token_lines(scaling)
    lines += knob_section(scaling)
    if overview is not None and overview.exists():
        # embedded, in lines of 76 characters (docutils refuses a line of over 10,000;
        # the image's address is read without its whitespace)
        data = base64.b64encode(overview.read_bytes()).decode()
        lines += [".. image:: data:image/png;base64,",
                  *(f"   {data[i:i + 76]}" for i in range(0, len(data), 76)),
                  "   :width: 100%",
                  "   :alt: the overview figure: epoch time, speedup, efficiency and "
                  "accuracy against GPUs", ""]
    if why is not None:
        lines += why_lines(*why, min_efficiency)
    flags = []
    if "flags" in scaling:
        for _, row in scaling.dropna(subset=["flags"]).iterrows():
            if str(row["flags"]).strip():
                flags.append(f"- {rst(row['series'])}, {int(row['gpus'])} GPU(s): "
                             f"{rst(row['flags'])}")
    if verdicts is not None and not verdicts.empty:
        for _, row in verdicts[verdicts["verdict"] == "fail"].iterrows():
            flags.append(f"- {rst(row['series'])}, {int(row['gpus'])} GPU(s): slower than its "
                         f"history (epoch {number(row['epoch_time_s'])} s against a median of "
                         f"{number(row['history_median_s'])} s)")
    lines += ["Flags and verdicts", "------------------", ""]
    lines += (flags or ["None: no result looks wrong and no point is slower than its "
                        "history."]) + [""]
    lines += fit_lines(scaling, failed)
    lines += ["Failed points", "-------------", ""]
    if failed.empty:
        lines += ["None: every planned point completed.", ""]
    else:
        for _, row in failed.iterrows():
            problem = str(row.get("problem")) if pd.notna(row.get("problem")) else ""
            status = str(row["status"])
            problem = problem.removeprefix(f"{status}: ")  # "failed, failed: ..." was shown
            lines.append(f"- {rst(row['run'])}: {rst(status)}" +
                         (f", {rst(problem)}" if problem else ""))
        lines.append("")
    lines += ["The tables, every figure and the workflow are in the menu on the left.", ""]
    return "{% raw %}\n" + "\n".join(lines) + "\n{% endraw %}\n"
