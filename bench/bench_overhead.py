#!/usr/bin/env python3
"""What a point costs beyond its training: dlscale's train.py against a bare Keras
script (bench/bare_keras.py), side by side in one run.

  python bench/bench_overhead.py [--work /tmp/dlscale-bench-overhead] [--rounds 2]
      [--models SimpleCNN MobileNetV2] [--replicas 1 2] [--images 2048] [--epochs 4]
      [--synthetic] [--files] [--before REV]

The same generated CIFAR-10 archive (32 px), model, batch per replica (64), replicas
(logical CPU devices) and epochs are trained by
  (a) bare: bench/bare_keras.py, numpy arrays into model.fit, a timer per epoch;
  (b) dlscale: launch.py + train.py as the train rule runs them, with train.py's default
      instrumentation (telemetry every second, epoch records, backup, evaluation, record)
      and input (these images are held in memory after the first epoch: data.cache_mb);
  --synthetic and --files add train.py on synthetic input and train.py reading the
  shards every epoch (--cache-mb 0, the input before data.cache_mb), in the same rounds;
  --before REV adds launch.py + train.py as they were at git commit REV (a cut's before).
Each run is its own process; the pairs alternate which goes first. Per run: the process
wall time (spawn to exit, measured here), fit's seconds (reported by each), the steady
epoch time (mean of the epochs after the first), and the fixed cost = wall - fit. For
dlscale, run.json's phases split its fixed cost. Goals (issue 26): steady epoch ratio
dlscale / bare <= 1.02; fixed cost <= bare's + 3 s.
Prints Markdown tables for docs/benchmarks.md: the means, and the ratio of each round's
two runs with its geometric mean and 95 % bootstrap interval (this VM's speed drifts
between rounds; a round's two runs are minutes apart at most).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_USE_LEGACY_KERAS="1")
BATCH = 64
# the dlscale variants: train.py's flags beyond the common ones, and how the tables name them
VARIANTS = {"dlscale": ([], "real input"),
            "synthetic": (["--synthetic"], "synthetic input"),
            "files": (["--cache-mb", "0"], "real input, read from the shards every epoch"),
            "before": ([], "real input, train.py at the commit --before names")}
# the spans of a dlscale job's fixed cost, from run.json's phases (dlscale.jobs.phases)
SPANS = [("launch", "rule_start", "interpreter"), ("start-up", "interpreter", "imports"),
         ("model", "imports", "model"), ("data", "model", "data"),
         ("to fit", "data", "first_step"), ("after fit", "last_step", "evaluated"),
         ("record", "evaluated", "recorded")]


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, env=ENV)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise SystemExit(f"error: {' '.join(command)} exited {proc.returncode}:\n"
                         + proc.stderr[-3000:])
    return wall, proc


def prepared(work: Path, images: int) -> tuple[Path, Path]:
    """The generated CIFAR-10 archive (python layout, `images` training and 256 test
    images) and its 32 px TFRecord shards, made once in `work`."""
    import make_synthetic_cifar

    from dlscale.data import preparation

    archive, data = work / "cifar.tar.gz", work / "data32"
    if not (data / "manifest.json").exists():
        make_synthetic_cifar.write_archive(archive, "python", images, 256, seed=0)
        preparation.prepare("cifar10", archive, data, 32, 4)
    return archive, data


def checkout_scripts(rev: str, work: Path) -> Path:
    """scripts/ as it was at git commit `rev`, extracted under `work`."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
                            capture_output=True, text=True)
    if commit.returncode:
        raise SystemExit(f"error: --before {rev!r}: not a commit of {ROOT}")
    target = work / f"scripts-{commit.stdout.strip()[:12]}"
    if not target.exists():  # extracted beside it, then renamed: never half there
        part = target.with_name(target.name + ".part")
        subprocess.run(["rm", "-rf", str(part)], check=True)
        part.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit.stdout.strip(),
                                  "scripts"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(part), "--strip-components", "1"],
                       input=archive, check=True)
        part.rename(target)
    return target


def bare_command(archive: Path, model: str, replicas: int, epochs: int) -> list[str]:
    return [sys.executable, str(ROOT / "bench" / "bare_keras.py"), "--archive", str(archive),
            "--model", model, "--replicas", str(replicas), "--batch-size", str(BATCH),
            "--epochs", str(epochs), "--cpu-replicas"]


def train_flags(data: Path, out: Path, model: str, replicas: int, epochs: int) -> list[str]:
    """train.py's flags for the same training as bare_command's."""
    return ["--data-dir", str(data), "--out", str(out), "--model", model, "--gpus",
            str(replicas), "--device", "cpu", "--batch-per-gpu", str(BATCH), "--epochs",
            str(epochs), "--image-size", "32"]


def bare(archive: Path, model: str, replicas: int, epochs: int) -> dict:
    wall, proc = timed(bare_command(archive, model, replicas, epochs))
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"wall": wall, "fit": result["fit_s"], "steady": statistics.mean(result["epochs"][1:])}


def dlscale(data: Path, out: Path, model: str, replicas: int, epochs: int,
            *extra: str, scripts: Path = SCRIPTS) -> dict:
    wall, _ = timed([sys.executable, str(scripts / "launch.py"), "--record", str(out), "--",
                     sys.executable, str(scripts / "train.py"),
                     *train_flags(data, out, model, replicas, epochs), *extra])
    run = json.loads((out / "run.json").read_text())
    epochs_ = [json.loads(x) for x in (out / "epochs.jsonl").read_text().splitlines()]
    phases = run["phases"]
    return {"wall": wall, "fit": run["fit_seconds"],
            "steady": statistics.mean(e["seconds"] for e in epochs_[1:]),
            "spans": {name: phases[b] - phases[a] for name, a, b in SPANS}}


def progress_log(path: Path, epochs: int = 50, steps: int = 2000) -> Path:
    """A long job's .out as Keras' verbose=1 writes it: every step's progress bar."""
    with open(path, "w") as out:
        for epoch in range(1, epochs + 1):
            out.write(f"Epoch {epoch}/{epochs}\n")
            for step in range(1, steps + 1):
                out.write(f"\r{step:4d}/{steps} [{'=' * (30 * step // steps):<30}] - ETA: 1s - "
                          f"loss: {2.3 - epoch / 40:.4f} - accuracy: {epoch / 60:.4f}")
            out.write(" - 95s 47ms/step\n")
    return path


def planning(work: Path) -> list[tuple[str, float, float]]:
    """Seconds to plan a study (dlscale.plan.study.Study, what each Snakefile parse does) in the
    planning process and in a job step, without and with a long external log."""
    import copy

    import yaml

    from dlscale.core.schema import validate
    from dlscale.plan.study import Study, check_raw_config

    log = progress_log(work / "long-job.out")
    base = yaml.safe_load((ROOT / "config" / "demo.yaml").read_text())
    with_log = dict(base, external_runs=[{"log": str(log), "model": "Theirs", "gpus": 1,
                                          "global_batch": 64, "train_images": 128000}])
    rows = []
    for label, raw in (("demo config", base), (f"demo + a {log.stat().st_size / 1e6:.0f} MB "
                                                "verbose=1 external log", with_log)):
        times = []
        for job_step in (False, True):
            best = float("inf")
            for _ in range(3):
                config = copy.deepcopy(raw)
                start = time.perf_counter()
                check_raw_config(config)
                validate(config)  # what rules/common.smk runs
                Study(config, ROOT, job_step=job_step).notes()
                best = min(best, time.perf_counter() - start)
            times.append(best)
        rows.append((label, *times))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "dlscale-bench-overhead")
    parser.add_argument("--models", nargs="+", default=["SimpleCNN", "MobileNetV2"])
    parser.add_argument("--replicas", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--planning-only", action="store_true",
                        help="only the planning figures (no training)")
    parser.add_argument("--synthetic", action="store_true",
                        help="also train.py on synthetic input (the input pipeline's share)")
    parser.add_argument("--files", action="store_true",
                        help="also train.py reading the shards every epoch (--cache-mb 0)")
    parser.add_argument("--before", metavar="REV",
                        help="also launch.py + train.py as they were at git commit REV")
    args = parser.parse_args(argv)
    archive, data = prepared(args.work, args.images)
    before = checkout_scripts(args.before, args.work) if args.before else None
    began = time.time()
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, {sys.executable}")
    print(f"{args.images} images at 32 px, batch {BATCH} per replica, {args.epochs} epochs "
          f"(steady: epochs 2-{args.epochs}), {args.rounds} round(s)\n")
    rows, spans, ratios, against = [], {}, [], []
    for model in [] if args.planning_only else args.models:
        for replicas in args.replicas:
            got = {"bare": []} | {kind: [] for kind in VARIANTS
                                  if kind == "dlscale" or getattr(args, kind)}
            for round_ in range(args.rounds):
                order = list(got) if round_ % 2 == 0 else list(reversed(got))
                for kind in order:
                    if kind == "bare":
                        got[kind].append(bare(archive, model, replicas, args.epochs))
                    else:
                        out = args.work / f"run-{model}-{replicas}-{round_}-{kind}"
                        subprocess.run(["rm", "-rf", str(out)], check=True)
                        got[kind].append(dlscale(data, out, model, replicas, args.epochs,
                                                 *VARIANTS[kind][0],
                                                 scripts=before if kind == "before" else SCRIPTS))
            mean = {k: {f: statistics.mean(r[f] for r in v) for f in ("wall", "fit", "steady")}
                    for k, v in got.items()}
            for kind in [k for k in got if k != "bare"]:
                pairs = [d["steady"] / b["steady"] for b, d in zip(got["bare"], got[kind])]
                ratios.append((model, replicas, kind, pairs, *paired_ratio(pairs)))
            for kind in [k for k in got if k not in ("bare", "dlscale")]:
                pairs = [d["steady"] / v["steady"] for v, d in zip(got[kind], got["dlscale"])]
                against.append((model, replicas, kind, pairs, *paired_ratio(pairs)))
            print(f"{model} x{replicas}: steady epoch " + ", ".join(
                f"{kind} {m['steady']:.3f} s" for kind, m in mean.items()), flush=True)
            spans[(model, replicas)] = {
                name: statistics.mean(r["spans"][name] for r in got["dlscale"])
                for name, _, _ in SPANS}
            rows.append((model, replicas, mean))
            b, d = mean["bare"], mean["dlscale"]
            print(f"{model} x{replicas}: bare {b}, dlscale {d}", file=sys.stderr, flush=True)
    if rows:
        print_tables(rows, spans)
        print("\nSteady epoch ratio dlscale / bare per round (the two runs of a round ran one "
              "after the other): geometric mean and its 95 % bootstrap interval\n")
        print("| model | replicas | dlscale | rounds | ratio per round | mean | 95 % interval |")
        print("|---|---|---|---|---|---|---|")
        for model, replicas, kind, pairs, low, mid, high in ratios:
            print(f"| {model} | {replicas} | {VARIANTS[kind][1]} | {len(pairs)} | "
                  f"{', '.join(f'{r:.3f}' for r in pairs)} | {mid:.3f} | {low:.3f} to {high:.3f} |")
    if against:
        print("\nSteady epoch ratio dlscale / each other variant, same round: geometric mean and "
              "its 95 % bootstrap interval\n")
        print("| model | replicas | dlscale against | rounds | ratio per round | mean | "
              "95 % interval |\n|---|---|---|---|---|---|---|")
        for model, replicas, kind, pairs, low, mid, high in against:
            print(f"| {model} | {replicas} | {VARIANTS[kind][1]} | {len(pairs)} | "
                  f"{', '.join(f'{r:.3f}' for r in pairs)} | {mid:.3f} | {low:.3f} to {high:.3f} |")
    print("\nPlanning in each Snakefile parse (best of 3; the job step's since this round)\n")
    print("| config | planning process [s] | job step [s] |\n|---|---|---|")
    for label, main_s, step_s in planning(args.work):
        print(f"| {label} | {main_s:.3f} | {step_s:.3f} |")
    print(f"\n{time.time() - began:.0f} s in all")
    return 0


def paired_ratio(ratios: list[float], resamples: int = 10_000) -> tuple[float, float, float]:
    """(low, geometric mean, high) of per-round ratios, the bounds a 95 % percentile
    bootstrap of the mean log ratio (a fixed seed: the same rounds give the same interval).
    Pairing takes out what changes between rounds (this VM's speed drifts by several per
    cent within minutes), which the means of all runs keep."""
    logs = [math.log(r) for r in ratios]
    draw = random.Random(0)
    means = sorted(statistics.mean(draw.choices(logs, k=len(logs))) for _ in range(resamples))
    return (math.exp(means[int(0.025 * resamples)]), math.exp(statistics.mean(logs)),
            math.exp(means[int(0.975 * resamples) - 1]))


def print_tables(rows, spans) -> None:
    print("| model | replicas | steady epoch bare [s] | dlscale [s] | ratio | fixed cost bare "
          "[s] | dlscale [s] | difference [s] | wall bare [s] | dlscale [s] |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, replicas, mean in rows:
        b, d = mean["bare"], mean["dlscale"]
        fb, fd = b["wall"] - b["fit"], d["wall"] - d["fit"]
        print(f"| {model} | {replicas} | {b['steady']:.3f} | {d['steady']:.3f} | "
              f"{d['steady'] / b['steady']:.3f} | {fb:.1f} | {fd:.1f} | {fd - fb:+.1f} | "
              f"{b['wall']:.1f} | {d['wall']:.1f} |")
    print("\ndlscale's fixed cost by phase (run.json's phases; mean seconds)\n")
    print("| model | replicas | " + " | ".join(name for name, _, _ in SPANS) + " |")
    print("|---|---|" + "---|" * len(SPANS))
    for (model, replicas), values in spans.items():
        print(f"| {model} | {replicas} | " + " | ".join(f"{values[name]:.2f}"
                                                      for name, _, _ in SPANS) + " |")


if __name__ == "__main__":
    sys.exit(main())
