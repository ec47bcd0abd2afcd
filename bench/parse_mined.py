#!/usr/bin/env python3
"""A script's own epoch lines read without a pattern (formats.mined): a 200 MB log in
under 30 s of CPU.

  python bench/parse_mined.py [--mb 200] [--work DIR] [--steps 40]

Writes a training script's output as Python `logging` leaves it: per epoch `--steps`
step lines (`2026-12-02 01:02:03,456 INFO rank 0 step 120/500 loss 0.1234 lr 0.001`), the
epoch's own line in its words (`2026-12-02 01:02:05,120 INFO Epoch 3 took: 61.23s
loss=0.5123 acc=91.2%`) and a validation line; no format reads them, so every line is
mined. Then times reader.parse_file_runs on the file in this process (CPU seconds, wall
seconds, lines per second, peak resident memory) and checks the epochs found.
"""

from __future__ import annotations

import argparse
import platform
import resource
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from dlscale.logparse.reader import parse_file_runs  # noqa: E402


def write_log(path: Path, megabytes: float, steps: int) -> tuple[int, int]:
    """The file; (epochs, lines) written."""
    target, size, lines, epoch = int(megabytes * 1e6), 0, 0, 0
    clock = 1_764_637_323.0  # 2025-12-02 01:02:03 UTC
    with open(path, "w") as out:
        while size < target:
            block = []
            for step in range(steps):
                clock += 1.5
                block.append(f"{stamp(clock)} INFO rank 0 step {step * 10}/{steps * 10} "
                             f"loss {2.3 / (1 + epoch + step / steps):.4f} lr 0.001\n")
            clock += 1.0
            block.append(f"{stamp(clock)} INFO Epoch {epoch} took: {steps * 1.5 + 1:.2f}s "
                         f"loss={2.3 / (1 + epoch):.4f} acc={min(99.0, 10 + epoch):.1f}%\n")
            block.append(f"{stamp(clock)} INFO validation: val_loss={2.4 / (1 + epoch):.4f} "
                         f"val_acc={min(98.0, 9 + epoch):.1f}%\n")
            text = "".join(block)
            out.write(text)
            size += len(text)
            lines += len(block)
            epoch += 1
    return epoch, lines


def stamp(seconds: float) -> str:
    whole = int(seconds)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(whole)) + (
        f",{int((seconds - whole) * 1000):03d}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=200.0, help="file size (default 200)")
    parser.add_argument("--steps", type=int, default=40, help="step lines an epoch")
    parser.add_argument("--work", default="/tmp/dlscale-bench-mined",
                        help="where the file is written (removed after)")
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    path = work / "mined.out"
    try:
        epochs, lines = write_log(path, args.mb, args.steps)
        size = path.stat().st_size
        cpu, wall = time.process_time(), time.perf_counter()
        runs = parse_file_runs(str(path))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        shutil.rmtree(work, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{size / 1e6:.0f} MB, {lines} lines, {epochs} epochs: {cpu:.1f} s CPU "
          f"({wall:.1f} s wall, {lines / wall / 1e6:.2f} M lines/s), peak RSS {peak:.0f} MB "
          f"(Python {platform.python_version()}, {platform.machine()})")
    [run] = runs
    print(f"the template taken: {run.facts['epoch_line']}")
    assert len(run.epochs) == epochs, (len(run.epochs), epochs)
    assert run.epochs[2]["seconds"] == args.steps * 1.5 + 1, run.epochs[2]
    assert run.epochs[epochs].get("val_loss") is not None, run.epochs[epochs]
    return 0 if cpu < 30 else 1


if __name__ == "__main__":
    raise SystemExit(main())
