"""Reference values with tolerances and a verdict per point, in the way of ReFrame.

A reference names a point (model, GPU count, and strategy, precision, nodes or knobs
where given) and an expected value of one metric (images_per_s, epoch_time_s, or a token
run's tokens_per_s or tokens_per_s_per_gpu) with lower
and upper relative tolerances: the point passes when
  reference x (1 + lower) <= measured <= reference x (1 + upper),
a missing bound being no bound (ReFrame's `(value, lower, upper)` thresholds). A point
without a reference has verdict `none`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

METRICS = ("images_per_s", "epoch_time_s", "tokens_per_s", "tokens_per_s_per_gpu")
MATCH_KEYS = ("model", "strategy", "precision", "nodes", "gpus")
REFERENCE_COLUMNS = ["series", "model", "strategy", "precision", "nodes", "gpus",
                     "reference_metric", "measured", "reference", "reference_low",
                     "reference_high", "verdict"]


class ReferenceError(ValueError):
    """A reference entry or file that cannot be used; the message names it."""


def load(spec, basedir: Path, schema: dict, models: set[str] | None = None) -> list[dict]:
    """The reference entries of the config's `references` (a list, or a YAML file that
    holds one), checked against the schema's entry definition and, given the `models` the
    study runs, that each names one of them or a model dlscale knows."""
    import jsonschema
    import yaml

    where = "references"
    if isinstance(spec, str):
        # relative to the working folder, else to the workflow's (the shipped files)
        path = next((c for c in (Path(spec), basedir / spec) if c.is_file()), None)
        if path is None:
            raise ReferenceError(f"references: file '{spec}' does not exist (looked in the "
                                 f"working folder and in {basedir})")
        try:
            spec = yaml.safe_load(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ReferenceError(f"references file '{path}' is not text (UTF-8): byte "
                                 f"{exc.start} cannot be read") from None
        except yaml.YAMLError as exc:
            raise ReferenceError(f"references file '{path}': not YAML ({exc})"
                                 .replace("\n", " ")) from None
        where = f"references file '{path}'"
        if isinstance(spec, dict):
            spec = spec.get("references")
    if not isinstance(spec, list):
        raise ReferenceError(f"{where}: expected a list of references")
    entry = {**schema["$defs"]["reference"], "$defs": schema["$defs"]}
    for index, item in enumerate(spec):
        given = [m for m in METRICS if isinstance(item, dict) and m in item]
        if isinstance(item, dict) and len(given) != 1:
            raise ReferenceError(f"{where}[{index}]: give exactly one of {' or '.join(METRICS)}"
                                 f", got {', '.join(given) or 'neither'}")
        try:
            jsonschema.validate(item, entry)
        except jsonschema.ValidationError as exc:
            raise ReferenceError(f"{where}[{index}]: {exc.message}") from None
        known = models is None or item["model"] in models | set(schema["$defs"]["model"]["enum"])
        if not known:  # a typo matches nothing and would pass; a shared file may list more
            raise ReferenceError(f"{where}[{index}]: model '{item['model']}' is neither a "
                                 f"model dlscale knows nor one this study runs "
                                 f"({', '.join(sorted(models)) or 'none'})")
    return [{"lower": -0.1, "upper": 0.1, **item} for item in spec]


def matches(entry: dict, row) -> bool:
    """Whether a reference names the point: its keys, and each knob it gives (a column
    of scaling.csv: sweep.knobs)."""
    return all(key not in entry or str(entry[key]) == str(row[key]) for key in MATCH_KEYS
               ) and all(str(value).lower() == str(row.get(name)).lower()
                         for name, value in entry.get("knobs", {}).items())


def judge(scaling: pd.DataFrame, references: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """scaling.csv with reference, reference_metric and verdict columns, and the table of
    the points that have a reference (for the report and the verdicts target)."""
    scaling = scaling.copy()
    rows, metric, value, verdict = [], [], [], []
    for _, row in scaling.iterrows():
        found = next((e for e in references if matches(e, row)), None)
        if found is None:
            metric.append("")
            value.append(math.nan)
            verdict.append("none")
            continue
        name = next(m for m in METRICS if m in found)
        ref, measured = float(found[name]), float(row[name])
        low = ref * (1 + found["lower"]) if found["lower"] is not None else -math.inf
        high = ref * (1 + found["upper"]) if found["upper"] is not None else math.inf
        result = "pass" if low <= measured <= high else "fail"
        metric.append(name)
        value.append(ref)
        verdict.append(result)
        rows.append({**{k: row[k] for k in ("series", "model", "strategy", "precision",
                                            "nodes", "gpus")},
                     "reference_metric": name, "measured": measured, "reference": ref,
                     "reference_low": low, "reference_high": high, "verdict": result})
    scaling["reference_metric"], scaling["reference"], scaling["verdict"] = metric, value, verdict
    return scaling, pd.DataFrame(rows, columns=REFERENCE_COLUMNS)
