#!/usr/bin/env python3
"""The prediction where the answer is known: the test cluster's two nodes (network
namespaces) with the link between them slowed by `tc tbf`, a study of MLP on 1 and 2
"GPUs" of one node and 2 on two nodes, for MultiWorkerMirroredStrategy and for Keras 3 on
JAX (gloo across processes), through profiles/slurm; the 2-node point is held out and
predicted from the one-node points and the network's probe. Then, at each further rate,
the probe alone is run again and the communication it predicts is printed. As in the
cluster test, the held-out point trains alone after the fit points and the probe, and the
nodes' jobs are favoured on the CPU (testcluster.sh favour; not with --shared-cpu);
--repeats runs each study again in a fresh folder.

  scripts/testcluster.sh start    # as root
  python bench/prediction_testbed.py [--rates 100mbit 50mbit] [--repeats N] [--shared-cpu]

Results: docs/benchmarks.md, "The prediction, held out".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
STUDIES = {"multiworker": "{epochs: 3, batch_per_gpu: 32, device: cpu}",
           "dataparallel": "{keras: 3, backend: jax, epochs: 3, batch_per_gpu: 32, device: cpu}"}
PREDICTION = "results/tables/prediction.csv"
FIT_RUNS = [f"results/runs/MLP/nodes1/gpus{gpus}/rep1/run.json" for gpus in (1, 2)]


def config(archive: Path, strategy: str) -> str:
    return (f"data: {{source: {archive}, md5: null, image_size: 32, shards: 4}}\n"
            f"sweep: {{models: [MLP], gpus: [1, 2], nodes: [1, 2], strategy: [{strategy}]}}\n"
            f"training: {STUDIES[strategy]}\n"
            "resources: {cpus_per_gpu: 2, mem_mb_per_gpu: 1000, runtime_min: 10}\n"
            "analysis: {accuracy_tolerance: 1.0, breakdown: 5}\nhistory: {path: null}\n")


def snakemake(folder: Path, *args: str) -> None:
    """Snakemake's own output goes to the study's snakemake.log."""
    with open(folder / "snakemake.log", "a") as log:
        subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
                        "--profile", str(ROOT / "profiles" / "slurm"), *args],
                       cwd=folder, check=True, stdout=log, stderr=subprocess.STDOUT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "scripts"),  # jobs' python:
                                PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}"))


def held_out(folder: Path) -> pd.Series:
    table = pd.read_csv(folder / PREDICTION)
    return table[table["role"] == "held out"].iloc[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", nargs="+", default=["100mbit", "50mbit"])
    ap.add_argument("--work", type=Path)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--shared-cpu", action="store_true",
                    help="the nodes' jobs share the CPU with everything else (no favour)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="dlscale-testbed-"))
    archive = work / "cifar.tar.gz"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_synthetic_cifar.py"),
                    "--train", "400", "--test", "100", "-o", str(archive)], check=True,
                   stdout=subprocess.DEVNULL)
    link = [str(ROOT / "scripts" / "testcluster.sh"), "link"]
    favour = [str(ROOT / "scripts" / "testcluster.sh"), "favour"]
    print("| strategy | set rate | held out | measured step [s] | predicted [s] | error | "
          "probed bus bandwidth [Mbit/s] | predicted communication [s] |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        if not args.shared_cpu:
            subprocess.run([*favour, "on"], check=True, stdout=subprocess.DEVNULL)
        for strategy, repeat in [(s, r) for r in range(args.repeats) for s in STUDIES]:
            folder = work / f"{strategy}-{repeat + 1}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.yaml").write_text(config(archive, strategy))
            for i, rate in enumerate(args.rates):
                subprocess.run([*link, rate], check=True, stdout=subprocess.DEVNULL)
                if i == 0:  # the fit points and the probe, then the held-out point alone
                    snakemake(folder, "--configfile=config.yaml", *FIT_RUNS,
                              f"results/network/{strategy}/nodes2.json")
                snakemake(folder, "--configfile=config.yaml",
                          *(["--forcerun", "probe_network"] if i else []), PREDICTION)
                row = held_out(folder)
                error = f"{row['error']:+.1%}" if i == 0 else "(measured at the first rate)"
                print(f"| {strategy} | {rate} | {row['gpus']}@{row['nodes']} | "
                      f"{row['measured_step_s']:.3f} | {row['predicted_step_s']:.3f} | "
                      f"{error} | {row['bus_bandwidth_inter_gbs'] * 8e3:.1f} | "
                      f"{row['comm_s']:.3f} |", flush=True)
    finally:
        subprocess.run([*link, "off"], stdout=subprocess.DEVNULL)
        subprocess.run([*favour, "off"], stdout=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
