"""The demo as `make demo` runs it: config/demo.yaml through the local profile, then its
report, on Debian's real Fashion-MNIST."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from conftest import ROOT, needs_fashion, run_snakemake
from PIL import Image

pytestmark = [pytest.mark.workflow, pytest.mark.slow]


@needs_fashion
def test_the_demo_ends_with_tables_plots_and_a_report(tmp_path):
    demo = [f"--configfile={ROOT / 'config' / 'demo.yaml'}", "--profile",
            str(ROOT / "profiles" / "local")]
    run_snakemake(tmp_path, *demo, timeout=1200)
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert len(runs) == 6 and runs["counted"].all()  # 2 models x 1, 2, 4 replicas
    assert (tmp_path / "results/checks/points.txt").read_text().count("completed") == 6
    run_snakemake(tmp_path, *demo, "--report", str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text(errors="replace")
    for name in ("scaling.csv", "runs.csv", "failed.csv", "amdahl.csv", "references.csv",
                 "systems.csv", "speedup.png", "cost.png", "utilisation.png", "overview.png"):
        assert re.search(re.escape(name), html), name
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert table["cost_per_epoch"].notna().all() and table["target_reached"].notna().all()
    assert table.loc[table["gpus"] > 1, "serial_fraction"].notna().all()
    assert len(pd.read_csv(tmp_path / "results/tables/amdahl.csv")) == 2  # one per model
    assert table["cpu_percent"].notna().all() and "gpu_util_percent" in table
    assert table["gpu_util_percent"].isna().all()  # no GPU: nothing filled in
    systems = pd.read_csv(tmp_path / "results/tables/systems.csv")
    assert systems["runs"].sum() == 6 and systems["cpu_model"].notna().all()
    # each plot's PNG and SVG show the same crop (computed once, at the PNG's resolution:
    # the SVG's own was 1.3 % narrower relative to its height, with the demo's subtitles)
    for png in (tmp_path / "results/plots").glob("*.png"):
        width, height = Image.open(png).size
        svg = re.search(r'<svg [^>]*width="([\d.]+)pt" height="([\d.]+)pt"',
                        png.with_suffix(".svg").read_text())
        assert abs(float(svg[1]) / float(svg[2]) / (width / height) - 1) < 0.004, png.name
