#!/usr/bin/env python3
"""The GPU check: dlscale's built-in models trained on one GPU with Keras 3 on JAX.

What it measures, per model (SimpleCNN, ResNet50V2; dlscale's own builder,
`training.build_model`, uint8 images in, softmax out) and precision (float32,
mixed_bfloat16): images per second of `fit` at the study's batch, after one untimed epoch
that compiles; GPU utilisation, peak memory and energy per image from NVML over the timed
epochs (dlscale's telemetry sampler); then the batch search: the batch doubled until the
device runs out of memory or the time budget ends, with images/s at each batch. Input:
random uint8 images held in host memory (the synthetic input of `train.py
--synthetic`): what the GPU trains, not how fast shards are read. Then one of dlscale's
own points through scripts/train.py (the last model, mixed_bfloat16, random images in
shards read by dlscale's own reader, the profiled window, NVML telemetry): what a study's
point measures on this GPU.

It writes one JSON (--out) and prints the lines for docs/benchmarks.md, "GPUs".
`--cpu` rehearses the same code on the host's CPU with small sizes (a test runs it).
Nothing here imports TensorFlow: the lent GPU machines have none (bench/gpu_check.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

MODELS = ("SimpleCNN", "ResNet50V2")
PRECISIONS = ("float32", "mixed_bfloat16")
CLASSES = 10
# the seed study's 2026 edition: ResNet50V2, 128 px, one H100 (NGC TensorFlow 23.03),
# 14 s per epoch of 50,000 images at global batch 2,048
ANCHOR = {"model": "ResNet50V2", "image_size": 128, "batch": 2048, "images_per_s": 3571,
          "source": "the seed study's 2026 edition, one H100, NGC TensorFlow 23.03"}


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true",
                   help="rehearsal on the host's CPU: 32 px, batch 8, 3 steps an epoch")
    p.add_argument("--out", type=Path, required=True, help="the JSON to write")
    p.add_argument("--image-size", type=int, help="default 128 (GPU), 32 (--cpu)")
    p.add_argument("--batch", type=int, help="images a step at the study's point: default "
                   "256 (GPU), 8 (--cpu)")
    p.add_argument("--steps", type=int, help="steps an epoch: default 30 (GPU), 3 (--cpu)")
    p.add_argument("--epochs", type=int, default=3, help="1 untimed + the rest timed")
    p.add_argument("--max-batch", type=int, help="the batch search stops here: default 16384 "
                   "(GPU), 16 (--cpu)")
    p.add_argument("--budget-s", type=float, default=420.0,
                   help="seconds for the whole check; the batch search stops before a try "
                        "that would pass it (default 420)")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS,
                   help="the models to train, the last one searched (default: all)")
    p.add_argument("--keep-trace", action="store_true",
                   help="keep each point's trace beside --out (trace-MODEL-PRECISION"
                        ".xplane.pb) and dlscale's own point's (point/trace), to be stored "
                        "as a test's input")
    p.add_argument("--search-only", type=int, metavar="BATCH",
                   help="only the batch search (ResNet50V2, mixed_bfloat16), from BATCH: to "
                        "carry on where a check's budget stopped it")
    args = p.parse_args(argv)
    small = args.cpu
    args.image_size = args.image_size or (32 if small else 128)
    args.batch = args.batch or (8 if small else 256)
    args.steps = args.steps or (3 if small else 30)
    args.max_batch = args.max_batch or (16 if small else 16384)
    if args.epochs < 2:
        p.error(f"--epochs {args.epochs}: expected at least 2 (one untimed, one timed)")
    return args


def out_of_memory(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()


class Check:
    def __init__(self, args):
        self.args = args
        self.t0 = time.perf_counter()
        from dlscale.train import telemetry

        self.sampler = telemetry.Sampler(args.out.with_suffix(".telemetry.csv"), interval=0.2,
                                         gpus=not args.cpu).start()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def train(self, name: str, precision: str, batch: int, steps: int | None = None,
              trace: bool = True) -> dict:
        """One model at one batch: build, compile, fit `epochs` epochs of `steps` steps
        (default --steps); the first epoch (compilation) untimed."""
        import keras
        import numpy as np

        from dlscale.train import training

        args = self.args
        keras.utils.set_random_seed(0)
        keras.mixed_precision.set_global_policy(precision)
        size = args.image_size
        started = time.perf_counter()
        model = training.build_model(name, (size, size, 3), CLASSES)
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        rng = np.random.default_rng(0)
        images = batch * (steps or args.steps)
        x = rng.integers(0, 256, (images, size, size, 3), dtype=np.uint8)
        y = rng.integers(0, CLASSES, (images,), dtype=np.int64)
        marks: list[float] = []
        sampler = self.sampler

        class Edges(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                marks.append(sampler.now())

            def on_epoch_end(self, epoch, logs=None):
                marks.append(sampler.now())

        from dlscale.measure import profwindow
        from dlscale.train import keraschoice

        logdir = args.out.parent / f"trace-{name}-{precision}-{batch}"
        window = profwindow.make_callback(  # the untimed 1st epoch
            keraschoice.keras(), logdir, *profwindow.window_steps(
                steps or args.steps, 5 if trace else 0), marks=True,
            on_jax=keraschoice.trains_on_jax())
        history = model.fit(x, y, batch_size=batch, epochs=args.epochs, shuffle=False,
                            verbose=0, callbacks=[Edges(), window])
        epochs = [marks[i + 1] - marks[i] for i in range(0, len(marks), 2)]
        timed = epochs[1:]
        seconds = sorted(timed)[len(timed) // 2]
        used = sampler.summary(marks[2], marks[-1], images * len(timed))
        result = {"model": name, "precision": precision, "batch": batch, "image_size": size,
                  "params": int(model.count_params()),
                  "first_epoch_s": round(epochs[0], 3),
                  "epoch_s": [round(s, 4) for s in timed],
                  "images_per_s": round(images / seconds, 1),
                  "loss_last": float(history.history["loss"][-1]),
                  "wall_s": round(time.perf_counter() - started, 1), **used,
                  "breakdown": split_window(logdir, window, (
                      args.out.parent / f"trace-{name}-{precision}.xplane.pb"
                      if args.keep_trace else None))
                  if trace else None}
        del model
        keras.backend.clear_session()
        return result

    def search(self, name: str, precision: str, start: int, cost_s: float) -> dict:
        """The batch doubled from `start` until it does not fit, reaches --max-batch, or
        the next try (taking 1.5x the last one's seconds) would pass the budget."""
        tries, largest, stopped = [], None, "max_batch"
        batch = start
        while batch <= self.args.max_batch:
            if self.elapsed() + 1.5 * cost_s > self.args.budget_s:
                stopped = "budget"
                break
            try:  # about as many images an epoch as at the study's batch, at least 4 steps
                result = self.train(name, precision, batch,
                                    max(4, self.args.steps * self.args.batch // batch),
                                    trace=False)
            except Exception as exc:  # noqa: BLE001 (which ones mean out of memory: below)
                if not out_of_memory(exc):
                    raise
                tries.append({"batch": batch, "fits": False,
                              "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                stopped = "out_of_memory"
                break
            tries.append({"batch": batch, "fits": True, "images_per_s": result["images_per_s"],
                          "first_epoch_s": result["first_epoch_s"],
                          "gpu_mem_mb_peak": result.get("gpu_mem_mb_peak"),
                          "j_per_image": result.get("j_per_image")})
            largest, cost_s = batch, result["wall_s"]
            batch *= 2
        return {"model": name, "precision": precision, "largest_batch": largest,
                "stopped_by": stopped, "tries": tries}


def split_window(logdir: Path, window, keep: Path | None) -> dict:
    """The window's step split (dlscale.measure.stepsplit) on this real GPU trace, with what the
    trace holds per line (the ten longest event names), to check the split's rules
    against a real GPU's layout; the trace is deleted, or copied to `keep` (a file name) first."""
    import shutil
    from collections import Counter

    from dlscale.measure import profwindow, stepsplit

    traces = sorted(logdir.glob("plugins/profile/*/*.xplane.pb"))
    if window.error or not traces:
        return {"error": window.error or "no trace written"}
    events = profwindow.read_trace(traces[-1], on_jax=True)
    lines: dict[str, Counter] = {}
    for e in events:
        lines.setdefault(e.line, Counter())[e.name] += e.end - e.start
    steps = stepsplit.split(events)
    out = {"window_s": round(window.seconds, 3), "trace_bytes": traces[-1].stat().st_size,
           "steps": steps, "summary": stepsplit.summary(steps),
           **xprof_check(steps, traces[-1]),
           "lines": {line: [[n, round(ns / 1e6, 3), stepsplit.kind(
               stepsplit.Event(line, n, 0, 0))] for n, ns in c.most_common(10)]
               for line, c in lines.items()}}
    if keep is not None:  # None: not kept (a folder's name may hold a dot: not a test)
        shutil.copyfile(traces[-1], keep)
    shutil.rmtree(logdir, ignore_errors=True)
    return out


def dlscale_point(args, model: str, precision: str, batch: int) -> dict:
    """One of dlscale's own points through scripts/train.py, as a study's job runs it:
    Keras 3 on JAX, random images in shards at the check's size read by dlscale's own
    reader (no TensorFlow), the profiled window, NVML telemetry; 3 epochs of --steps
    steps, the first left out as a study leaves it."""
    import subprocess

    import numpy as np

    from dlscale.data import tfrecords

    data, out = args.out.parent / "point-data", args.out.parent / "point"
    size, rng = args.image_size, np.random.default_rng(0)
    data.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split, count in (("train", batch * args.steps), ("test", batch)):
        images = rng.integers(0, 256, (count, size, size, 3), dtype=np.uint8)
        shards = tfrecords.write_split(images, rng.integers(0, CLASSES, count), data, split,
                                       4, size)
        splits[split] = {"count": count, "shards": shards}
    (data / "manifest.json").write_text(json.dumps({
        "dataset": "random", "image_shape": [size, size, 3], "native_shape": [size, size, 3],
        "num_classes": CLASSES, "splits": splits}))
    command = [sys.executable, str(ROOT / "scripts" / "train.py"), "--data-dir", str(data),
               "--out", str(out), "--model", model, "--device", "cpu" if args.cpu else "gpu",
               "--gpus", "1", "--keras", "3", "--backend", "jax", "--epochs", "3",
               "--batch-per-gpu", str(batch), "--precision", precision, "--image-size",
               str(size), "--breakdown-steps", "5", "--telemetry-interval", "0.2"
               ] + (["--keep-trace"] if args.keep_trace else [])
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    run = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    epochs = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()
              if line] if (out / "epochs.jsonl").exists() else []
    window = (json.loads((out / "breakdown.json").read_text())
              if (out / "breakdown.json").exists() else {})
    return {"model": model, "precision": precision, "batch": batch, "image_size": size,
            "exit_status": done.returncode, "status": run.get("status"),
            "failure": run.get("failure") or done.stderr[-600:] if done.returncode else None,
            "epoch_s": [e["seconds"] for e in epochs],
            "images_per_s": round(epochs[-1]["images"] / min(e["seconds"] for e in epochs[1:]),
                                  1) if len(epochs) > 1 else None,
            "train_input": run.get("train_input"), "versions": run.get("versions"),
            "window": window.get("summary"), "window_notes": window.get("notes"),
            "xprof": window.get("xprof"), "wall_s": round(time.perf_counter() - started, 1)}


def xprof_check(steps: list[dict], trace: Path) -> dict:
    """xprof's own offline step breakdown of the same trace beside dlscale's split
    (dlscale.measure.xprofcheck), where xprof is installed; its failure is a note."""
    from dlscale.measure import xprofcheck

    if not xprofcheck.available():
        return {"xprof": None, "xprof_notes": ["xprof is not installed"]}
    try:
        theirs = xprofcheck.steps(trace)
        totals, notes = xprofcheck.compare(steps, theirs)
    except Exception as exc:  # noqa: BLE001 (a note in the check, as in a point's record)
        return {"xprof": None, "xprof_notes": [f"xprof failed: {type(exc).__name__}: {exc}"]}
    return {"xprof": totals, "xprof_steps": theirs, "xprof_notes": notes}


def system(cpu: bool) -> dict:
    import jax
    import jaxlib
    import keras

    from dlscale.train import telemetry

    return {"host": platform.node(), "python": platform.python_version(),
            "jax": jax.__version__, "jaxlib": jaxlib.__version__, "keras": keras.__version__,
            "devices": [str(d) for d in jax.devices()], "rehearsal": cpu,
            "gpus": None if cpu else telemetry.describe_gpus()}


def markdown(report: dict) -> list[str]:
    """The lines for docs/benchmarks.md, "GPUs"."""
    s = report["system"]
    gpus = s.get("gpus") or {}
    lines = [f"Device: {', '.join(s['devices'])}; GPUs: {json.dumps(gpus)}; JAX {s['jax']}, "
             f"Keras {s['keras']}, Python {s['python']}.", "",
             "| model | precision | batch | images/s | first epoch s | GPU util % | "
             "GPU mem MiB peak | J/image |", "|---|---|---|---|---|---|---|---|"]
    for r in report["points"]:
        lines.append(f"| {r['model']} | {r['precision']} | {r['batch']} | {r['images_per_s']} | "
                     f"{r['first_epoch_s']} | {r.get('gpu_util_percent', '-')} | "
                     f"{r.get('gpu_mem_mb_peak', '-')} | {r.get('j_per_image', '-')} |")
    for r in report["points"]:  # the step split of each point's traced steps
        w = (r.get("breakdown") or {}).get("summary") or {}
        if w:
            lines.append(f"\n{r['model']} {r['precision']}: traced step {w['step_s']:.4f} s; "
                         + ", ".join(f"{k.removesuffix('_s')} {w[k] / w['wall_s']:.0%}"
                                     for k in ("compute_s", "comm_exposed_s", "input_s",
                                               "other_s")))
            x = r["breakdown"].get("xprof") or {}
            notes = "; ".join(r["breakdown"].get("xprof_notes") or []) or "agrees"
            lines.append(f"xprof, the same {x['steps']} steps: {x['step_s']:.4f} s in all "
                         f"(dlscale {x['dlscale_step_s']:.4f} s), device compute "
                         f"{x['device_compute_s']:.4f} s, collectives "
                         f"{x['device_collectives_s']:.4f} s ({notes})" if x else
                         f"xprof: {notes}")
    for name, ratio in report["bf16_speedup"].items():
        lines.append(f"\n{name}: mixed_bfloat16 over float32 at batch "
                     f"{report['settings']['batch']}: {ratio}x")
    if point := report.get("dlscale_point"):
        lines.append(f"\ndlscale's own point (train.py, {point['model']} {point['precision']}, "
                     f"batch {point['batch']}, shards read without TensorFlow): "
                     f"{point['status']}, {point['images_per_s']} images/s, epochs "
                     f"{point['epoch_s']} s")
    search = report["batch_search"]
    lines.append(f"\nBatch search ({search['model']} {search['precision']}): largest batch "
                 f"that trained {search['largest_batch']}, stopped by {search['stopped_by']}; "
                 + ", ".join(f"{t['batch']}: {t.get('images_per_s', 'out of memory')}"
                             for t in search["tries"]) + " images/s")
    lines.append(f"Anchor: {ANCHOR['images_per_s']} images/s ({ANCHOR['source']}, batch "
                 f"{ANCHOR['batch']}). Check took {report['wall_s']} s.")
    return lines


def main(argv=None) -> int:
    args = parse(argv)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # NVML sees what it uses
    if args.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    from dlscale.train import keraschoice

    keraschoice.use_keras(3, "jax")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    check = Check(args)
    report = {"system": system(args.cpu), "settings": {k: (str(v) if isinstance(v, Path) else v)
                                                       for k, v in vars(args).items()},
              "anchor": ANCHOR, "points": []}
    if args.search_only:
        report["batch_search"] = check.search(args.models[-1], PRECISIONS[-1], args.search_only,
                                              60.0)
        report["bf16_speedup"] = {}
    else:
        for name in args.models:
            for precision in PRECISIONS:
                report["points"].append(check.train(name, precision, args.batch))
                print(json.dumps(report["points"][-1]), flush=True)
        report["dlscale_point"] = dlscale_point(args, args.models[-1], PRECISIONS[-1],
                                                args.batch)
        print(json.dumps(report["dlscale_point"]), flush=True)
        by = {(r["model"], r["precision"]): r["images_per_s"] for r in report["points"]}
        report["bf16_speedup"] = {m: round(by[(m, "mixed_bfloat16")] / by[(m, "float32")], 2)
                                  for m in args.models}
        last = report["points"][-1]
        report["batch_search"] = check.search(last["model"], last["precision"],
                                              args.batch * 2, last["wall_s"])
    check.sampler.stop()
    report["wall_s"] = round(check.elapsed(), 1)
    report["tensorflow_imported"] = "tensorflow" in sys.modules
    report["markdown"] = markdown(report)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print("\n".join(report["markdown"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
