"""sweep.knobs through `snakemake --profile profiles/local`: every combination a point
run with its values, a column per knob in runs.csv and scaling.csv, a series per
combination with its own speedup, and the first page by series (tests/configs/knobs.yaml)."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from conftest import ROOT, run_snakemake

pytestmark = pytest.mark.workflow


def test_each_knob_combination_is_a_series_with_its_columns(tmp_path):
    run_snakemake(tmp_path, "--profile", str(ROOT / "profiles" / "local"),
                  f"--configfile={ROOT / 'tests' / 'configs' / 'knobs.yaml'}", "all")
    tables = tmp_path / "results" / "tables"
    runs = pd.read_csv(tables / "runs.csv")
    assert list(runs.columns[:5]) == ["run", "source", "series", "attention", "batch_per_gpu"]
    assert sorted(zip(runs["attention"], runs["batch_per_gpu"], runs["gpus"])) == sorted(
        (a, b, g) for a in ("eager", "sdpa") for b in (2, 4) for g in (1, 2))
    assert (runs["status"] == "completed").all()
    # each point ran with its own values: the command printed them
    log = tmp_path / "results/runs/echo_knobs/attention-sdpa/batch_per_gpu-4/gpus2/rep1"
    assert "attention sdpa on 2 GPU(s)" in (log / "train.log").read_text()
    scaling = pd.read_csv(tables / "scaling.csv").set_index(["series", "gpus"])
    assert list(scaling.columns[:2]) == ["attention", "batch_per_gpu"]
    row = scaling.loc[("echo_knobs attention=sdpa batch_per_gpu=4", 2)]
    assert (row["attention"], row["batch_per_gpu"], row["global_batch"]) == ("sdpa", 4, 8)
    assert row["epoch_time_s"] == pytest.approx(0.4)  # its own epochs: 0.{batch}s
    assert scaling.loc[("echo_knobs attention=eager batch_per_gpu=2", 1), "epoch_time_s"] \
        == pytest.approx(0.2)
    assert len(scaling.index.get_level_values(0).unique()) == 4  # a series a combination
    first = (tmp_path / "results/report/first-page.rst").read_text()
    assert "echo\\_knobs attention=sdpa batch\\_per\\_gpu=4" in first
    # by knob (issues 97 and 98): each value's throughput per GPU (train_images 64 in
    # 0.4 s over 2 GPUs: 80), its time to solution (3 epochs of 0.4 s), the knobs figure
    # (on CPUs a command's memory is its largest process's peak: here the shell's)
    assert re.search(r"- attention, echo\\_knobs batch\\_per\\_gpu=4, 2 GPU\(s\): eager: 80 "
                     r"images/s per GPU, [\d.]+ GiB, 1\.2 s in all; sdpa: 80 images/s "
                     r"per GPU, [\d.]+ GiB, 1\.2 s in all", first), first
    assert (tmp_path / "results/plots/knobs.png").exists()
