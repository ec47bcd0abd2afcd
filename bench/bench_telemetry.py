#!/usr/bin/env python3
"""Telemetry cost: the same training point with the sampler on (1 s) and off (issue 14:
the difference in epoch time under 1 %).

  python bench/bench_telemetry.py [--pairs 3] [--epochs 6] [--images 4000]
                                  [--work /tmp/dlscale-bench-telemetry]

Generates a CIFAR-10-layout archive (scripts/make_synthetic_cifar.py), prepares it at
32 px, then runs scripts/train.py (SimpleCNN, 1 replica on the CPU, batch 32) `--pairs`
times with --telemetry-interval 1 and 0, each in its own process, the order swapped
from pair to pair, so that drifts of the machine (the second run of a pair was faster
in a first try) hit both alike. Epoch time: the mean of each run's epochs after the first
(epochs.jsonl). Prints each run and the relative difference of the means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
from dlscale.core.contract import MANIFEST  # noqa: E402


def epoch_time(work: Path, data: Path, interval: float, epochs: int, tag: str) -> float:
    out = work / tag
    subprocess.run([sys.executable, str(SCRIPTS / "train.py"), "--data-dir", str(data),
                    "--out", str(out), "--model", "SimpleCNN", "--device", "cpu",
                    "--gpus", "1", "--batch-per-gpu", "32", "--epochs", str(epochs),
                    "--telemetry-interval", str(interval)],
                   check=True, capture_output=True, text=True)
    records = [json.loads(x) for x in (out / "epochs.jsonl").read_text().splitlines()]
    return statistics.mean(r["seconds"] for r in records[1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-telemetry"))
    args = parser.parse_args()

    import make_synthetic_cifar

    from dlscale.data import preparation

    args.work.mkdir(parents=True, exist_ok=True)
    data = args.work / "data"
    if not (data / MANIFEST).exists():
        archive = make_synthetic_cifar.write_archive(args.work / "cifar.tar.gz", "python",
                                                     args.images, 500, 1)
        preparation.prepare("cifar10", archive, data, 32, 4)
    on, off = [], []
    for pair in range(args.pairs):  # on first in even pairs, off first in odd ones
        for interval in ((1.0, 0.0) if pair % 2 == 0 else (0.0, 1.0)):
            (on if interval else off).append(epoch_time(
                args.work, data, interval, args.epochs, f"{'on' if interval else 'off'}{pair}"))
        print(f"pair {pair + 1}: telemetry on {on[-1]:.3f} s/epoch, off {off[-1]:.3f} s/epoch",
              flush=True)
    mean_on, mean_off = statistics.mean(on), statistics.mean(off)
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"mean epoch time: on {mean_on:.3f} s, off {mean_off:.3f} s, "
          f"difference {100 * (mean_on - mean_off) / mean_off:+.2f} % "
          f"(spread of the off runs: {min(off):.3f} to {max(off):.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
