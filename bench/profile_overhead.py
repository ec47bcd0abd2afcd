#!/usr/bin/env python3
"""Where a steady epoch's CPU goes: dlscale's train.py against the bare Keras script
(bench/bare_keras.py), each under `perf record`, in the same rounds.

  python bench/profile_overhead.py [--work /tmp/dlscale-bench-overhead] [--rounds 3]
      [--models SimpleCNN MobileNetV2] [--replicas 1] [--epochs 6] [--frequency 499]
      [--top 12]

bench/bench_overhead.py measures that dlscale's steady epoch is a few per cent longer than
the bare script's; this says where that time is spent. The same data, model, batch (64
per replica), replicas (logical CPU devices) and epochs as there. Each run is its own
process under `perf record -e cpu-clock -k CLOCK_MONOTONIC` (software sampling of every
thread at --frequency per second of CPU, user and kernel time alike as root; as another
user kernel.perf_event_paranoid=2 keeps it to user space), with ONEDNN_JIT_PROFILE=2 so
that oneDNN names its generated kernels for perf. Only samples inside the steady epochs count
(epoch 2 onwards, each epoch's own begin and end on the same clock: the bare script
prints its windows, train.py gets them from a wrapper around its epoch recorder, which
changes nothing else). Per run and epoch: wall seconds, user CPU seconds, and that CPU
split by where it ran (the Python interpreter, TensorFlow's framework and kernels,
oneDNN's generated kernels, the kernel, ...) and by thread (the Python main thread, which dispatches
the steps and runs the callbacks, or the others: TensorFlow's pools and, in dlscale, the
telemetry sampler). Prints Markdown tables for docs/benchmarks.md: the means per part,
the difference and the symbols whose CPU differs most.

Needs Linux perf (Debian: apt install linux-perf) and a time.perf_counter on
CLOCK_MONOTONIC (Linux). The wrapper: `profile_overhead.py train <train.py flags>` runs
train.py's main with the recorder's epoch windows written to $DLSCALE_PROFILE_WINDOWS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "scripts"))

import bench_overhead  # noqa: E402  (after the paths it is found on)

WINDOWS_ENV = "DLSCALE_PROFILE_WINDOWS"
# where a sample ran, from its shared object's file name: the first pattern that matches
PARTS = [("oneDNN's generated kernels (convolutions, matmuls)", r"^perf-\d+\.map$"),
         ("TensorFlow's kernels and runtime", r"libtensorflow_cc|_pywrap_tensorflow"),
         ("TensorFlow's framework (executor, thread pools)", r"libtensorflow_framework"),
         ("Python interpreter", r"libpython|^python"),
         ("Linux kernel", r"kernel\.kallsyms|vmlinux"),
         ("C and C++ libraries", r"^(libc|libm|libstdc\+\+|libgcc_s|ld-linux|libpthread)\W"),
         ("numpy", r"numpy"),
         ("other", r"")]
SAMPLE = re.compile(r"^\s*(?P<comm>.*?)\s+(?P<pid>\d+)/(?P<tid>\d+)\s+(?P<time>\d+\.\d+):"
                    r"\s+[0-9a-f]+\s+(?P<sym>.*?)\s+\((?P<dso>.*)\)\s*$")


def wrapped_train(argv: list[str]) -> int:
    """train.py's main, with each epoch's (begin, end) from its recorder appended to the
    JSON file named by $DLSCALE_PROFILE_WINDOWS when the process ends."""
    import atexit

    from dlscale.train import training

    windows: list[tuple[float, float]] = []
    recorder_of = training.epoch_recorder

    def epoch_recorder(*args, **kwargs):
        recorder = recorder_of(*args, **kwargs)
        end_of = recorder.on_epoch_end

        def on_epoch_end(epoch, logs=None):
            windows.append((recorder._start, time.perf_counter()))  # the recorder's span
            end_of(epoch, logs)

        recorder.on_epoch_end = on_epoch_end
        return recorder

    training.epoch_recorder = epoch_recorder
    atexit.register(lambda: Path(os.environ[WINDOWS_ENV]).write_text(json.dumps(windows)))
    import train

    return train.main(argv)


def part_of(dso: str) -> str:
    name = dso.rsplit("/", 1)[-1]
    return next(part for part, pattern in PARTS if re.search(pattern, name))


def profile(command: list[str], data: Path, windows_file: Path | None,
            frequency: int) -> list[tuple[float, float]]:
    """Runs `command` under perf, writing `data`; returns its epochs' (begin, end)."""
    # oneDNN names its kernels in perf-PID.map
    env = dict(bench_overhead.ENV, ONEDNN_JIT_PROFILE="2")
    if windows_file:
        env[WINDOWS_ENV] = str(windows_file)
    proc = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(frequency),
                           "-k", "CLOCK_MONOTONIC", "-o", str(data), "--", *command],
                          capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(f"error: {' '.join(command)} exited {proc.returncode} under perf:\n"
                         + proc.stderr[-3000:])
    if windows_file:
        windows = json.loads(windows_file.read_text())
    else:
        windows = json.loads(proc.stdout.strip().splitlines()[-1])["windows"]
    return [tuple(w) for w in windows]


def attribute(data: Path, windows: list[tuple[float, float]], frequency: int) -> dict:
    """Per steady epoch (windows[1:]): wall and CPU seconds, CPU by part, by thread, by
    symbol."""
    steady = windows[1:]
    script = subprocess.run(["perf", "script", "-i", str(data), "--ns", "-F",
                             "comm,pid,tid,time,ip,sym,dso"],
                            capture_output=True, text=True, check=True).stdout
    parts, threads, symbols = Counter(), Counter(), Counter()
    samples, pids = 0, set()
    for line in script.splitlines():
        match = SAMPLE.match(line)
        if not match:
            continue
        when = float(match["time"])
        if not any(begin <= when < end for begin, end in steady):
            continue
        samples += 1
        dso, sym = match["dso"], match["sym"] or "[unknown]"
        part = part_of(dso)
        parts[part] += 1
        thread = "main thread" if match["pid"] == match["tid"] else "other threads"
        threads[thread] += 1
        if part == PARTS[0][0]:  # a generated kernel: its name less the instance number
            pids.add(match["pid"])
            sym, obj = re.sub(r"\.\d+$", "", sym), "perf-PID.map"
        else:
            obj = dso.rsplit("/", 1)[-1]
        symbols[f"{sym[:90]} ({obj})"] += 1
    for pid in pids:  # oneDNN's map of the run's generated kernels, read now
        Path(f"/tmp/perf-{pid}.map").unlink(missing_ok=True)
    per_epoch = 1 / (frequency * len(steady))
    return {"wall": statistics.mean(end - begin for begin, end in steady),
            "cpu": samples * per_epoch,
            "parts": {k: v * per_epoch for k, v in parts.items()},
            "threads": {k: v * per_epoch for k, v in threads.items()},
            "symbols": {k: v * per_epoch for k, v in symbols.items()}}


def mean_of(runs: list[dict], key: str) -> dict:
    names = {name for run in runs for name in run[key]}
    return {name: statistics.mean(run[key].get(name, 0.0) for run in runs) for name in names}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:
        return wrapped_train(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path,
                        default=Path(tempfile.gettempdir()) / "dlscale-bench-overhead")
    parser.add_argument("--models", nargs="+", default=["SimpleCNN", "MobileNetV2"])
    parser.add_argument("--replicas", nargs="+", type=int, default=[1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=2048)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--frequency", type=int, default=499, help="samples per CPU second")
    parser.add_argument("--top", type=int, default=12, help="symbols listed")
    args = parser.parse_args(argv)
    if not shutil.which("perf"):
        raise SystemExit("error: perf not found: install Linux perf (Debian: linux-perf)")
    if "CLOCK_MONOTONIC" not in time.get_clock_info("perf_counter").implementation:
        raise SystemExit("error: time.perf_counter is not CLOCK_MONOTONIC here: the epochs' "
                         "windows and perf's samples would be on different clocks")
    archive, data = bench_overhead.prepared(args.work, args.images)
    began = time.time()
    print(f"machine: {platform.node()}, {os.cpu_count()} cores, {sys.executable}")
    print(f"{args.images} images at 32 px, batch {bench_overhead.BATCH} per replica, "
          f"{args.epochs} epochs "
          f"(steady: epochs 2-{args.epochs}), {args.rounds} round(s), perf cpu-clock at "
          f"{args.frequency} Hz\n")
    for model in args.models:
        for replicas in args.replicas:
            runs: dict[str, list[dict]] = {"bare": [], "dlscale": []}
            for round_ in range(args.rounds):
                for kind in (runs if round_ % 2 == 0 else list(reversed(runs))):
                    perf_data = args.work / f"perf-{model}-{replicas}-{kind}.data"
                    if kind == "bare":
                        command = bench_overhead.bare_command(archive, model, replicas,
                                                              args.epochs)
                        windows_file = None
                    else:
                        out = args.work / f"profile-{model}-{replicas}"
                        subprocess.run(["rm", "-rf", str(out)], check=True)
                        windows_file = args.work / "windows.json"
                        command = [sys.executable, str(Path(__file__).resolve()), "train",
                                   *bench_overhead.train_flags(data, out, model, replicas,
                                                               args.epochs)]
                    windows = profile(command, perf_data, windows_file, args.frequency)
                    runs[kind].append(attribute(perf_data, windows, args.frequency))
                    print(f"{model} x{replicas} round {round_ + 1} {kind}: wall "
                          f"{runs[kind][-1]['wall']:.3f} s, CPU {runs[kind][-1]['cpu']:.3f} s "
                          "per steady epoch", file=sys.stderr, flush=True)
            print_tables(model, replicas, runs, args.top)
    print(f"\n{time.time() - began:.0f} s in all")
    return 0


def print_tables(model: str, replicas: int, runs: dict[str, list[dict]], top: int) -> None:
    bare, dl = runs["bare"], runs["dlscale"]
    print(f"\n{model}, {replicas} replica(s), {len(bare)} runs each: seconds per steady epoch "
          "(means; per run in brackets)\n")
    print("| | bare | dlscale | difference |\n|---|---|---|---|")
    for label, key in (("wall", "wall"), ("CPU, all threads", "cpu")):
        b, d = (statistics.mean(r[key] for r in rs) for rs in (bare, dl))
        print(f"| {label} | {b:.3f} ({', '.join(f'{r[key]:.3f}' for r in bare)}) | "
              f"{d:.3f} ({', '.join(f'{r[key]:.3f}' for r in dl)}) | {d - b:+.3f} |")
    for key in ("threads", "parts"):
        b, d = mean_of(bare, key), mean_of(dl, key)
        for name in sorted(set(b) | set(d), key=lambda n: -max(b.get(n, 0), d.get(n, 0))):
            print(f"| {name} | {b.get(name, 0):.3f} | {d.get(name, 0):.3f} | "
                  f"{d.get(name, 0) - b.get(name, 0):+.3f} |")
    b, d = mean_of(bare, "symbols"), mean_of(dl, "symbols")
    diffs = sorted(set(b) | set(d), key=lambda n: -abs(d.get(n, 0) - b.get(n, 0)))[:top]
    print(f"\nThe {top} symbols whose CPU per steady epoch differs most\n")
    print("| symbol (object) | bare [s] | dlscale [s] | difference [s] |\n|---|---|---|---|")
    for name in diffs:
        print(f"| `{name}` | {b.get(name, 0):.4f} | {d.get(name, 0):.4f} | "
              f"{d.get(name, 0) - b.get(name, 0):+.4f} |")


if __name__ == "__main__":
    sys.exit(main())
