#!/usr/bin/env python3
"""What a training process spends beyond its training, as dlscale starts and ends it now
against before 2026-11-26 (JAX imported by TensorFlow's import, Python's teardown at exit).

  python bench/bench_process_start.py [--repeats 5] [--epochs 1]

One point, as the tests train it: SimpleCNN on 2 logical CPU devices, 400 generated
CIFAR-10 images at 32 px, batch 8 per replica. Each repeat runs the two variants in turn
(alternating which goes first) in their own processes:
- now: `python scripts/train.py ...` (JAX kept out, no teardown at exit);
- before: the same train.main through `sys.exit(main())`, with JAX let in.
CPU time (user + sys of the process and its children) and wall time, median of the
repeats. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))

BEFORE = f"""
import sys
sys.path.insert(0, {str(SCRIPTS)!r})
sys.argv[0] = {str(SCRIPTS / "train.py")!r}
from dlscale.train import keraschoice
keraschoice.keep_jax_out = lambda: None
import train
sys.exit(train.main(sys.argv[1:]))
"""


def timed(command: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one command, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{command[:3]} failed:\n{proc.stderr[-2000:]}")
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    import make_synthetic_cifar

    from dlscale.data import preparation

    root = Path(tempfile.mkdtemp(prefix="bench-start-"))
    archive = make_synthetic_cifar.write_archive(root / "cifar.tar.gz", "python", 400, 100, 3)
    preparation.prepare("cifar10", archive, root / "data", 32, 4)
    flags = ["--data-dir", str(root / "data"), "--model", "SimpleCNN", "--device", "cpu",
             "--batch-per-gpu", "8", "--gpus", "2", "--epochs", str(args.epochs)]
    variants = {"now": [sys.executable, str(SCRIPTS / "train.py")],
                "before": [sys.executable, "-c", BEFORE]}
    seen: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for repeat in range(args.repeats):
        order = list(variants) if repeat % 2 == 0 else list(variants)[::-1]
        for name in order:
            out = root / f"{name}-{repeat}"
            seen[name].append(timed([*variants[name], *flags, "--out", str(out)]))
    print(f"{platform.processor() or platform.machine()}, {args.repeats} repeats, "
          f"{args.epochs} epoch(s)\n")
    print("| variant | CPU [s] (median) | wall [s] (median) | CPU of each repeat |")
    print("|---|---|---|---|")
    for name, rows in seen.items():
        cpu = statistics.median(r[0] for r in rows)
        wall = statistics.median(r[1] for r in rows)
        print(f"| {name} | {cpu:.2f} | {wall:.2f} | "
              f"{', '.join(f'{r[0]:.2f}' for r in rows)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
