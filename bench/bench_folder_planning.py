#!/usr/bin/env python3
"""Planning a study on a large folder of your own images, measured: --images files in 10
class folders (empty files named .png: planning lists them, it never opens them), then
`snakemake --profile profiles/local -n` of a one-point study on that folder, three times:
the first plan (it writes the folder's listing), a plan with nothing changed, and a plan
after one image was edited (the listing changes: the data is prepared again). Also the
listing alone (imagefolder.scan) in this process.

  python bench/bench_folder_planning.py [--work /tmp/dlscale-bench-plan] [--images 100000]

Prints a Markdown table row for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from dlscale.core.contract import MANIFEST  # noqa: E402


def write_files(folder: Path, count: int) -> None:
    for c in range(10):
        (folder / f"class{c}").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"class{i % 10}" / f"{i:07d}.png").touch()


def plan(work: Path, config: Path) -> tuple[float, str]:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
                           "--directory", str(work), "--profile", str(ROOT / "profiles/local"),
                           f"--configfile={config}", "-n"], capture_output=True, text=True,
                          env=env, check=True)
    stats = proc.stdout.split("Job stats:")[-1].split("total")[0]
    prepared = any(line.split()[:1] == ["prepare_dataset"] for line in stats.splitlines())
    return time.perf_counter() - began, "prepares" if prepared else "does not prepare"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-plan"))
    parser.add_argument("--images", type=int, default=100_000)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    images = args.work / "images"
    write_files(images, args.images)
    from dlscale.data.imagefolder import scan

    began = time.perf_counter()
    listing = scan(images, 0.2)
    scanned = time.perf_counter() - began
    config = args.work / "study.yaml"
    config.write_text(f"data: {{dataset: folder, source: '{images}', image_size: 32}}\n"
                      "sweep: {models: [SimpleCNN], gpus: [1]}\n"
                      "training: {epochs: 1, batch_per_gpu: 8, device: cpu}\n")
    first = plan(args.work, config)
    # as if the data had been prepared from this listing: a plan with nothing changed
    manifest = args.work / "results/data/folder-32px" / MANIFEST
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text("{}")
    same = plan(args.work, config)
    (images / "class3" / "0000003.png").write_bytes(b"edited")
    edited = plan(args.work, config)
    print(f"images: {args.images}, train/test: {listing.available}")
    print("| images | listing alone | first plan | nothing changed | one image edited |")
    print(f"| {args.images:,} | {scanned:.2f} s | {first[0]:.1f} s ({first[1]}) | "
          f"{same[0]:.1f} s ({same[1]}) | {edited[0]:.1f} s ({edited[1]}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
