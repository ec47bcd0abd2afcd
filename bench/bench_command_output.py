#!/usr/bin/env python3
"""A command point with a large output: disk used under the run folder, and the peak
memory of recording it (run_command.py) and of tabulating it (tabulate_run.py).

  python bench/bench_command_output.py [--mb 90] [--kind bars|epochs]
                                       [--scripts DIR] [--work /tmp/dlscale-bench-output]

The command is a Python script that prints `--mb` MB: `bars`, Keras' verbose=1 progress
bar (\\r updates) over 5 epochs; `epochs`, one short epoch line after another (a table
of as many rows as epochs). The point is run as the workflow runs it (launch.py --record
-- run_command.py, telemetry every second), then tabulated. Peak memory is each
process's maximum resident set (wait4: the process and what it waited for; the printing
script is one of those, some 10 MB). Disk: the run folder's blocks, a file with several
names counted once. --scripts: another checkout's scripts/ (the code before a change).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRINTER = """
import sys
kind, size = sys.argv[1], int(float(sys.argv[2]) * 2**20)
out, written = sys.stdout, 0
if kind == "bars":
    steps = size // 5 // 56
    for epoch in range(1, 6):
        out.write(f"Epoch {epoch}/5\\n")
        for i in range(1, steps):
            out.write(f"\\r{i:>7}/{steps} [=====>........] - ETA: 1s - loss: 0.5000")
        out.write(f"\\r{steps}/{steps} [==============================] - 12s "
                  "240us/step - loss: 0.4000 - accuracy: 0.9000\\n")
else:
    line = "1/1 - 0s - loss: 0.5000 - accuracy: 0.5000\\n"
    epochs = size // (len(line) + 16)
    for epoch in range(1, epochs + 1):
        out.write(f"Epoch {epoch}/{epochs}\\n" + line)
"""


def measured(command: list[str], **kwargs) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of a command run to its end."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, **kwargs)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{command[1]} exited with {proc.returncode}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024


def disk_mb(folder: Path) -> float:
    seen, blocks = set(), 0
    for path in folder.rglob("*"):
        info = path.lstat()
        if path.is_file() and (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            blocks += info.st_blocks
    return blocks * 512 / 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=90.0)
    parser.add_argument("--kind", choices=("bars", "epochs"), default="bars")
    parser.add_argument("--scripts", type=Path, default=ROOT / "scripts")
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-output"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    printer = args.work / "printer.py"
    printer.write_text(PRINTER)
    run = args.work / "results/runs/mine/gpus1/rep1"
    env = dict(os.environ, PYTHONPATH=str(args.scripts))
    command = f"{sys.executable} {printer} {args.kind} {args.mb}"
    record_s, record_mb = measured(
        [sys.executable, str(args.scripts / "launch.py"), "--record", str(run), "--",
         sys.executable, str(args.scripts / "run_command.py"), "--command", command,
         "--model", "mine", "--epochs", "5", "--lr", "0.1", "--device", "cpu",
         "--out", str(run)], cwd=args.work, env=env, stdout=subprocess.DEVNULL)
    table_s, table_mb = measured(
        [sys.executable, str(args.scripts / "tabulate_run.py"), str(run), "-o",
         str(run / "epochs.csv")], cwd=args.work, env=env, stdout=subprocess.DEVNULL)
    sizes = {p.name: p.stat().st_size / 2**20 for p in (run / "train.log", run / "epochs.jsonl",
                                                         run / "epochs.csv")}
    rows = sum(1 for _ in open(run / "epochs.csv")) - 1
    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; scripts: {args.scripts}")
    print(f"output: {args.kind}, {sizes['train.log']:.1f} MB; epochs.jsonl "
          f"{sizes['epochs.jsonl']:.1f} MB; epochs.csv {sizes['epochs.csv']:.1f} MB, "
          f"{rows} rows")
    print(f"run folder on disk: {disk_mb(run):.1f} MB")
    print(f"recording (launch + run_command): {record_s:.1f} s, peak {record_mb:.0f} MB")
    print(f"tabulate_run: {table_s:.1f} s, peak {table_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
