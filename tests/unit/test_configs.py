"""Every config the project ships or tests with is a file that dry-runs (test_project.py
lints the workflow with the study's config)."""

from __future__ import annotations

import pytest

from conftest import ROOT, run_snakemake

CONFIGS = sorted([*(ROOT / "config").glob("*.yaml"), *(ROOT / "tests" / "configs").glob("*.yaml")])
CONFIGS = [c for c in CONFIGS if c.name != "schema.yaml"]


@pytest.mark.parametrize("config", CONFIGS, ids=[c.relative_to(ROOT).as_posix() for c in CONFIGS])
def test_config_dry_runs(config, tmp_path):
    dry = run_snakemake(tmp_path, "-n", f"--configfile={config}")
    assert "all" in dry.stdout.split("Job stats:")[1]
    assert not (tmp_path / "results").exists()
