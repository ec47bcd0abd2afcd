"""Out of memory as a result, end to end (issue 98 item 2): under profiles/local a point
is held to the memory it asks for, as SLURM's cgroup holds a job; the batch that does
not fit is a row out_of_memory, the first page names the largest that fit, the workflow
succeeds and the next run does not train the point again (tests/configs/memory.yaml);
the seed study's chapter 11 train.py over its batch the same way (chapter11.yaml)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT, needs_fashion, needs_torch, run_snakemake

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]
CONFIG = f"--configfile={ROOT / 'tests' / 'configs' / 'memory.yaml'}"


@needs_fashion
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


@needs_torch
def test_chapter_11s_train_py_unchanged_over_the_batch_names_the_largest_that_fit(tmp_path):
    """The chapter's train.py (examples/hpc4ai-chapter11, byte for byte) as a command,
    its batch a knob: 128 trains and is read epoch by epoch from its own lines; 4096 goes
    past the point's 1100 MiB and is out_of_memory; the first page names 128."""
    for name in ("examples", ".venv-torch"):
        (tmp_path / name).symlink_to(ROOT / name)
    config = f"--configfile={ROOT / 'tests' / 'configs' / 'chapter11.yaml'}"
    run_snakemake(tmp_path, *PROFILE, config, "all")
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("batch_per_gpu")
    assert runs.loc[128, "status"] == "completed"
    assert runs.loc[4096, "status"] == "out_of_memory", runs.loc[4096, "problem"]
    assert "over the 1100 MiB it asks for" in runs.loc[4096, "problem"]
    epochs = pd.read_csv(tmp_path / "results/tables/epochs.csv")
    assert len(epochs[epochs["run"] == runs.loc[128, "run"]]) == 2
    fit = next(line for line in (tmp_path / "results/report/first-page.rst").read_text()
               .splitlines() if line.startswith("- chapter11 on 1 GPU"))
    assert "the largest batch per GPU that fit is 128 (" in fit
    assert fit.endswith("; 4096 ran out of memory")
    # train.py prints `GPU memory reserved: 0 GB` on a CPU: the point's memory is its
    # largest process's peak resident memory (1.19 GiB here: with the libraries' pages,
    # which the hold's 1100 MiB leaves out)
    assert 0.3 < runs.loc[128, "memory_gib"] < 2, runs.loc[128, "memory_from"]
    assert "libraries' pages included" in runs.loc[128, "memory_from"]
    assert "GiB" in fit and "unknown" not in fit
    # its bf16 was never applied (torch disabled autocast on the CPU): said and flagged
    assert "torch disabled autocast" in runs.loc[128, "precision_note"]
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert scaling["flags"].str.contains("torch disabled autocast").all()
    assert "torch disabled autocast" in (tmp_path / "results/report/first-page.rst").read_text()
