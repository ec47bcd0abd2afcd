#!/usr/bin/env python3
"""A torch point against a bare DDP script (bench/bare_torch.py), side by side: the
steady epoch's ratio (issue 77 asks at most 1.05) and each one's fixed cost.

  python bench/bench_torch.py [--work /tmp/dlscale-bench-torch] [--rounds 4]
      [--replicas 1 2] [--images 2048] [--epochs 4]

The same generated images (32 px), SimpleCNN (Keras 3 on the torch backend), batch per
rank (64), ranks (processes on the CPUs, gloo) and epochs are trained by
  (a) bare: torchrun + bench/bare_torch.py, the images in numpy arrays, a timer per epoch;
  (b) dlscale: launch.py + train.py --backend torch as the train rule runs them (epoch
      records, telemetry every second, backup after every epoch, evaluation, record),
      its images read from the shards by dlscale's reader.
Both with .venv-torch's python (make setup-torch). Each run is its own process tree; the
rounds alternate which goes first. Per run: the wall time (spawn to exit), the training
loop's seconds (each reports its own), the steady epoch (mean of the epochs after the
first) and the fixed cost = wall - loop. Prints a Markdown table for docs/benchmarks.md
with each round's ratio, their geometric mean and its 95 % bootstrap interval.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
from bench_overhead import paired_ratio, prepared  # noqa: E402 (bench/ is the script's folder)

TORCH_BIN = ROOT / ".venv-torch" / "bin"
BATCH = 64


def arrays(data: Path, work: Path) -> Path:
    """The training images of the shards as one .npz (x uint8 NHWC, y), for the bare
    script."""
    import numpy as np

    from dlscale.data.shardreader import Reader

    path = work / "train.npz"
    if not path.exists():
        reader = Reader(data, "train", 256, training=False)
        xs, ys = zip(*reader, strict=True)
        np.savez(path, x=np.concatenate(xs), y=np.concatenate(ys))
    return path


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"error: {' '.join(command)} exited {proc.returncode}:\n"
                         + proc.stdout[-2000:] + proc.stderr[-3000:])
    return wall, proc


def bare(npz: Path, replicas: int, epochs: int) -> dict:
    wall, proc = timed([str(TORCH_BIN / "torchrun"), "--nproc-per-node", str(replicas),
                        str(ROOT / "bench" / "bare_torch.py"), "--arrays", str(npz),
                        "--batch-size", str(BATCH), "--epochs", str(epochs)])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall": wall, "fit": result["fit_s"],
            "steady": statistics.mean(result["epochs"][1:])}


def dlscale(data: Path, out: Path, replicas: int, epochs: int) -> dict:
    wall, _ = timed([sys.executable, str(SCRIPTS / "launch.py"), "--plan",
                     json.dumps({"tasks": replicas}), "--record", str(out), "--",
                     str(TORCH_BIN / "python"), str(SCRIPTS / "train.py"), "--data-dir",
                     str(data), "--out", str(out), "--model", "SimpleCNN", "--gpus",
                     str(replicas), "--device", "cpu", "--batch-per-gpu", str(BATCH),
                     "--epochs", str(epochs), "--image-size", "32", "--keras", "3",
                     "--backend", "torch"])
    run = json.loads((out / "run.json").read_text())
    epochs_ = [json.loads(x) for x in (out / "epochs.jsonl").read_text().splitlines()]
    return {"wall": wall, "fit": run["fit_seconds"],
            "steady": statistics.mean(e["seconds"] for e in epochs_[1:])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "dlscale-bench-torch")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    _, data = prepared(args.work, args.images)
    npz = arrays(data, args.work)
    print(f"machine: {platform.node()}, {os.cpu_count()} logical CPUs; SimpleCNN at 32 px, "
          f"{args.images} images, batch {BATCH} per rank, {args.epochs} epochs, "
          f"{args.rounds} rounds\n")
    print("| ranks | steady epoch bare [s] | dlscale [s] | ratio (95 % interval) | fixed cost "
          "bare [s] | dlscale [s] |\n|---|---|---|---|---|---|")
    for replicas in args.replicas:
        runs = {"bare": [], "dlscale": []}
        for n in range(args.rounds):
            order = ["bare", "dlscale"] if n % 2 == 0 else ["dlscale", "bare"]
            for which in order:
                runs[which].append(
                    bare(npz, replicas, args.epochs) if which == "bare" else
                    dlscale(data, args.work / f"run-{replicas}-{n}", replicas, args.epochs))
        low, ratio, high = paired_ratio([d["steady"] / b["steady"] for b, d in
                                         zip(runs["bare"], runs["dlscale"], strict=True)])
        mean = {k: {f: statistics.mean(r[f] for r in v) for f in ("steady", "wall", "fit")}
                for k, v in runs.items()}
        print(f"| {replicas} | {mean['bare']['steady']:.3f} | {mean['dlscale']['steady']:.3f} | "
              f"{ratio:.3f} ({low:.3f} to {high:.3f}) | "
              f"{mean['bare']['wall'] - mean['bare']['fit']:.1f} | "
              f"{mean['dlscale']['wall'] - mean['dlscale']['fit']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
