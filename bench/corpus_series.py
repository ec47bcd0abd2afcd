"""Real multi-GPU scaling series from public MLPerf Training results (issue 83, item 1).

`load()` reads bench/corpus/series.yaml, the index of the stored files (each byte for
byte from github.com/mlcommons/training_results_v*, see bench/corpus/README.md), and
gives one `Series` a series: the same hardware, software and model at different node or
GPU counts, one `result_0.txt` a point, its counts and network from the publisher's own
systems file (`systems/<system>.json`).

    from corpus_series import load          # with bench/ on sys.path
    for series in load():
        series.points        # a DataFrame in the shape of dlscale's scaling.csv
        series.network       # {"within_node": {"latency_us", "bus_bandwidth_gbs"}, ...}
        series.gradient_bytes, series.gpus_per_node

`Series` (frozen): id (a slug), description, source (repository @ commit: the logs),
model, gradient_bytes, gpus_per_node (the systems files' accelerators_per_node, the
largest), network (the levels the publisher states, through LINKS), points (one row a
count: series, model, strategy "mlperf", precision, nodes, gpus, global_batch,
images_per_s (samples/s), epoch_time_s, epoch_time_ci95, efficiency, scaling, and
samples_per_epoch, rule, reader, log, system), network_stated (the strings it came from).

Nothing here is a typed measurement: every count, batch and time is read from the stored
files; the only figures written below are the two tables (parameters of each model, and
link technologies with their nominal rates), each row with its public source.

Throughput, by benchmark (`rule` column of the points):

- ResNet-50 (`epochs`): dlscale's own MLLOG reader (dlscale.logparse) gives each
  epoch's seconds (epoch_start to epoch_stop); the first epoch is warm-up and left out,
  as dlscale's analysis.skip_epochs does; images per epoch are the log's
  `train_samples`; images/s = train_samples / mean epoch seconds. Where the log also
  has blocks (`block_start`/`block_stop`, evaluations timed inside them) and the reader's
  epochs differ from the blocks' by more than BLOCK_TOLERANCE, the blocks are taken
  (`blocks`): at hundreds of nodes NVIDIA's MXNet logs its epoch events without waiting
  for the GPUs (v2.0 `dgxa100_n527`: 0.03 s "epochs" inside 0.8 s blocks of 4), so an
  epoch is its block's time less the evaluations in it, over the block's epoch count
  (the first block left out).
- BERT-Large (`evaluations`): one block, one "epoch" (the whole run), so the reader's one
  epoch is the whole run with its warm-up. From v2.0 on, each `eval_accuracy` names the
  samples trained so far (`metadata.epoch_num`): the rate is the samples between the
  first and the last evaluation over the time between them (training with the
  evaluations it does inline), an "epoch" here being one interval between evaluations.
  v1.0/v1.1 logs name no samples at their evaluations (epoch_num 1 throughout): the rate
  would be `train_samples` over the block (`run-average`, warm-up included; no interval):
  the index leaves those logs out, the rule stays for a log that needs it.
- Mask R-CNN (`logged`): the log's `train_samples` is no epoch's size (40000 in NVIDIA's
  logs, against COCO's 117,266 training images), so the rate is the implementation's own:
  the median of the images/s it logs every 50 steps (`tracked_stats` "throughput", else
  the `throughput` key); epoch_time_s is the reader's mean epoch after the first, and
  samples_per_epoch their product (within a few % of COCO's count in every stored log).

epoch_time_ci95: Student's t half-width over the epochs (or intervals) of the one
result file, not over repeats (each point is one stored run); NaN with one interval.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).parent / "corpus"

# The models' parameters: (name, parameters, public source). The gradient all-reduced each
# step is parameters x GRADIENT_ELEMENT_BYTES.
MODELS = {
    # torchvision's ResNet50_Weights.IMAGENET1K_V1 meta "num_params": 25557032 (ResNet-50
    # v1.5, the MLPerf reference model; docs.pytorch.org/vision, models/resnet50)
    "resnet": ("ResNet-50", 25_557_032, "torchvision ResNet50_Weights num_params"),
    # Devlin et al. 2019, BERT (arXiv:1810.04805) section 3: "BERT_LARGE (L=24, H=1024,
    # A=16, Total Parameters=340M)"; MLPerf's BERT benchmark is BERT-Large
    "bert": ("BERT-Large", 340_000_000, "Devlin et al. 2019, arXiv:1810.04805, sec. 3"),
    # torchvision's MaskRCNN_ResNet50_FPN_Weights.COCO_V1 meta "num_params": 44401393
    # (github.com/pytorch/vision, torchvision/models/detection/mask_rcnn.py); MLPerf's is
    # the same architecture (NVIDIA's maskrcnn-benchmark: 81 classes, not 91, and a frozen
    # stem, so its all-reduced gradient is a little smaller)
    "maskrcnn": ("Mask R-CNN", 44_401_393, "torchvision MaskRCNN_ResNet50_FPN_Weights"),
}
# NVIDIA's MLPerf implementations (which every GPU series here runs: NVIDIA's own
# submissions, and Dell's, Azure's, Fujitsu's and Clemson's from NGC containers) train
# in mixed precision and all-reduce fp16 gradients: 2 bytes an element. An assumption
# of this table: the logs do not say it.
GRADIENT_ELEMENT_BYTES = 2
PRECISION = "mixed_float16"

# Link technologies: (level, pattern on the publisher's string, GB/s one way, latency in
# microseconds, source). within_node: a GPU's own bandwidth to the others, one direction
# (a ring's bus bandwidth cannot pass it); between_nodes: one card's, one direction, the
# node's cards added up (each ring of a multi-rail node crosses on its own card).
# Latencies: NCCL's own model of a ring hop (github.com/NVIDIA/nccl src/graph/tuning.cc,
# hwLat, Ring/Simple: NVLINK 3.4, PCI 5.7, NET 14.0 us in recent releases).
LINKS = [
    # NVIDIA A100 datasheet: NVLink 600 GB/s (12 third-generation links of 25 GB/s each
    # way; 600 is both ways): 300 GB/s each way
    ("within_node", r"NVLink\s*3\.0|NVLINK\s*3\.0|12\s*x\s*NVLink\s*25\s*GB/s", 300.0, 3.4,
     "A100 datasheet: NVLink 600 GB/s both ways"),
    # NVIDIA H100 SXM datasheet: NVLink 900 GB/s (18 fourth-generation links, both ways)
    ("within_node", r"NVLink\s*Gen4|NVLINK\s*Gen4", 450.0, 3.4,
     "H100 datasheet: NVLink 900 GB/s both ways"),
    # NVIDIA Blackwell (B200, GB200) datasheets: fifth-generation NVLink 1.8 TB/s a GPU
    # (both ways)
    ("within_node", r"NVLink\s*Gen5|NVLINK\s*Gen5", 900.0, 3.4,
     "B200/GB200 datasheet: NVLink 1.8 TB/s both ways"),
    # PCI-SIG: PCIe 5.0 32 GT/s a lane, 4.0 16 GT/s, 3.0 8 GT/s, 128b/130b; x16 one way
    ("within_node", r"PCIe\s*5\.0|PCIe\s*Gen\s*5", 63.0, 5.7, "PCIe 5.0 x16: 63 GB/s one way"),
    ("within_node", r"PCIe\s*4\.0|PCIe\s*Gen\s*4", 31.5, 5.7, "PCIe 4.0 x16: 31.5 GB/s one way"),
    ("within_node", r"PCIe\s*3\.0|PCIe\s*Gen\s*3", 15.75, 5.7, "PCIe 3.0 x16: 15.75 GB/s one way"),
    # InfiniBand rates (IBTA; NVIDIA ConnectX-5/6/7 product briefs): EDR 100 Gb/s, HDR100
    # 100 Gb/s, HDR 200 Gb/s, NDR 400 Gb/s a port
    ("between_nodes", r"HDR\s*100", 12.5, 14.0, "InfiniBand HDR100: 100 Gb/s"),
    ("between_nodes", r"IB\s*HDR|InfiniBand\s*HDR", 25.0, 14.0, "InfiniBand HDR: 200 Gb/s"),
    ("between_nodes", r"IB\s*EDR|InfiniBand\s*EDR", 12.5, 14.0, "InfiniBand EDR: 100 Gb/s"),
    ("between_nodes", r"IB\s*NDR|InfiniBand\s*NDR", 50.0, 14.0, "InfiniBand NDR: 400 Gb/s"),
    # Cornelis Networks Omni-Path 100 Series HFI: 100 Gb/s a port
    ("between_nodes", r"Omni-Path", 12.5, 14.0, "Omni-Path 100 Series: 100 Gb/s"),
    # NVIDIA BlueField-3 DPU: 400 Gb/s a port (the L40S nodes' east-west cards)
    ("between_nodes", r"BF3\s*400\s*Gbps", 50.0, 14.0, "BlueField-3: 400 Gb/s"),
]
# Which parts of host_networking carry the training's traffic: those labelled so, else
# those not labelled storage or management, and of those the RDMA fabrics where any are
# named (Azure's v2.0 "1x Ethernet 40Gb/Sec" is the management port its v1.1 file labels)
COMPUTE = re.compile(r"Compute|for EW", re.I)
NOT_COMPUTE = re.compile(r"Storage|Management|for NS", re.I)
FABRIC = re.compile(r"\bIB\b|InfiniBand|Omni-Path|HDR|EDR|NDR|BF3", re.I)
UNSTATED = {"", "n/a", "na", "none", "todo"}

BLOCK_TOLERANCE = 0.05
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042]  # Student's t, 97.5 %, 1..30 dof


@dataclass(frozen=True)
class Series:
    id: str
    description: str
    source: str
    model: str
    gradient_bytes: int
    gpus_per_node: int
    network: dict
    points: pd.DataFrame
    network_stated: dict = field(default_factory=dict)  # the publisher's strings, by level


def load(root: Path = ROOT, ids: list[str] | None = None) -> list[Series]:
    """Every series of the index (or those of `ids`), in its order."""
    index = yaml.safe_load((Path(root) / "series.yaml").read_text())
    return [_series(Path(root), entry, index["repositories"]) for entry in index["series"]
            if ids is None or entry["id"] in ids]


def _series(root: Path, entry: dict, repositories: dict) -> Series:
    benchmark = entry["benchmark"]
    model, parameters, _ = MODELS[benchmark]
    rows, systems = [], []
    for point in entry["points"]:
        system = json.loads((root / point["system"]).read_text())
        systems.append(system)
        nodes = int(system["number_of_nodes"])
        per_node = int(system["accelerators_per_node"])
        measured = measure(root / point["log"], benchmark)
        rows.append({"series": entry["id"], "model": model, "strategy": "mlperf",
                     "precision": PRECISION, "nodes": nodes, "gpus": nodes * per_node,
                     **measured, "log": point["log"], "system": point["system"]})
    points = pd.DataFrame(rows).sort_values(["gpus", "nodes"]).reset_index(drop=True)
    base = points.iloc[0]
    points["efficiency"] = (points["images_per_s"] / points["gpus"]) / (
        base["images_per_s"] / base["gpus"])
    points["scaling"] = scaling(points)
    largest = systems[max(range(len(systems)), key=lambda i: int(systems[i]["number_of_nodes"])
                          * int(systems[i]["accelerators_per_node"]))]
    links = network(largest)
    folder = entry["points"][0]["log"].split("/")[0]
    repo = repositories[folder]
    source = (f"{repo['repository']} @ {repo['commit']} ({repo['licence']}): "
              + ", ".join(p["log"].split("/", 1)[1] for p in entry["points"]))
    return Series(id=entry["id"], description=entry["what"], source=source, model=model,
                  gradient_bytes=parameters * GRADIENT_ELEMENT_BYTES,
                  gpus_per_node=max(int(s["accelerators_per_node"]) for s in systems),
                  network={level: {k: v for k, v in link.items() if k != "stated"}
                           for level, link in links.items()},
                  points=points, network_stated={level: link["stated"]
                                                 for level, link in links.items()})


def scaling(points: pd.DataFrame) -> str | None:
    """weak: the same batch per GPU at every point; strong: the same global batch."""
    per_gpu = points["global_batch"] / points["gpus"]
    if per_gpu.nunique() == 1:
        return "weak"
    if points["global_batch"].nunique() == 1:
        return "strong"
    return None


def network(system: dict) -> dict:
    """The levels the publisher's systems file states, through LINKS; a level it does not
    state is absent."""
    found = {}
    within = system.get("accelerator_interconnect", "") or ""
    if within.strip().lower() in UNSTATED:  # GPUs with no link of their own: the host bus
        within = system.get("accelerator_host_interconnect", "") or ""
    for level, pattern, gbs, latency, _ in LINKS:
        if level == "within_node" and re.search(pattern, within, re.I):
            found["within_node"] = {"latency_us": latency, "bus_bandwidth_gbs": gbs,
                                    "stated": within}
            break
    cards = compute_cards(system.get("host_networking", "") or "")
    total, latency = 0.0, None
    for part in cards:
        for level, pattern, gbs, lat, _ in LINKS:
            if level == "between_nodes" and re.search(pattern, part, re.I):
                count = re.match(r"\s*(\d+)\s*x", part)
                total += (int(count[1]) if count else 1) * gbs
                latency = lat
                break
    if total:
        found["between_nodes"] = {"latency_us": latency, "bus_bandwidth_gbs": total,
                                  "stated": system.get("host_networking")}
    return found


def compute_cards(text: str) -> list[str]:
    """The parts of host_networking that carry the training's traffic (see COMPUTE)."""
    parts = [p.strip() for p in re.split(r",|\band\b", text) if p.strip()]
    labelled = [re.sub(r"^.*?(Compute:)", "", p) for p in parts if COMPUTE.search(p)]
    if labelled:
        return labelled
    parts = [p for p in parts if not NOT_COMPUTE.search(p)]
    fabrics = [p for p in parts if FABRIC.search(p)]
    return fabrics or parts


@lru_cache(maxsize=2)  # a log is read once for its several questions
def events(path: Path) -> tuple:
    """The MLLOG events of a log, as (key, time_ms, value, metadata), in order."""
    found = []
    with open(path, errors="replace") as handle:
        for line in handle:
            at = line.find(":::MLLOG")
            if at < 0:
                continue
            try:
                event = json.loads(line[at + len(":::MLLOG"):])
            except ValueError:
                continue
            if isinstance(event, dict):
                found.append((event.get("key"), event.get("time_ms"), event.get("value"),
                              event.get("metadata") or {}))
    return tuple(found)


def first(path: Path, key: str):
    return next((value for k, _, value, _ in events(path) if k == key), None)


def measure(path: Path, benchmark: str) -> dict:
    """global_batch, images_per_s, epoch_time_s, epoch_time_ci95, samples_per_epoch, the
    rule that gave them and what dlscale's reader did (`reader`: "read" where its epochs
    were used, "" where not needed, else why it failed), from one stored log."""
    from dlscale.logparse.reader import read_file

    batch, samples = first(path, "global_batch_size"), first(path, "train_samples")
    if benchmark == "bert":
        seconds, per_epoch = evaluation_intervals(path)
        if seconds:
            return result(batch, per_epoch, seconds, "evaluations", "")
    try:
        run, reader = read_file(str(path))[0], "read"
    except Exception as exc:  # noqa: BLE001 (the reader's failure is noted on the point)
        run, reader = None, f"failed: {type(exc).__name__}: {exc}"
    if run is not None:
        batch = run.settings.get("global_batch") or batch
        samples = run.facts.get("train_samples") or samples
    epochs = [row["seconds"] for row in run.rows()] if run else block_epochs(path, False)
    if benchmark == "bert":  # no samples at the evaluations: the whole run (one epoch)
        return result(batch, samples, epochs, "run-average", reader)
    if benchmark == "maskrcnn":
        rate = statistics.median(logged_throughput(path))
        return result(batch, rate * statistics.mean(epochs[1:]), epochs[1:], "logged", reader)
    seconds, rule = epochs[1:], "epochs"
    blocks = block_epochs(path)
    if blocks and (not seconds or abs(statistics.mean(seconds) / statistics.mean(blocks) - 1)
                   > BLOCK_TOLERANCE):
        seconds, rule = blocks, "blocks"
    return result(batch, samples, seconds, rule, reader)


def result(batch, per_epoch, seconds: list[float], rule: str, reader: str) -> dict:
    mean = statistics.mean(seconds)
    return {"global_batch": int(batch), "images_per_s": per_epoch / mean,
            "epoch_time_s": mean, "epoch_time_ci95": ci95(seconds),
            "samples_per_epoch": per_epoch, "rule": rule, "reader": reader}


def ci95(values: list[float]) -> float:
    if len(values) < 2:
        return math.nan
    t = T95[len(values) - 2] if len(values) - 1 <= len(T95) else 1.96
    return t * statistics.stdev(values) / math.sqrt(len(values))


def block_epochs(path: Path, skip_first: bool = True) -> list[float]:
    """Each block's epoch seconds (its time less the evaluations timed inside it, over its
    epoch count), the first block left out unless `skip_first` is false; every rank's copy
    counted once: a start at its earliest time, a stop at its latest. (Also what stands
    for the reader's epochs where the reader fails on a log: a BERT log's one block.)"""
    starts, stops, counts, evals = {}, {}, {}, {}
    for key, at, _, meta in events(path):
        if not isinstance(at, (int, float)):
            continue
        if key == "block_start":
            n = meta.get("first_epoch_num")
            starts[n] = min(starts.get(n, at), at)
            counts[n] = meta.get("epoch_count") or 1
        elif key == "block_stop":
            n = meta.get("first_epoch_num")
            stops[n] = max(stops.get(n, at), at)
        elif key in ("eval_start", "eval_stop"):
            n = meta.get("epoch_num")
            kept = evals.setdefault(n, [None, None])
            if key == "eval_start":
                kept[0] = at if kept[0] is None else min(kept[0], at)
            else:
                kept[1] = at if kept[1] is None else max(kept[1], at)
    timed = [(a, b) for a, b in evals.values() if a is not None and b is not None]
    found = []
    for n in sorted(starts, key=lambda n: starts[n]):
        if n in stops and stops[n] > starts[n]:
            inside = sum(b - a for a, b in timed if starts[n] <= a and b <= stops[n])
            found.append((stops[n] - starts[n] - inside) / 1000 / counts[n])
    return found[1:] if skip_first else found


def logged_throughput(path: Path) -> list[float]:
    """The images/s the implementation logs (each window once: `tracked_stats`'s
    "throughput" where the log has it, else the `throughput` key)."""
    tracked = [value["throughput"] for key, _, value, _ in events(path)
               if key == "tracked_stats" and isinstance(value, dict)
               and isinstance(value.get("throughput"), (int, float))]
    return tracked or [value for key, _, value, _ in events(path)
                       if key == "throughput" and isinstance(value, (int, float))]


def evaluation_intervals(path: Path) -> tuple[list[float], float | None]:
    """The seconds between consecutive evaluations and the mean samples trained between
    them, where each eval_accuracy names its samples (metadata.epoch_num, rising); each
    evaluation once (its first copy)."""
    seen = {}
    for key, at, _, meta in events(path):
        number = meta.get("epoch_num")
        if key == "eval_accuracy" and isinstance(number, (int, float)) and \
                isinstance(at, (int, float)):
            seen.setdefault(number, at)
    marks = sorted(seen.items())
    if len(marks) < 3:
        return [], None
    seconds = [(b[1] - a[1]) / 1000 for a, b in zip(marks, marks[1:], strict=False)]
    samples = [b[0] - a[0] for a, b in zip(marks, marks[1:], strict=False)]
    if min(samples) <= 0 or min(seconds) <= 0:
        return [], None
    # the rate over all intervals: mean samples over mean seconds
    return seconds, statistics.mean(samples)


if __name__ == "__main__":
    for s in load():
        counts = ", ".join(f"{g}" for g in s.points["gpus"])
        print(f"{s.id}: {s.model}, GPUs {counts}, levels {sorted(s.network)}, "
              f"rules {sorted(set(s.points['rule']))}")
        print(s.points[["nodes", "gpus", "global_batch", "images_per_s", "epoch_time_s",
                        "efficiency", "scaling"]].to_string(index=False))
