"""One script's outputs from two clusters, given one label as a user would for "my DDP
script" (issue 99, item 5), through `snakemake --profile profiles/local`: the job
scripts' echo of SLURM_CLUSTER_NAME makes a series per cluster, each run says why, and no
speedup is drawn from one machine's point to the other's. The outputs are real captures
of the SLURM test cluster under two names (tests/data/own-scripts: banner_2nodes.out on
dlscaletest, banner_1node_second.out on dlscalesecond)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT, run_snakemake, write_config

pytestmark = pytest.mark.workflow
SCRIPTS = ROOT / "tests" / "data" / "own-scripts"


def test_one_label_over_two_clusters_is_a_series_per_cluster(tmp_path):
    # (a batch of 32 a process; one process under srun -l states no GPU count)
    entries = "".join(f"  - {{log: {SCRIPTS}/{name}, model: OwnTrain, label: my ddp, "
                      f"train_images: 4096{more}}}\n"
                      for name, more in (("banner_1node_second.out", ", gpus: 1, global_batch: 32"),
                                         ("banner_2nodes.out", ", global_batch: 64")))
    config = write_config(tmp_path / "c.yaml",
                          f"sweep: {{models: []}}\nexternal_runs:\n{entries}")
    run_snakemake(tmp_path, "--profile", str(ROOT / "profiles" / "local"),
                  f"--configfile={config}", "all")
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert sorted(table["series"]) == ["my ddp (dlscalesecond)", "my ddp (dlscaletest)"]
    two = table.set_index("series").loc["my ddp (dlscaletest)"]
    assert (two["gpus"], two["nodes"], two["slurm_cluster"]) == (2, 2, "dlscaletest")
    # no speedup from one cluster's point to the other's: the 2-GPU point has no base
    one = table.set_index("series").loc["my ddp (dlscalesecond)"]
    assert one["speedup"] == 1 and pd.isna(two["speedup"]) and pd.isna(two["base_gpus"])
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert runs["notes"].str.contains("clusters dlscalesecond, dlscaletest").all()
