"""From per-epoch tables to the study's figures: run checks, per-run summary, scaling.

Definitions (docs/analysis.md explains them for users):
- A run counts only if it completed every epoch, no loss is NaN, it is not cut, and
  TensorFlow used as many replicas as were asked for; runs.csv says why one does not.
- epoch_time_s: mean seconds of the epochs after the first `skip_epochs`, pooled over
  the repeats of a point; epoch_time_std and epoch_time_ci95 (Student t) over the same.
- images_per_s = images per epoch / epoch_time_s.
- speedup = epoch time of the 1-GPU point of the same series / epoch time; efficiency =
  speedup / gpus; accuracy_delta = final training accuracy - that of the 1-GPU point.
  No 1-GPU point in the series: speedup, efficiency and deltas stay empty.
- serial_fraction: Karp-Flatt's e(N) = (1/S - 1/N) / (1 - 1/N) (dlscale/reporting/amdahl.py).
- flags: results that look wrong, said and kept (never clamped or left out): a slowdown
  (speedup below 1), super-linear scaling (efficiency above 1: often runs that did not
  control the same conditions, such as a dataset cached in memory for one point only),
  a serial fraction outside [0, 1], and a run whose log states another GPU count than
  the one it is counted under (external runs).
- gpu_hours_per_epoch = GPUs (over all nodes) x epoch_time_s / 3600, and per 100 epochs;
  cost_per_epoch = that x analysis.gpu_hour_price when a price is given.
- time_to_target_s: seconds of training (every epoch, the first included) until the
  first epoch whose training accuracy is at least analysis.target_accuracy; the mean
  over the point's repeats when all reached it, empty otherwise (target_reached says
  how many did). Training accuracy, because the test set is evaluated once, at the end.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dlscale.core.columns import (
    EPOCH_KEYS,
    EXTRA_COLUMNS,
    MEASURED,
    RECORD_KEYS,
    RUNS_CARRIED,
    RUNS_CSV,
    SCALING_COLUMNS,
)
from dlscale.core.contract import Status
from dlscale.core.errors import one_line
from dlscale.core.vocabulary import (
    COMPARED_COLUMNS,
    EPOCH_REQUIRED,  # noqa: F401 (aggregate.py reads it here)
    INPUT_BOUND_RATIO,
    SYSTEM_FIELDS,
    TELEMETRY_FIELDS,
)
from dlscale.logparse.nccldebug import fallback_note
from dlscale.reporting.amdahl import karp_flatt
from dlscale.reporting.seriesparts import by_cluster, knob_names, with_knobs

# two-sided 95% Student t quantiles for 1..30 degrees of freedom; 1.96 beyond
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042]
POINT_KEYS = ["series", "nodes", "gpus"]
PEAKS = ("rss_mb_peak", "gpu_mem_mb_peak")  # the rest of TELEMETRY_FIELDS are means
FAILED_COLUMNS = ["run", "source", "series", "model", "nodes", "gpus", "global_batch",
                  "repeat", "status",
                  "epochs_done", "epochs_expected", "problem"]


def read_table(path, required: list[str]) -> pd.DataFrame:
    """A CSV with at least the `required` columns; ValueError naming the file and what
    it lacks otherwise."""
    try:
        table = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        table = pd.DataFrame()
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read as CSV ({exc})") from exc
    missing = [c for c in required if c not in table.columns]
    if missing:
        raise ValueError(f"{path} lacks the column(s) {', '.join(missing)}: expected a table "
                         f"with {', '.join(required)}")
    return table


def t95(dof: int) -> float:
    if dof < 1:
        return math.nan
    return T95[dof - 1] if dof <= len(T95) else 1.96


def _defaults(epochs: pd.DataFrame) -> pd.DataFrame:
    epochs = epochs.copy()
    fill = {"source": "dlscale", "nodes": 1, "repeat": 1, "strategy": "", "precision": "",
            "scaling": "", "status": Status.COMPLETED.value, "cut": False, "log_check": "",
            "loss_unknown": False}
    for column, value in fill.items():
        if column not in epochs:
            epochs[column] = value
        epochs[column] = epochs[column].fillna(value)
    if "series" not in epochs:
        epochs["series"] = epochs["model"]
    epochs["series"] = epochs["series"].fillna(epochs["model"])
    if "run" not in epochs:  # one run per file, or per log_run of a file
        epochs["run"] = epochs["file"].astype(str)
        if "log_run" in epochs:
            epochs["run"] += "#" + epochs["log_run"].astype(str)
    # what a run's row takes from its per-run table, which an outside log may lack
    for column in ("skip_epochs", *RECORD_KEYS, *EPOCH_KEYS.values(), *RUNS_CARRIED):
        if column not in epochs:
            epochs[column] = np.nan
    epochs["cut"] = epochs["cut"].astype(str).str.lower().isin(["true", "1"])
    return by_cluster(epochs)


def joined(values) -> str | float:
    """The runs' distinct texts of a column, sorted and '; '-joined; NaN where none."""
    return "; ".join(sorted({v for v in values if isinstance(v, str) and v})) or np.nan


def time_to_target(group: pd.DataFrame, target: float | None) -> float:
    """Seconds until the end of the first epoch with training accuracy >= target."""
    if target is None or group.empty:
        return np.nan
    reached = np.flatnonzero(group["accuracy"].astype(float).to_numpy() >= target)
    if not len(reached):
        return np.nan
    return float(group["seconds"].astype(float).iloc[:reached[0] + 1].sum())


def telemetry_of(epochs: pd.DataFrame) -> dict:
    """Means (peaks for memory) of the epochs' telemetry summaries; NaN where absent."""
    out = {}
    for name in TELEMETRY_FIELDS:
        values = pd.to_numeric(epochs[name], errors="coerce") if name in epochs else pd.Series()
        out[name] = (values.max() if name in PEAKS else values.mean()) if values.notna().any() \
            else np.nan
    return out


def run_skip(first, skip_epochs: int) -> int:
    """The warm-up epochs left out of a run: its external entry's skip_epochs, or the
    study's."""
    own = pd.to_numeric(first.get("skip_epochs"), errors="coerce")
    return skip_epochs if pd.isna(own) else int(own)


def timed(epochs: pd.DataFrame) -> pd.Series:
    """Whether each epoch's time is one an epoch can take (finite, above zero)."""
    seconds = pd.to_numeric(epochs["seconds"], errors="coerce")
    return pd.Series(np.isfinite(seconds) & (seconds > 0), index=epochs.index)


def summarize_runs(epochs: pd.DataFrame, skip_epochs: int,
                   target_accuracy: float | None = None) -> pd.DataFrame:
    """One row per run with its checks (`counted`, `problem`) and its own means."""
    epochs = _defaults(epochs)
    rows = []
    for _, group in epochs.groupby("run", sort=False):
        first = group.iloc[0]
        group = group.dropna(subset=["epoch"]).sort_values("epoch")  # a run without epochs
        expected = first["epochs_expected"]                          # has one empty row
        if pd.isna(expected) and "epochs_total" in first:
            expected = first["epochs_total"]
        problems = []
        if first["status"] != Status.COMPLETED:
            why = first["failure"] if isinstance(first["failure"], str) else "no reason given"
            problems.append(f"{first['status']}: {one_line(why)}")
        if group["cut"].any():
            problems.append("log cut inside an epoch")
        benchmark = group.empty and not all(pd.isna(first.get(k)) for k in (
            "logged_images_per_s", "tokens_per_s", "tokens_per_s_per_gpu"))
        if not pd.isna(expected) and len(group) < int(expected) and not benchmark:
            problems.append(f"{len(group)} of {int(expected)} epochs")  # (a total: none)
        unknown = group["loss_unknown"].astype(str).str.lower().isin(["true", "1"])
        if not (np.isfinite(group["loss"].astype(float)) | unknown).all():
            problems.append("NaN or infinite loss")
        if not pd.isna(first["gpus_asked"]) and int(first["gpus_asked"]) != int(first["gpus"]):
            problems.append(f"{int(first['gpus'])} replicas used, {int(first['gpus_asked'])} "
                            "asked for")
        skip = run_skip(first, skip_epochs)
        used = group[group["epoch"] > skip]
        bad = ~timed(used)
        seconds = pd.to_numeric(used["seconds"], errors="coerce")
        notes = first["notes"]
        if bad.any():  # a time no epoch can take: said, and left out of the means
            said = (f"epoch time(s) {', '.join(f'{v:g}' for v in seconds[bad])} s of epoch(s) "
                    f"{', '.join(str(int(e)) for e in used['epoch'][bad])} left out of the "
                    "means (zero, negative, NaN or infinite)")
            notes = f"{notes}; {said}" if isinstance(notes, str) and notes else said
            used = used[~bad]
        if used.empty and bad.any() and (seconds[bad] == 0).all():
            problems.append("every epoch's time is 0 s: the output gives whole seconds and "
                            "each epoch took less than one (Keras 3 prints '0s'); train "
                            "longer epochs, or a patterns.epoch_time that reads a finer "
                            "time such as ms/step")
        elif used.empty and not benchmark:
            problems.append(f"no epoch left after skipping {skip}")
        rows.append({
            **{column: first.get(column) for column in RUNS_CARRIED},
            "nodes": int(first["nodes"]), "repeat": int(first["repeat"]),
            "epochs_done": len(group), "epochs_used": len(used),
            "epoch_time_s": used["seconds"].mean() if len(used) else np.nan,
            "final_loss": group["loss"].iloc[-1] if len(group) else np.nan,
            "final_accuracy": group["accuracy"].iloc[-1] if len(group) else np.nan,
            "time_to_target_s": time_to_target(group, target_accuracy),
            "time_to_solution_s": whole_time(first, group),
            **telemetry_of(used),
            "notes": notes, "epochs_expected": expected,
            "counted": not problems, "problem": "; ".join(problems),
        })
    runs = with_knobs(pd.DataFrame(rows, columns=[c.name for c in RUNS_CSV]), epochs)
    runs["gpus"] = pd.to_numeric(runs["gpus"]).astype("Int64")  # empty for a crashed log
    runs["images_per_s"] = (pd.to_numeric(runs["images_per_epoch"], errors="coerce")
                            / runs["epoch_time_s"]).fillna(
        pd.to_numeric(runs["logged_images_per_s"], errors="coerce"))  # a benchmark's own
    gpus = pd.to_numeric(runs["gpus"], errors="coerce").astype(float)
    total = pd.to_numeric(runs["tokens_per_s"], errors="coerce")
    each = pd.to_numeric(runs["tokens_per_s_per_gpu"], errors="coerce")
    runs["tokens_per_s"] = runs["tokens_per_s"].where(total.notna() | each.isna(), each * gpus)
    runs["tokens_per_s_per_gpu"] = runs["tokens_per_s_per_gpu"].where(
        each.notna() | total.isna(), total / gpus)
    runs["unit"] = runs["unit"].fillna("images")
    return runs


def whole_time(first: pd.Series, epochs: pd.DataFrame) -> float:
    """A run's time to solution: a Trainer's train_runtime where it printed one, else the
    sum of all its epochs (warm-up included)."""
    for key in ("train_seconds", "time_to_solution_s"):  # a log's; a command's record's
        stated = pd.to_numeric(pd.Series([first.get(key)]), errors="coerce")[0]
        if not pd.isna(stated):
            return float(stated)
    seconds = pd.to_numeric(epochs["seconds"], errors="coerce")
    return float(seconds.sum()) if len(seconds) and seconds.notna().all() else np.nan


def flags_of(row, accuracy_tolerance: float) -> str:
    """What looks wrong about a point of the scaling table ('; '-joined, '' for nothing)."""
    flags = []
    if row.accuracy_flag:  # the study's own claim: accuracy stays the same
        flags.append(f"accuracy {row.accuracy_delta:+.3f} against 1 GPU, beyond the "
                     f"tolerance {accuracy_tolerance:g}")
    if row.speedup < 1:
        flags.append(f"slowdown: speedup {row.speedup:.3g} on {row.gpus} GPUs")
    if row.efficiency > 1:
        flags.append(f"super-linear: efficiency {row.efficiency:.3g} (were the runs alike?)")
    if not 0 <= row.serial_fraction <= 1 and not pd.isna(row.serial_fraction):
        flags.append(f"serial fraction {row.serial_fraction:.3g} outside [0, 1]")
    if row.gpus_logged:
        flags.append(f"the log states {', '.join(map(str, row.gpus_logged))} GPU(s), "
                     f"counted as {row.gpus}")
    if isinstance(getattr(row, "nccl_fallback", None), str):  # why two nodes are slow
        flags.append(fallback_note({"infiniband": row.nccl_fallback}))
    if isinstance(getattr(row, "precision_note", None), str) and row.precision_note:
        flags.append(row.precision_note)  # a precision knob that changed nothing
    if pd.isna(row.final_accuracy) and row.unit != "tokens":  # (a token benchmark's none)
        flags.append("no training accuracy logged: the accuracy check is skipped")
    return "; ".join(flags)


def scaling(epochs: pd.DataFrame, runs: pd.DataFrame, skip_epochs: int,
            accuracy_tolerance: float, gpu_hour_price: float | None = None) -> pd.DataFrame:
    """One row per (series, nodes, gpus) over the counted runs."""
    epochs = _defaults(epochs)
    counted = runs[runs["counted"]]
    skips = epochs["skip_epochs"].fillna(skip_epochs)  # an external entry's own, or the study's
    used = epochs[epochs["run"].isin(counted["run"]) & (epochs["epoch"] > skips)
                  & timed(epochs)]  # as summarize_runs counted them
    rows = []
    for (series, nodes, gpus), point_runs in counted.groupby(POINT_KEYS, sort=False):
        seconds = used[used["run"].isin(point_runs["run"])]["seconds"].astype(float)
        n = len(seconds)
        mean = seconds.mean()
        std = seconds.std(ddof=1) if n > 1 else np.nan
        first = point_runs.iloc[0]
        # images an epoch over its time; a log's own throughput where it gives no images
        # an epoch (a Trainer's samples/s), or no epoch at all (a benchmark's total)
        per_epoch = pd.to_numeric(point_runs["images_per_epoch"], errors="coerce").mean()
        rows.append({
            "run": first["run"],
            "series": series, "model": first["model"], "strategy": first["strategy"],
            "precision": first["precision"], "nodes": nodes, "gpus": gpus,
            "global_batch": first["global_batch"], "repeats": len(point_runs),
            "epochs_used": n, "epoch_time_s": mean, "epoch_time_std": std,
            "epoch_time_ci95": t95(n - 1) * std / math.sqrt(n) if n > 1 else np.nan,
            "images_per_s": (per_epoch / mean if n and not pd.isna(per_epoch)
                             else pd.to_numeric(point_runs["images_per_s"]).mean()),
            "final_accuracy": point_runs["final_accuracy"].mean(),
            "test_accuracy": point_runs["test_accuracy"].astype(float).mean(),
            "scaling": first["scaling"],
            **telemetry_of(point_runs),
            "synthetic_images_per_s": pd.to_numeric(point_runs["synthetic_images_per_s"],
                                                    errors="coerce").mean(),
            "gpu_model": joined(point_runs["system_gpu_model"]),
            "time_to_target_s": point_runs["time_to_target_s"].mean()
            if point_runs["time_to_target_s"].notna().all() else np.nan,
            "target_reached": (f"{int(point_runs['time_to_target_s'].notna().sum())}/"
                               f"{len(point_runs)}"),
            "gpus_logged": sorted({int(g) for g in pd.to_numeric(
                point_runs["gpus_logged"], errors="coerce").dropna() if int(g) != gpus}),
            **{name: pd.to_numeric(point_runs[name], errors="coerce").mean()
               for name in ("job_s", "overhead_s")},
            **{name: joined(point_runs[name])
               for name in ("nccl_network", "nccl_fallback", "slurm_cluster",
                            "precision_note")},
            "unit": joined(point_runs["unit"]) or "images",
            **{name: pd.to_numeric(point_runs[name], errors="coerce").mean()
               for name in ("tokens_per_s", "tokens_per_s_per_gpu", "time_to_solution_s")},
            "memory_gib": pd.to_numeric(point_runs["memory_gib"], errors="coerce").max(),
            "parameters": pd.to_numeric(point_runs["parameters"], errors="coerce").max(),
            "step_time_s": pd.to_numeric(point_runs["step_time_s"], errors="coerce").mean(),
        })
    table = pd.DataFrame(rows, columns=["run", *MEASURED, "gpus_logged"])
    if table.empty:
        return pd.DataFrame(columns=SCALING_COLUMNS + EXTRA_COLUMNS)
    knobs = [n for n in knob_names(runs) if n in runs]
    table = with_knobs(table, runs).drop(columns="run")
    # each series' base: its 1-GPU point on one node, else (a series of several GPU
    # counts without one, as MLPerf results) its fewest GPUs, on the fewest nodes
    base = table.sort_values(["gpus", "nodes"]).drop_duplicates("series").set_index("series")
    counts = table.groupby("series")["gpus"].nunique()
    base = base[(base["gpus"] == 1) & (base["nodes"] == 1)
                | ~base.index.isin(table.loc[table["gpus"] == 1, "series"])
                & (base.index.map(counts) > 1)]
    table["base_gpus"] = table["series"].map(base["gpus"])
    ref = table["series"].map(base["epoch_time_s"])
    # from epoch times; for benchmarks (throughput, no epochs) from images/s
    table["speedup"] = (ref / table["epoch_time_s"]).fillna(
        table["images_per_s"] / table["series"].map(base["images_per_s"])).fillna(
        table["tokens_per_s"] / table["series"].map(base["tokens_per_s"]))
    table["efficiency"] = table["speedup"] / (table["gpus"] / table["base_gpus"])
    table["accuracy_delta"] = table["final_accuracy"] - table["series"].map(base["final_accuracy"])
    table["test_accuracy_delta"] = (table["test_accuracy"]
                                    - table["series"].map(base["test_accuracy"]))
    # beyond the tolerance, not at it: 0.90 - 0.85 is 0.05000000000000004 in binary
    table["accuracy_flag"] = table["accuracy_delta"].abs() > accuracy_tolerance + 1e-9
    table["serial_fraction"] = karp_flatt(table["speedup"], table["gpus"] / table["base_gpus"])
    table["gpu_hours_per_epoch"] = gpu_hours_per_epoch(table)
    table["gpu_hours_per_100_epochs"] = 100 * table["gpu_hours_per_epoch"]
    table["cost_per_epoch"] = (table["gpu_hours_per_epoch"] * gpu_hour_price
                               if gpu_hour_price is not None else np.nan)
    # per GPU-hour: a point's throughput over its GPUs, against its base point's
    per_gpu = table["images_per_s"].fillna(table["tokens_per_s"]) / table["gpus"]
    table["cost_efficiency"] = per_gpu / table["series"].map(
        base["images_per_s"].fillna(base["tokens_per_s"]) / base["gpus"])
    table["price_per_million_tokens"] = (table["gpus"] * gpu_hour_price / (
        table["tokens_per_s"] * 3600) * 1e6 if gpu_hour_price is not None else np.nan)
    table["input_ratio"] = table["images_per_s"] / table["synthetic_images_per_s"]
    table["input_bound"] = table["input_ratio"] < INPUT_BOUND_RATIO
    # what a point's job cost beyond its training (dlscale.jobs.phases), of the job's wall time
    table["overhead_fraction"] = table["overhead_s"] / table["job_s"]
    table["flags"] = [flags_of(row, accuracy_tolerance) for row in table.itertuples()]
    table = table[SCALING_COLUMNS[:1] + knobs + SCALING_COLUMNS[1:] + EXTRA_COLUMNS]
    return table.sort_values(["series", "nodes", "gpus"]).reset_index(drop=True)


def gpu_hours_per_epoch(table: pd.DataFrame) -> pd.Series:
    """GPUs (over all nodes) x epoch time / 3600, for any table with gpus and
    epoch_time_s (a compared study's too)."""
    return table["gpus"] * table["epoch_time_s"] / 3600


def failed_points(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that failed or do not count, with status and reason."""
    return runs.loc[~runs["counted"].astype(bool), FAILED_COLUMNS].reset_index(drop=True)


THIS_STUDY = "this study"


def parse_compare(items: list[str], as_json: str | None = None) -> list[tuple[str, Path]]:
    """LABEL=PATH pairs (the label may hold '=': the path is after the last one), then
    the [label, path] pairs of `as_json` (how the workflow passes them: see
    analysisplan.html_safe_json)."""
    pairs = []
    for item in items:
        label, sep, path = item.rpartition("=")
        if not sep or not label or not path:
            raise ValueError(f"--compare takes LABEL=PATH, got '{item}'")
        pairs.append((label, Path(path)))
    return pairs + [(str(label), Path(path)) for label, path in json.loads(as_json or "[]")]


def read_studies(scaling: Path, compare: list[tuple[str, Path]]):
    """[(label, table)] for this study and each compared one."""
    studies = [(THIS_STUDY, read_table(scaling, list(COMPARED_COLUMNS)))]
    for label, path in compare:
        studies.append((label, compared_study(read_table(path, list(COMPARED_COLUMNS)))))
    return studies


def compared_study(table: pd.DataFrame) -> pd.DataFrame:
    """Another study's table with every scaling column: an older dlscale's table (or one
    written by hand, or the history's) may lack the later ones, which stay empty; the
    plots leave those studies out where they need them."""
    missing = [c for c in SCALING_COLUMNS + EXTRA_COLUMNS if c not in table]
    return table.reindex(columns=[*table.columns, *missing])


def systems(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct system description among the runs, with the runs on it."""
    columns = [f"system_{name}" for name in SYSTEM_FIELDS]
    if runs.empty:
        return pd.DataFrame(columns=[*SYSTEM_FIELDS, "runs", "run_names"])
    described = runs[runs[columns].notna().any(axis=1)]
    rows = []
    for key, group in described.groupby(columns, dropna=False, sort=False):
        rows.append({**{name: value for name, value in zip(SYSTEM_FIELDS, key)},
                     "runs": len(group), "run_names": " ".join(map(str, group["run"]))})
    return pd.DataFrame(rows, columns=[*SYSTEM_FIELDS, "runs", "run_names"])
