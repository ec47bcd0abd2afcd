"""Real multi-GPU scaling series from NVIDIA's DeepLearningExamples READMEs (issue 100,
item 5): bench/corpus/deeplearningexamples/series.yaml indexes tables of the model READMEs
stored there byte for byte (its README.md: commit, blobs). Each series is one table's
rows: one model, precision, batch per GPU and DGX system at several GPU counts, its
throughput as the README prints it (no figure is typed here or in the index).

    from corpus_dle import load             # with bench/ on sys.path
    for series in load():                    # corpus_series.Series, as MLPerf's
        series.points, series.network, series.gradient_bytes

Only series within one node are taken: the READMEs state no network between nodes (the
multi-node tables are left out with the reason), and a series with no batch per GPU (its
README gives none) cannot give a step time. The link within a node is the DGX's as
NVIDIA's datasheets state it (WITHIN_NODE, each row with its source). Gradients: 2 bytes a
parameter under mixed precision (as corpus_series for MLPerf), 4 in FP32.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import yaml
from corpus_series import Series, scaling

ROOT = Path(__file__).parent / "corpus" / "deeplearningexamples"
# the link within a DGX by its system's words: (pattern, bus bandwidth GB/s one way,
# latency us, source). A100: NVLink 3.0, 600 GB/s both ways (A100 datasheet); V100 (DGX-1,
# DGX-2): NVLink 2.0, 300 GB/s both ways (V100 datasheet); the latency as corpus_series'
# NVLink rows
WITHIN_NODE = (
    (r"DGX A100", 300.0, 3.4, "A100 datasheet: NVLink 600 GB/s both ways"),
    (r"DGX-1|DGX-2", 150.0, 3.4, "V100 datasheet: NVLink 300 GB/s both ways"),
)
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def table(text: str, first: int, last: int) -> list[dict[str, str]]:
    """The rows of lines first..last (1-based; the header, its |---| line, the rows)."""
    lines = text.splitlines()[first - 1:last]
    header = cells(lines[0])
    return [dict(zip(header, cells(line), strict=False)) for line in lines[2:]
            if line.strip().startswith("|")]


def number(cell: str) -> float:
    return float(NUMBER.search(cell)[0].replace(",", ""))


def skipped(entry: dict) -> str | None:
    """Why an index entry is not a series here, or None."""
    if entry.get("gpus_counts") == "nodes" or "nodes" in entry["system"]:
        return "over nodes: its README states no network between them"
    if not entry.get("batch_column") and not entry.get("batch_per_gpu"):
        return "no batch per GPU in its README: no step time"
    return None


def series_of(entry: dict) -> Series:
    text = (ROOT / entry["file"]).read_text(encoding="utf-8")
    rows = [r for r in table(text, entry["first_line"], entry["last_line"])
            if all(r.get(k) == v for k, v in (entry.get("row_filter") or {}).items())]
    fp32 = "fp32" in entry["id"] or entry["precision"].lower() in ("fp32", "tf32")

    def point(row: dict) -> dict:
        gpus = int(number(row[entry["gpus_column"]]))
        per_gpu = (number(row[entry["batch_column"]]) if entry.get("batch_column")
                   else float(entry["batch_per_gpu"]))
        return {"series": entry["id"], "model": entry["model"], "strategy": "dle",
                "precision": "float32" if fp32 else "mixed_float16", "nodes": 1,
                "gpus": gpus, "global_batch": per_gpu * gpus,
                "images_per_s": number(row[entry["throughput_column"]]),
                "epoch_time_s": float("nan"), "epoch_time_ci95": float("nan")}

    points = pd.DataFrame([point(r) for r in rows])
    points = points.sort_values("gpus").reset_index(drop=True)
    base = points.iloc[0]
    points["efficiency"] = (points["images_per_s"] / points["gpus"]) / (
        base["images_per_s"] / base["gpus"])
    points["scaling"] = scaling(points)
    pattern, bandwidth, latency, said = next(w for w in WITHIN_NODE
                                             if re.search(w[0], entry["system"]))
    return Series(id=entry["id"], description=f"{entry['model']}, {entry['system']}",
                  source=f"NVIDIA/DeepLearningExamples @ {entry['commit']}: "
                         f"{entry['source_path']}", model=entry["model"],
                  gradient_bytes=int(entry["parameters"]) * (4 if fp32 else 2),
                  gpus_per_node=int(entry["gpus_per_node"]),
                  network={"within_node": {"latency_us": latency,
                                           "bus_bandwidth_gbs": bandwidth}},
                  points=points, network_stated={"within_node": f"{pattern}: {said}"})


def load(root: Path = ROOT, ids: list[str] | None = None) -> list[Series]:
    """The index's series within one node that give a batch per GPU."""
    entries = yaml.safe_load((Path(root) / "series.yaml").read_text())
    return [series_of(e) for e in entries
            if (ids is None or e["id"] in ids) and skipped(e) is None]


def left_out(root: Path = ROOT) -> dict[str, str]:
    """The index's entries not taken, with the reason."""
    entries = yaml.safe_load((Path(root) / "series.yaml").read_text())
    return {e["id"]: why for e in entries if (why := skipped(e))}
