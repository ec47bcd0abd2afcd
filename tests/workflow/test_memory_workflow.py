"""Out of memory as a result, end to end (issue 98 item 2): under profiles/local a point
is held to the memory it asks for, as SLURM's cgroup holds a job; the batch that does
not fit is a row out_of_memory, the first page names the largest that fit, the workflow
succeeds and the next run does not train the point again (tests/configs/memory.yaml)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT, needs_fashion, run_snakemake

pytestmark = [pytest.mark.workflow, needs_fashion]
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]
CONFIG = f"--configfile={ROOT / 'tests' / 'configs' / 'memory.yaml'}"


def test_a_batch_beyond_the_memory_asked_for_is_a_result_and_the_page_names_what_fit(
        tmp_path):
    done = run_snakemake(tmp_path, *PROFILE, CONFIG, "all")  # exit status 0: a result
    assert "out of memory: SimpleCNN/batch_per_gpu-512/gpus1/rep1: a result" in done.stdout
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("batch_per_gpu")
    assert runs.loc[16, "status"] == "completed" and runs.loc[512, "status"] == "out_of_memory"
    assert "over the 1200 MiB it asks for" in runs.loc[512, "problem"]
    assert 0.3 < runs.loc[16, "memory_gib"] < 1200 / 1024  # what the fitting one held
    failed = pd.read_csv(tmp_path / "results/tables/failed.csv")
    assert list(zip(failed["global_batch"], failed["status"])) == [(512, "out_of_memory")]
    first = (tmp_path / "results/report/first-page.rst").read_text()
    fit = next(line for line in first.splitlines() if line.startswith("- SimpleCNN on 1 GPU"))
    assert "the largest batch per GPU that fit is 16 (" in fit
    assert fit.endswith("; 512 ran out of memory")
    assert (tmp_path / "results/plots/knobs.png").exists()
    # the next run: the point that did not fit is not trained again (same settings)
    again = run_snakemake(tmp_path, *PROFILE, CONFIG, "all", "-n")
    assert "Nothing to be done" in again.stdout, again.stdout[-3000:]
