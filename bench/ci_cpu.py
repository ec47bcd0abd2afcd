#!/usr/bin/env python3
"""Where a command's CPU goes, by Python process and by test: runs COMMAND (for example
`CI=true bash .ci/run` from a fresh clone, or `make test`) with a `sitecustomize` on
PYTHONPATH that makes every Python process it starts (Snakemake, each training, the
pytest workers, SLURM jobs, which inherit the environment) append one line at exit: its
own user and system CPU, its pid, the test it ran under (pytest sets PYTEST_CURRENT_TEST,
and children inherit it) and its argv. Then prints the totals by kind of process and by
test, beside the whole machine's CPU over the same time (/proc/stat), so what is not
Python (SLURM's daemons, Chromium, shells) shows as the difference.

A process that ends by a signal or by os._exit writes no line; its CPU is in the
machine's figure only.

    python3 bench/ci_cpu.py --log /tmp/cpu.tsv -- env CI=true bash .ci/run
    python3 bench/ci_cpu.py --log /tmp/cpu.tsv --summary-only    # the same file again

Results: docs/benchmarks.md, "Tests and CI"."""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOOK = '''import atexit, os, sys, time
def _dlscale_cpu_line():
    try:
        t = os.times()
        argv = " ".join(sys.argv)[:300].replace("\\t", " ").replace("\\n", " ")
        line = "%d\\t%.2f\\t%.2f\\t%s\\t%s\\n" % (
            os.getpid(), t.user, t.system,
            os.environ.get("PYTEST_CURRENT_TEST", "-"), argv)
        fd = os.open(os.environ["DLSCALE_CPU_LOG"],
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        os.write(fd, line.encode())
        os.close(fd)
    except Exception:
        pass
if os.environ.get("DLSCALE_CPU_LOG"):
    atexit.register(_dlscale_cpu_line)
'''


def machine_cpu_s() -> tuple[float, float]:
    """(busy, idle) seconds of all cores since boot, from /proc/stat's first line."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / tick, idle / tick


def kind(argv: str) -> str:
    words = argv.split()
    if not words:
        return "?"
    if "snakemake" in words[0] or argv.startswith("-m snakemake"):
        return "snakemake (job step)" if "--target-jobs" in argv else "snakemake"
    if words[0] == "-c":
        return "python -c (pytest workers, test helpers)"
    return Path(words[0]).name


def summarize(log: Path, top: int) -> None:
    rows = [line.rstrip("\n").split("\t") for line in log.read_text().splitlines()]
    by_kind = collections.defaultdict(lambda: [0, 0.0])
    by_test = collections.defaultdict(float)
    for _pid, user, system, test, argv in rows:
        cpu = float(user) + float(system)
        entry = by_kind[kind(argv)]
        entry[0] += 1
        entry[1] += cpu
        by_test[test.split(" (")[0]] += cpu
    total = sum(v[1] for v in by_kind.values())
    print(f"{len(rows)} Python processes, {total:.0f} s of CPU")
    print(f"{'CPU s':>8} {'procs':>6}  kind")
    for name, (count, cpu) in sorted(by_kind.items(), key=lambda x: -x[1][1])[:top]:
        print(f"{cpu:8.1f} {count:6d}  {name}")
    print(f"\n{'CPU s':>8}  test (its Python processes; '-': outside any test)")
    for name, cpu in sorted(by_test.items(), key=lambda x: -x[1])[:top]:
        print(f"{cpu:8.1f}  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, required=True, help="where the lines go")
    parser.add_argument("--top", type=int, default=25, help="rows in each table")
    parser.add_argument("--summary-only", action="store_true", help="read --log only")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.summary_only:
        if not command:
            parser.error("a COMMAND after -- is needed (or --summary-only)")
        args.log.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory() as hook_dir:
            Path(hook_dir, "sitecustomize.py").write_text(HOOK)
            os.chmod(hook_dir, 0o755)
            env = {**os.environ, "DLSCALE_CPU_LOG": str(args.log.resolve()),
                   "PYTHONPATH": os.pathsep.join(
                       filter(None, [hook_dir, os.environ.get("PYTHONPATH")]))}
            busy0, idle0 = machine_cpu_s()
            t0 = time.monotonic()
            code = subprocess.call(command, env=env)
            wall = time.monotonic() - t0
            busy1, idle1 = machine_cpu_s()
        print(f"exit {code}; {wall:.0f} s wall; the machine: {busy1 - busy0:.0f} s busy, "
              f"{idle1 - idle0:.0f} s idle (all cores)")
    if not args.log.is_file():
        print(f"no line in {args.log}: no Python process ended normally", file=sys.stderr)
        return 1
    summarize(args.log, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
