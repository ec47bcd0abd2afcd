"""What makes a run's series beside its label: the knobs it was made with (a column each,
after the series) and the cluster its log names (one label over two clusters' logs is a
series per cluster); a point's throughput per GPU in its unit."""

from __future__ import annotations

import re

import pandas as pd

SEVERAL_CLUSTERS = ("the series '{series}' holds runs of the clusters {clusters} (the logs' "
                    "SLURM_CLUSTER_NAME): a series per cluster, '{series} (CLUSTER)', as "
                    "two machines' points make no one speedup")


def by_cluster(epochs: pd.DataFrame) -> pd.DataFrame:
    """A series whose runs' logs name two or more clusters split into a series per
    cluster (its name and the cluster's), each run's notes saying so; runs that name no
    cluster stay in the series."""
    if "slurm_cluster" not in epochs or epochs["slurm_cluster"].isna().all():
        return epochs
    cluster = epochs["slurm_cluster"].where(
        epochs["slurm_cluster"].astype(str).str.strip() != "")
    names = cluster.groupby(epochs["series"]).agg(lambda c: sorted(set(c.dropna().astype(str))))
    for series, clusters in names.items():
        if len(clusters) < 2:
            continue
        rows = (epochs["series"] == series) & cluster.notna()
        note = SEVERAL_CLUSTERS.format(series=series, clusters=", ".join(clusters))
        epochs["notes"] = epochs["notes"].astype(object)
        notes = epochs.loc[rows, "notes"]
        epochs.loc[rows, "notes"] = [f"{n}; {note}" if isinstance(n, str) and n else note
                                     for n in notes]
        epochs.loc[rows, "series"] = [f"{series} ({c})" for c in cluster[rows]]
    return epochs


def knob_names(frame: pd.DataFrame) -> list[str]:
    """The sweep.knobs a table's runs were made with (its `knobs` column names them)."""
    if "knobs" not in frame:
        return []
    return list(dict.fromkeys(name for names in frame["knobs"].dropna().astype(str)
                              for name in names.split(",") if name))


def with_knobs(table: pd.DataFrame, source: pd.DataFrame, key: str = "run") -> pd.DataFrame:
    """`table` with a column per knob of `source`'s runs (each run's value), after the
    series: a knob is part of a point, as the GPUs are."""
    names = [n for n in knob_names(source) if n in source and n not in table]
    if not names or table.empty:
        return table
    values = source.drop_duplicates(key).set_index(key)
    at = list(table.columns).index("series") + 1 if "series" in table else 0
    for offset, name in enumerate(names):
        table.insert(at + offset, name, table[key].map(values[name]))
    return table


def without_knob(series: str, name: str) -> str:
    """A series' name without its word of knob `name` (`llm attention=sdpa` -> `llm`)."""
    return re.sub(rf"\s*\b{re.escape(name)}=[\w.+-]+", "", str(series))


def rate_per_gpu(frame: pd.DataFrame) -> tuple[pd.Series, str]:
    """(each point's throughput per GPU, its unit): tokens/s per GPU where every point
    counts tokens, else images/s over the GPUs."""
    if len(frame) and "unit" in frame and (frame["unit"] == "tokens").all():
        return pd.to_numeric(frame["tokens_per_s_per_gpu"], errors="coerce"), "tokens"
    return (pd.to_numeric(frame["images_per_s"], errors="coerce")
            / pd.to_numeric(frame["gpus"], errors="coerce")), "images"
