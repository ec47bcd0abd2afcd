#!/usr/bin/env python3
"""Orchestration overhead on the SLURM test cluster: the wall time of a whole 3-point
study (`snakemake --profile profiles/slurm`) against the time its jobs ran.

  scripts/testcluster.sh start
  python bench/bench_slurm.py [--work /tmp/dlscale-bench-slurm] [--epochs 4] [--images 20000]

The study: SimpleCNN on 1, 2 and 4 (logical CPU) replicas, Fashion-MNIST from Debian
(or a generated archive in the CIFAR-10 layout when it is missing), each point one SLURM
job, then the tables and plots on the login node. A thread polls squeue every second
for the SLURM jobs' start times and, as each leaves the queue, `scontrol show job` gives
its end time (slurmctld forgets a job MinJobAge seconds after its end); the jobs
Snakemake runs itself (the analysis) are timed from the timestamps it prints (seconds).

Reported: the study's wall time (snakemake's start to its exit); the sum of the jobs'
run times; their union (the time at least one job was running: with points in parallel
the sum exceeds the wall time); and the overhead = wall - union, the time no job of the
study was running (start-up and planning, submission, scheduling, status polling).
Target (issue 16): under 10 % of the wall time.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from datetime import date, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from dlscale.data.datasets import DEBIAN_FASHION_MNIST  # noqa: E402


def config_text(work: Path, epochs: int, images: int) -> str:
    if DEBIAN_FASHION_MNIST.is_dir():
        data = (f"{{dataset: fashion_mnist, source: auto, image_size: 28, shards: 4, "
                f"limit_train: {images}}}")
    else:
        import make_synthetic_cifar

        archive = make_synthetic_cifar.write_archive(work / "cifar-10-python.tar.gz",
                                                     "python", 50000, 10000, seed=0)
        data = f"{{source: {archive}, image_size: 32, shards: 4, limit_train: {images}}}"
    return (f"data: {data}\n"
            "sweep: {models: [SimpleCNN], gpus: [1, 2, 4]}\n"
            f"training: {{epochs: {epochs}, batch_per_gpu: 64, device: cpu}}\n"
            "resources: {cpus_per_gpu: 1, mem_mb_per_gpu: 2000, runtime_min: 30}\n")


class JobWatch(threading.Thread):
    """Start and end times of this user's SLURM jobs, from squeue once a second; a job is
    named by its comment, where the SLURM plugin writes the rule and wildcards."""

    def __init__(self):
        super().__init__(daemon=True)
        self.jobs: dict[str, dict] = {}
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            self.poll()
            self.done.wait(1.0)
        self.poll()

    def poll(self):
        out = subprocess.run(["squeue", "-h", "--me", "-o", "%i|%k|%T|%S"],
                             capture_output=True, text=True).stdout
        listed = set()
        for line in out.splitlines():
            job, name, state, start = line.split("|")
            listed.add(job)
            entry = self.jobs.setdefault(job, {"name": name})
            if state == "RUNNING" and start not in ("N/A", ""):
                entry["start"] = datetime.fromisoformat(start).timestamp()
        # a job gone from squeue has ended: its end time, while slurmctld still has it
        # (it forgets a job MinJobAge seconds after its end)
        for job, entry in self.jobs.items():
            if job not in listed and "end" not in entry:
                entry["end"] = end_time(job)


def end_time(job: str) -> float | None:
    out = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True,
                         text=True).stdout
    match = re.search(r"EndTime=(\S+)", out)
    return datetime.fromisoformat(match.group(1)).timestamp() if match else None


def local_jobs(output: str) -> list[tuple[str, float, float]]:
    """(rule, start, end) of the jobs Snakemake ran itself (localrule), from the
    timestamps it prints before "localrule NAME:" and "Finished jobid: N (Rule: NAME)"."""
    stamp, started, jobs = None, {}, []
    lines = output.splitlines()
    for number, line in enumerate(lines):
        if line.startswith("[") and line.endswith("]"):
            try:
                stamp = datetime.strptime(line[1:-1], "%a %b %d %H:%M:%S %Y").timestamp()
            except ValueError:
                pass
        elif line.startswith("localrule ") and stamp is not None:
            rule = line.split()[1].rstrip(":")
            following = lines[number + 1:number + 40]
            jobid = next((x.split(":")[1].strip() for x in following
                          if x.strip().startswith("jobid:")), None)
            started[jobid] = (rule, stamp)
        elif line.startswith("Finished jobid:") and stamp is not None:
            jobid = line.split(":")[1].split()[0]
            if jobid in started:
                rule, start = started.pop(jobid)
                jobs.append((rule, start, stamp))
    return jobs


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The intervals joined where they overlap: when at least one job was running."""
    spans: list[list[float]] = []
    for start, end in sorted(intervals):
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    return [(a, b) for a, b in spans]


def gaps(spans: list[tuple[float, float]], t0: float, t1: float) -> list[tuple[float, float]]:
    """(from, to) seconds after t0 during which no job ran."""
    edges = [t0, *[x for span in spans for x in span], t1]
    return [(a - t0, b - t0) for a, b in zip(edges[::2], edges[1::2]) if b - a >= 0.5]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-slurm"))
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--images", type=int, default=20000, help="training images")
    args = parser.parse_args(argv)
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode:
        raise SystemExit("no SLURM cluster answers sinfo: scripts/testcluster.sh start")
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    config = args.work / "config.yaml"
    config.write_text(config_text(args.work, args.epochs, args.images))
    command = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
               "--directory", str(args.work), "--profile", str(ROOT / "profiles" / "slurm"),
               f"--configfile={config}", "all"]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    watch = JobWatch()
    watch.start()
    t0 = time.time()
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=env)
    wall = time.time() - t0
    watch.done.set()
    watch.join()
    if proc.returncode:
        raise SystemExit(f"the study failed ({proc.returncode}):\n{proc.stdout[-4000:]}")
    rows = []
    for job, entry in sorted(watch.jobs.items(), key=lambda item: int(item[0])):
        end = entry.get("end")
        if "start" in entry and end:
            rows.append((entry["name"], job, entry["start"], end))
    rows += [(f"{rule} (local)", "-", start, end) for rule, start, end in local_jobs(proc.stdout)]
    intervals = [(max(start, t0), end) for _, _, start, end in rows]
    spans = merged(intervals)
    busy, total = sum(b - a for a, b in spans), sum(end - start for start, end in intervals)
    print(f"machine: {platform.node()}, {os.cpu_count()} cores; SLURM test cluster "
          f"(scripts/testcluster.sh: 2 nodes, 4 fake GPUs each); {date.today()}")
    print(f"command: python bench/bench_slurm.py --epochs {args.epochs} --images {args.images}\n")
    print("| job | SLURM id | from [s] | to [s] | run time [s] |\n|---|---|---|---|---|")
    for name, job, start, end in sorted(rows, key=lambda row: row[2]):
        print(f"| {name} | {job} | {start - t0:.0f} | {end - t0:.0f} | {end - start:.0f} |")
    print(f"\n| study wall time | jobs' run times, summed | jobs' run times, union | "
          f"overhead (wall - union) |\n|---|---|---|---|\n"
          f"| {wall:.0f} s | {total:.0f} s | {busy:.0f} s | {wall - busy:.0f} s = "
          f"{(wall - busy) / wall:.1%} of the wall time (target < 10 %) |")
    print("\nwhen no job ran (from-to, seconds after snakemake started): " + ", ".join(
        f"{a:.0f}-{b:.0f}" for a, b in gaps(spans, t0, t0 + wall)))
    print_phases(args.work, watch.jobs)
    return 0


# a training job's spans (run.json's phases, dlscale.jobs.phases), then the job's end
JOB_SPANS = [("SLURM start to job step", "job_start", "step_start"),
             ("job step to rule (Snakemake start-up, Snakefile)", "step_start", "rule_start"),
             ("rule to train.py", "rule_start", "interpreter"),
             ("train.py start-up (imports)", "interpreter", "imports"),
             ("model, data", "imports", "first_step"),
             ("training (fit)", "first_step", "last_step"),
             ("evaluation, checks, record", "last_step", "recorded")]


def print_phases(work: Path, jobs: dict) -> None:
    """Where each training job's time went, from its run.json and SLURM's end time."""
    import json

    print("\nPer training job (seconds; SLURM's start and end are whole seconds):\n")
    print("| point | " + " | ".join(name for name, _, _ in JOB_SPANS)
          + " | record to job end | job | beyond training |")
    print("|---|" + "---|" * (len(JOB_SPANS) + 3))
    for path in sorted((work / "results" / "runs").glob("*/*/*/run.json")):
        run = json.loads(path.read_text())
        phases = run.get("phases", {})
        end = jobs.get((run.get("env") or {}).get("SLURM_JOB_ID", ""), {}).get("end")
        cells = [f"{phases[b] - phases[a]:.1f}" if a in phases and b in phases else "-"
                 for _, a, b in JOB_SPANS]
        if end:
            job = end - phases["job_start"]
            cells += [f"{end - phases['recorded']:.1f}", f"{job:.1f}",
                      f"{job - run['fit_seconds']:.1f}"]
        else:
            cells += ["-", "-", "-"]
        point = path.parent.relative_to(work / "results" / "runs")
        print(f"| {point} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
