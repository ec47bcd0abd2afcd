#!/usr/bin/env python3
"""The prediction's held-out error on the real multi-GPU series kept in tests/data: each
series' largest point predicted from the smaller ones, through the workflow (external
logs, profiles/local, `results/tables/prediction.csv`), as a user would run it.

  python bench/prediction_heldout.py [--work DIR]

Results: docs/benchmarks.md, "The prediction, held out".
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
# the Dell files state no network: the figures of a PCIe A100 node and of HDR InfiniBand,
# as a user who knows the system would give them (assumed here)
DELL_NETWORK = ("{within_node: {latency_us: 10, bus_bandwidth_gbs: 20}, "
                "between_nodes: {latency_us: 10, bus_bandwidth_gbs: 24}}")


def studies() -> dict[str, str]:
    """Each study's config: the course's V100 node (step times only), the Dell MLPerf
    series over 1 to 3 nodes (with the network a user would give: it states none)."""
    study, mlperf = DATA / "reference-study", DATA / "mlperf"
    course = [f"  - {{log: {study / f'ResNet50_{n}gpu.out'}, model: ResNet50V2, gpus: {n}, "
              f"global_batch: {256 * n}, train_images: 50000, label: V100 course study}}"
              for n in (1, 2, 4)]
    dell = [f"  - {{log: {mlperf / name}, model: ResNet50, train_images: 1281167, "
            "label: Dell DSS8440 MLPerf}"
            for name in ("Dell_DSS8440x8A100-PCIE-40GB.txt",
                         "Dell_2xDSS8440x8A100-PCIE-40GB.txt",
                         "Dell_3xDSS8440x8A100-PCIE-40GB.txt")]
    head = "sweep: {models: []}\nhistory: {path: null}\n"
    return {"course": head + "external_runs:\n" + "\n".join(course) + "\n",
            "dell": head + f"analysis: {{network: {DELL_NETWORK}}}\n"
                           "external_runs:\n" + "\n".join(dell) + "\n"}


def prediction(work: Path, text: str):
    """prediction.csv of the study `text` (a config), run in `work`."""
    import pandas as pd

    work.mkdir(parents=True, exist_ok=True)
    (work / "study.yaml").write_text(text)
    snakemake = Path(sys.executable).with_name("snakemake")
    # the rules' `python` is this environment's, as `make` puts it first on PATH
    env = dict(os.environ, PATH=f"{snakemake.parent}{os.pathsep}{os.environ['PATH']}")
    subprocess.run([str(snakemake), "-s", str(ROOT / "Snakefile"), "--directory", str(work),
                    "--profile", str(ROOT / "profiles" / "local"),
                    f"--configfile={work / 'study.yaml'}", "results/tables/prediction.csv",
                    "-q"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=env)
    return pd.read_csv(work / "results" / "tables" / "prediction.csv")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="dlscale-heldout-"))
    print("| series | fit points (GPUs@nodes) | held out | measured step [s] | "
          "predicted [s] | error | links |")
    print("|---|---|---|---|---|---|---|")
    for name, text in studies().items():
        table = prediction(work / name, text)
        for series, part in table.groupby("series", sort=False):
            fit = part[part["role"] == "fit"]
            points = ", ".join(f"{g}@{n}" for g, n in zip(fit["gpus"], fit["nodes"],
                                                          strict=True))
            for row in part[part["role"] == "held out"].itertuples():
                print(f"| {series} | {points} | {row.gpus}@{row.nodes} | "
                      f"{row.measured_step_s:.4g} | {row.predicted_step_s:.4g} | "
                      f"{row.error:+.1%} | {row.link_source} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
