"""The results history through `snakemake --profile profiles/local`: three studies of one
point into one database outside results/; the third, made slower, fails its verdict;
`dlscale history` lists and filters them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, needs_fashion, run_snakemake, start_snakemake, write_config

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]
DLSCALE = Path(sys.executable).with_name("dlscale")  # the console command pip installed
# what a study that only adds to the history is asked for (rule all draws the plots too)
HISTORY_TABLES = ("results/tables/history.csv", "results/tables/history_studies.csv")


def dlscale(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(DLSCALE), *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


@needs_fashion
def test_studies_build_a_history_and_a_slower_one_is_flagged(tmp_path):
    db = tmp_path / "shared" / "history.sqlite"  # as on a shared file system
    config = write_config(tmp_path / "c.yaml", f"""
data: {{dataset: fashion_mnist, source: auto, image_size: 8, resize: prepare, shards: 1,
       limit_train: 64, limit_test: 32}}
sweep: {{models: [SimpleCNN], gpus: [1]}}
training: {{epochs: 2, batch_per_gpu: 32, device: cpu, telemetry_interval_s: 0}}
resources: {{cpus_per_gpu: 1, mem_mb_per_gpu: 1000, runtime_min: 10}}
analysis: {{accuracy_tolerance: 1.0}}
history: {{path: {db}, compare: 2, tolerance: 1.0, system: test VM}}
""")
    args = (*PROFILE, f"--configfile={config}")
    tables = tmp_path / "results" / "tables"
    for study in (1, 2, 3):
        # a new study of the same point: its runs and tables made again (the data kept)
        shutil.rmtree(tmp_path / "results" / "runs", ignore_errors=True)
        shutil.rmtree(tables, ignore_errors=True)
        # the third study's steps sleep 1 s each (2 per epoch): slower on any machine
        env = {"DLSCALE_TEST_SLOW_STEP_S": "1.0"} if study == 3 else None
        # the first two studies are asked for their history tables (their plots are not
        # looked at); the third for everything, plots of the earlier studies included
        targets = () if study == 3 else HISTORY_TABLES
        out = run_snakemake(tmp_path, *args, *targets, env=env).stdout
        assert "history " in out and "1 new point(s) of 1" in out, out[-4000:]
        verdicts = pd.read_csv(tables / "history.csv")
        assert list(verdicts["history_points"]) == [study - 1]  # the earlier studies only
        earlier = pd.read_csv(tables / "history_studies.csv")
        assert earlier["study"].nunique() == study - 1
    assert verdicts.loc[0, "verdict"] == "fail" and verdicts.loc[0, "change"] > 1.0
    assert "slower than the median" in out
    # the plots drew the two earlier studies: their labels are the history's dates
    assert (tmp_path / "results" / "plots" / "epoch_time.png").stat().st_size > 0
    listed = dlscale("history", "--db", str(db), "--csv", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = pd.read_csv(pd.io.common.StringIO(listed.stdout))
    assert list(rows["study"]) == [1, 2, 3] and set(rows["system"]) == {"test VM"}
    assert rows["epoch_time_s"].iloc[2] > rows["epoch_time_s"].iloc[:2].max()
    assert dlscale("history", "--db", str(db), "--gpus", "2", cwd=tmp_path).stdout.strip() \
        == "no point matches"
    assert "SimpleCNN" in dlscale("history", "--db", str(db), "--model", "SimpleCNN",
                                  "--since", "2000-01-01", cwd=tmp_path).stdout
    bad_date = dlscale("history", "--db", str(db), "--since", "yesterday", cwd=tmp_path)
    assert bad_date.returncode == 2 and bad_date.stderr.strip() == (
        "error: --since 'yesterday': expected a date as YYYY-MM-DD, e.g. 2026-11-25")

    # a damaged history costs the history step only: a warning, no comparison, the
    # plots drawn again without the history's lines, the study ends well
    damaged = tmp_path / "shared" / "damaged.sqlite"
    damaged.write_bytes(b"\x00 not a database " * 200)
    config.write_text(config.read_text().replace(str(db), str(damaged)))
    plots = tmp_path / "results" / "plots" / "epoch_time.png"
    drawn = plots.stat().st_mtime_ns
    out = run_snakemake(tmp_path, *args).stdout
    assert f"warning: the history was not used: {damaged}: file is not a database" in out
    assert pd.read_csv(tables / "history.csv").empty
    assert pd.read_csv(tables / "history_studies.csv").empty
    assert plots.stat().st_mtime_ns != drawn


@needs_fashion
def test_two_studies_started_together_into_one_history_keep_all_their_points(tmp_path):
    """The same study started at once from two working directories (two people of a
    group, one history on a shared file system): both studies and all their points."""
    db = tmp_path / "shared" / "history.sqlite"
    studies = []
    for name in ("alice", "bob"):
        folder = tmp_path / name
        folder.mkdir()
        config = write_config(folder / "c.yaml", f"""
data: {{dataset: fashion_mnist, source: auto, image_size: 8, resize: prepare, shards: 1,
       limit_train: 64, limit_test: 32}}
sweep: {{models: [SimpleCNN], gpus: [1, 2]}}
training: {{epochs: 1, batch_per_gpu: 32, device: cpu, telemetry_interval_s: 0}}
resources: {{cpus_per_gpu: 1, mem_mb_per_gpu: 1000, runtime_min: 10}}
analysis: {{accuracy_tolerance: 1.0, skip_epochs: 0, breakdown: 0}}
history: {{path: {db}, compare: 2, tolerance: 1.0, system: test VM}}
""")
        studies.append(start_snakemake(folder, *PROFILE, f"--configfile={config}",
                                       *HISTORY_TABLES))
    outputs = [study.communicate(timeout=900)[0] for study in studies]
    assert [study.returncode for study in studies] == [0, 0], outputs[0][-3000:]
    for out in outputs:
        assert "2 new point(s) of 2" in out, out[-3000:]
    listed = dlscale("history", "--db", str(db), "--csv", cwd=tmp_path)
    rows = pd.read_csv(pd.io.common.StringIO(listed.stdout))
    assert len(rows) == 4 and rows["study"].nunique() == 2
    assert sorted(rows["gpus"]) == [1, 1, 2, 2]
