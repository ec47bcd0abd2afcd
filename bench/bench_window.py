#!/usr/bin/env python3
"""What the profiled window (analysis.breakdown) costs a study, and whether it changes
what the study reports.

  python bench/bench_window.py [--work /tmp/dlscale-bench-window] [--config config/demo.yaml]

Runs the same seeded study three times through `snakemake --profile profiles/local`, in
this order: without the window (analysis.breakdown: 0), with it (the default, 5 steps),
and without it again. The two runs without the window give the run-to-run noise of each
point's epoch time; the run with it is compared with their mean. Per point: epoch time
(scaling.csv, the epochs after skip_epochs), final and test accuracy, and the window's own
cost from its breakdown.json (starting and stopping the profiler, reading the trace,
timing the all-reduce) against the point's job_s. Prints Markdown for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def study(work: Path, config: Path, breakdown: int) -> tuple[pd.DataFrame, float]:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    extra = work / "window.yaml"
    extra.write_text(f"analysis: {{breakdown: {breakdown}}}\nhistory: {{path: null}}\n")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
                    "--directory", str(work), "--profile", str(ROOT / "profiles/local"),
                    "--configfile", str(config), str(extra), "-q"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return pd.read_csv(work / "results/tables/scaling.csv"), time.perf_counter() - t0


def window_cost(work: Path, series: str, gpus: int) -> dict:
    found = list((work / "results/runs").glob(f"{series}/**/gpus{gpus}/rep1/breakdown.json"))
    record = json.loads(found[0].read_text())
    coll = record.get("collective") or {}
    return {"window_s": record["window_s"], "convert_s": record["convert_s"],
            "allreduce_bench_s": coll.get("took_s", 0.0),
            "trace_bytes": record.get("trace_bytes", 0)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-window"))
    ap.add_argument("--config", type=Path, default=ROOT / "config/demo.yaml")
    args = ap.parse_args()
    off1, s1 = study(args.work / "off1", args.config, 0)
    on, s2 = study(args.work / "on", args.config, 5)
    off2, s3 = study(args.work / "off2", args.config, 0)
    print(f"machine: {platform.node()}, {os.cpu_count()} cores; studies took "
          f"{s1:.0f} s (off), {s2:.0f} s (on), {s3:.0f} s (off)\n")
    print("| point | epoch s off / off | noise | epoch s on | on vs off mean | "
          "accuracy off / on / off | test accuracy off / on / off | window + read + "
          "all-reduce s | share of job_s | trace KB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    key = ["series", "gpus"]
    for (_, a), (_, b), (_, c) in zip(off1.sort_values(key).iterrows(),
                                      on.sort_values(key).iterrows(),
                                      off2.sort_values(key).iterrows(), strict=True):
        mean = (a["epoch_time_s"] + c["epoch_time_s"]) / 2
        noise = abs(a["epoch_time_s"] - c["epoch_time_s"]) / mean
        cost = window_cost(args.work / "on", b["series"], int(b["gpus"]))
        spent = cost["window_s"] + cost["convert_s"] + cost["allreduce_bench_s"]
        print(f"| {b['series']} {int(b['gpus'])} GPU(s) | {a['epoch_time_s']:.3f} / "
              f"{c['epoch_time_s']:.3f} | {noise:.1%} | {b['epoch_time_s']:.3f} | "
              f"{(b['epoch_time_s'] - mean) / mean:+.1%} | {a['final_accuracy']:.4f} / "
              f"{b['final_accuracy']:.4f} / {c['final_accuracy']:.4f} | "
              f"{a['test_accuracy']:.4f} / {b['test_accuracy']:.4f} / "
              f"{c['test_accuracy']:.4f} | {cost['window_s']:.3f} + {cost['convert_s']:.3f} "
              f"+ {cost['allreduce_bench_s']:.3f} | {spent / b['job_s']:.1%} | "
              f"{cost['trace_bytes'] / 1024:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
