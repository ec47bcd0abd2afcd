#!/usr/bin/env python3
"""Planning at scale: `snakemake -n` of a large sweep, timed, and optionally profiled.

The sweep: 5 models x GPUs [1, 2, 4, 8, 16, 32] (4 per node: up to 8 nodes) x 2 precisions
x strategies mirrored (one node only) and multiworker, so 9 (GPUs, strategy) pairs per
model and precision, x --repeats: 450 points with 5 repeats, 2,250 with 25. Each dry run
is its own process (`snakemake --profile profiles/local -n`, nothing else running), best
of --runs; with --profile the last run is made under cProfile and its top entries by
cumulative and by own time are printed. With --upstream-patches, the dry runs import
Snakemake and its SLURM plugin from a copy with bench/upstream/*.patch applied (what
dlscale asks of them, bench/upstream/README.md): what planning would cost once released.

  python bench/bench_planning.py [--repeats 5 25] [--runs 3] [--profile] [--upstream-patches]

Prints one Markdown table row per sweep for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def config(repeats: int) -> dict:
    return {
        "data": {"dataset": "fashion_mnist", "image_size": 32},
        "sweep": {"models": ["SimpleCNN", "MLP", "MobileNetV2", "ResNet50V2", "ResNet152V2"],
                  "gpus": [1, 2, 4, 8, 16, 32], "repeats": repeats,
                  "precision": ["float32", "mixed_float16"],
                  "strategy": ["mirrored", "multiworker"]},
        "resources": {"max_gpus_per_node": 4},
        "training": {"epochs": 2, "batch_per_gpu": 32},
    }


def patched_packages(where: Path) -> Path:
    """A copy of the installed packages bench/upstream's patches change, patched and
    byte-compiled (as pip installs them), to put first on PYTHONPATH."""
    for patch in sorted((ROOT / "bench/upstream").glob("*.patch")):
        package = patch.read_text().splitlines()[0].split()[1].split("/")[1]
        if not (where / package).exists():
            spec = importlib.util.find_spec(package)  # not imported: only found
            shutil.copytree(Path(spec.origin).parent, where / package,
                            ignore=shutil.ignore_patterns("__pycache__"))
        applied = subprocess.run(["patch", "-s", "-p1", "-d", str(where), "-i", str(patch)],
                                 capture_output=True, text=True)
        if applied.returncode:  # a release changed the file: the patch may be in it now
            raise SystemExit(f"{patch.name} does not apply to the installed {package}: "
                             f"{(applied.stdout + applied.stderr).strip()}")
    compileall.compile_dir(where, quiet=1)
    return where


def dry_run(work: Path, path: Path, profile: Path | None,
            pythonpath: Path | None = None) -> tuple[float, int]:
    """(seconds, jobs) of one dry run in its own process."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    command = [sys.executable, *(["-m", "cProfile", "-o", str(profile)] if profile else []),
               "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(work),
               "--profile", str(ROOT / "profiles/local"), f"--configfile={path}", "-n"]
    began = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - began
    if proc.returncode:
        raise SystemExit(f"dry run failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    total = [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("total")]
    return seconds, int(total[0]) if total else -1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-planning"))
    parser.add_argument("--repeats", type=int, nargs="+", default=[5, 25])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--upstream-patches", action="store_true")
    args = parser.parse_args()
    patched = (tempfile.TemporaryDirectory(prefix="dlscale-upstream-")
               if args.upstream_patches else None)
    pythonpath = patched_packages(Path(patched.name)) if patched else None
    if pythonpath:
        print(f"Snakemake and its SLURM plugin imported from {pythonpath} (patched)")
    print("| points | jobs | dry run, best of runs [s] | all runs [s] |")
    print("|---|---|---|---|")
    for repeats in args.repeats:
        work = args.work / f"r{repeats}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        path = work / "config.yaml"
        path.write_text(yaml.safe_dump(config(repeats)))
        times, jobs = [], 0
        for _ in range(args.runs):
            seconds, jobs = dry_run(work, path, None, pythonpath)
            times.append(seconds)
        points = 5 * 9 * 2 * repeats
        print(f"| {points:,} | {jobs:,} | {min(times):.2f} | "
              f"{', '.join(f'{t:.2f}' for t in times)} |", flush=True)
        if args.profile:
            out = work / "plan.prof"
            dry_run(work, path, out, pythonpath)
            for key in ("cumulative", "tottime"):
                print(f"\n{points} points, by {key}:")
                pstats.Stats(str(out)).sort_stats(key).print_stats(15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
