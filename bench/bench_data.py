#!/usr/bin/env python3
"""Data benchmarks, all in one run on one machine: preparation and reading of 60,000
CIFAR-layout images for a 128 px study, with the shards resized in preparation
(data.resize: prepare, 128 px shards) and at the dataset's own size (on_device, 32 px
shards), against the reference study's in-memory loader.

  python bench/bench_data.py [--work /tmp/dlscale-bench] [--images 60000] [--size 128]
                             [--baseline 62faf44] [--replicas 4]

Measured, each in its own process (so its peak RSS, VmHWM, is its own):
  - preparation in both modes, and the same preparation by the code of --baseline (the
    commit before issue 16, extracted with `git archive`), so old and new are compared
    in the same run;
  - the TFRecord reader in both modes, images/s in epochs 1 and 2, and peak RSS; and
    the on_device reader holding the decoded images in memory after its first epoch
    (what train.py does when they fit in data.cache_mb);
  - the reader feeding --replicas logical CPU devices through MirroredStrategy's
    distribute_datasets_from_function, as training does;
  - the on_device reader with the model's resize layer run on the host CPU (what a
    CPU-only run pays; on a GPU that layer runs on the GPU);
  - the study's loader (arrays in memory, tf.image.resize in map, cache()).
Prints a Markdown table with each figure absolute and as a ratio to the study's loader
in its first epoch. Targets (issue 16): preparation at least 2x the baseline; the
on_device reader at least 5x the prepare reader from its first epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
BASELINE = "62faf44"  # main before issue 16: prepare-only, the archive read twice
NATIVE = 32  # CIFAR-10's own size
BATCH = 256


def peak_rss_mb() -> float:
    """This process's peak RSS. VmHWM, not getrusage's ru_maxrss: on Linux the latter
    carries the parent's high-water mark over fork and exec."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def stage_prepare(work: Path, size: int, scripts: str) -> dict:
    """Preparation as the workflow's rule runs it, by the code in `scripts`."""
    sys.path.insert(0, scripts)
    import prepare_data
    import tensorflow  # noqa: F401  (imported before timing: start-up is reported apart)

    assert Path(prepare_data.__file__).parent == Path(scripts), prepare_data.__file__
    out = work / f"data{size}-{Path(scripts).parent.name}"
    t0 = time.perf_counter()
    manifest = prepare_data.prepare("cifar10", work / "cifar-10-python.tar.gz", out, size, 16)
    seconds = time.perf_counter() - t0
    images = sum(s["count"] for s in manifest["splits"].values())
    disk = sum(p.stat().st_size for p in out.glob("*.tfrecord"))
    return {"images": images, "seconds": seconds, "images_per_s": images / seconds,
            "peak_rss_mb": peak_rss_mb(), "disk_mb": disk / 1e6, "data": str(out)}


def timed_epochs(batches, steps: int, epochs: int = 2) -> list[float]:
    """Images/s of each of `epochs` passes of `steps` batches drawn from `batches`."""
    rates = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        for _ in range(steps):
            next(batches)
        rates.append(steps * BATCH / (time.perf_counter() - t0))
    return rates


def resized(batches, resize):
    """The reader's batches through `resize` (the images are computed, not just shaped)."""
    for images, _ in batches:
        yield resize(images)


def stage_read(data: Path, resize_to: int = 0, cache: bool = False) -> dict:
    """The training reader (make_dataset) alone; with resize_to, each batch also goes
    through the model's resize layer on this CPU; with cache, the images are held in
    memory after the first epoch."""
    import tensorflow as tf

    from dlscale.data.tfrecords import load_manifest, make_dataset

    steps = load_manifest(data)["splits"]["train"]["count"] // BATCH
    batches = iter(make_dataset(data, "train", BATCH, training=True, seed=1, cache=cache))
    if resize_to:
        from dlscale.train import keraschoice

        resize = keraschoice.keras().layers.Resizing(resize_to, resize_to, interpolation="bilinear",
                                           dtype="float32")
        batches = resized(batches, tf.function(resize))
    return {"epoch_images_per_s": timed_epochs(batches, steps), "peak_rss_mb": peak_rss_mb()}


def stage_replicas(data: Path, replicas: int) -> dict:
    """The reader feeding `replicas` logical CPU devices, as train.py's mirrored backend."""
    import tensorflow as tf

    from dlscale.data.tfrecords import load_manifest, make_dataset

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    strategy = tf.distribute.MirroredStrategy([f"/device:CPU:{i}" for i in range(replicas)])

    def train_input(context):
        return make_dataset(data, "train", context.get_per_replica_batch_size(BATCH),
                            training=True, seed=1 + context.input_pipeline_id,
                            num_shards=context.num_input_pipelines,
                            shard_index=context.input_pipeline_id)

    steps = load_manifest(data)["splits"]["train"]["count"] // BATCH
    batches = iter(strategy.distribute_datasets_from_function(train_input))
    return {"epoch_images_per_s": timed_epochs(batches, steps), "peak_rss_mb": peak_rss_mb()}


def stage_reference(work: Path, size: int) -> dict:
    """The study's loader: arrays in memory, tf.image.resize per image in map, cache()."""
    import tensorflow as tf

    from dlscale.data.sources import read_dataset

    splits = read_dataset("cifar10", work / "cifar-10-python.tar.gz")
    x, y = splits.images["train"], splits.labels["train"]
    ds = (tf.data.Dataset.from_tensor_slices((x, y))
          .map(lambda image, label: (tf.image.resize(image, (size, size)) / 255.0, label))
          .cache().shuffle(10000, seed=1).batch(BATCH).prefetch(tf.data.AUTOTUNE))
    rates = []
    for _ in range(2):
        t0, n = time.perf_counter(), 0
        for images, _ in ds:
            n += int(images.shape[0])
        rates.append(n / (time.perf_counter() - t0))
    return {"epoch_images_per_s": rates, "peak_rss_mb": peak_rss_mb()}


def child(*args: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--stage", *args],
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"stage {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def baseline_scripts(work: Path, revision: str) -> Path:
    """scripts/ of `revision`, extracted from this repository's history."""
    target = work / f"baseline-{revision}"
    if not (target / "scripts" / "prepare_data.py").is_file():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "scripts"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "scripts"


def run_stage(argv: list[str]) -> dict:
    stage, rest = argv[0], argv[1:]
    if stage == "prepare":
        return stage_prepare(Path(rest[0]), int(rest[1]), rest[2])
    if stage == "read":
        return stage_read(Path(rest[0]), int(rest[1]), rest[2:] == ["cache"])
    if stage == "replicas":
        return stage_replicas(Path(rest[0]), int(rest[1]))
    if stage == "reference":
        return stage_reference(Path(rest[0]), int(rest[1]))
    raise SystemExit(f"unknown stage {stage}")


def main(argv=None) -> int:
    if argv is None and sys.argv[1:2] == ["--stage"]:
        print(json.dumps(run_stage(sys.argv[2:])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench"))
    parser.add_argument("--images", type=int, default=60000, help="train + test images")
    parser.add_argument("--size", type=int, default=128, help="the model's input size")
    parser.add_argument("--baseline", default=BASELINE,
                        help="commit whose preparation is measured beside today's")
    parser.add_argument("--replicas", type=int, default=4)
    args = parser.parse_args(argv)

    import make_synthetic_cifar

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    archive = work / "cifar-10-python.tar.gz"
    test = args.images // 6
    make_synthetic_cifar.write_archive(archive, "python", args.images - test, test, seed=0)
    old = baseline_scripts(work, args.baseline)
    new = str(ROOT / "scripts")
    size, n = str(args.size), str(args.replicas)
    prep = {"old": child("prepare", str(work), size, str(old)),
            "prepare": child("prepare", str(work), size, new),
            "on_device": child("prepare", str(work), str(NATIVE), new)}
    data = {mode: prep[mode]["data"] for mode in ("prepare", "on_device")}
    reads = {
        "reader, prepare (128 px shards)": child("read", data["prepare"], "0"),
        "reader, on_device (32 px shards)": child("read", data["on_device"], "0"),
        "reader, on_device, held in memory after epoch 1": child("read", data["on_device"],
                                                                 "0", "cache"),
        f"reader -> {n} replicas, prepare": child("replicas", data["prepare"], n),
        f"reader -> {n} replicas, on_device": child("replicas", data["on_device"], n),
        "reader, on_device, + resize layer on the CPU": child("read", data["on_device"], size),
        "the study's loader (resize in map, cache)": child("reference", str(work), size),
    }
    study = reads["the study's loader (resize in map, cache)"]["epoch_images_per_s"][0]

    print(f"machine: {platform.node()}, {os.cpu_count()} cores, "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
          f"Python {platform.python_version()}; {date.today()}")
    print(f"command: python bench/bench_data.py --images {args.images} --size {args.size} "
          f"--baseline {args.baseline} --replicas {args.replicas}")
    print(f"archive: {archive.stat().st_size / 1e6:.0f} MB (python layout), {args.images} "
          f"images; model input {args.size} px; batch {BATCH}\n")
    print("| preparation | images/s | seconds | x baseline | shards on disk | peak RSS |")
    print("|---|---|---|---|---|---|")
    base = prep["old"]["images_per_s"]
    for label, key in ((f"baseline {args.baseline} (prepare, 128 px)", "old"),
                       ("prepare (128 px shards)", "prepare"),
                       ("on_device (32 px shards)", "on_device")):
        p = prep[key]
        print(f"| {label} | {p['images_per_s']:,.0f} | {p['seconds']:.1f} | "
              f"{p['images_per_s'] / base:.2f} | {p['disk_mb']:,.0f} MB | "
              f"{p['peak_rss_mb']:,.0f} MB |")
    print("\n| reading | epoch 1 images/s | epoch 2 images/s | epoch 1 x study's loader "
          "| peak RSS |\n|---|---|---|---|---|")
    for label, r in reads.items():
        e1, e2 = r["epoch_images_per_s"]
        print(f"| {label} | {e1:,.0f} | {e2:,.0f} | {e1 / study:.1f} | "
              f"{r['peak_rss_mb']:,.0f} MB |")
    ratio = (reads["reader, on_device (32 px shards)"]["epoch_images_per_s"][0]
             / reads["reader, prepare (128 px shards)"]["epoch_images_per_s"][0])
    print(f"\non_device / prepare reader, epoch 1: {ratio:.1f}x (target >= 5); "
          f"on_device preparation / baseline: {prep['on_device']['images_per_s'] / base:.1f}x,"
          f" prepare / baseline: {prep['prepare']['images_per_s'] / base:.2f}x (target >= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
