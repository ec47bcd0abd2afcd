"""The demo as `make demo` runs it: config/demo.yaml through the local profile, then its
report, on Debian's real Fashion-MNIST."""

from __future__ import annotations

import html
import re
import shutil
import subprocess

import pandas as pd
import pytest
from conftest import ROOT, needs_fashion, run_snakemake
from PIL import Image

pytestmark = [pytest.mark.workflow, pytest.mark.slow]


def visible_text(report) -> str:
    """The text of the report's first page as headless Chromium (Debian's chromium) shows
    it once the report's scripts have run: the DOM after a virtual time budget, its tags,
    scripts and styles taken out."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is not installed (make sysdeps)"
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                          "--virtual-time-budget=20000", "--dump-dom", report.as_uri()],
                         capture_output=True, text=True, timeout=300, check=True).stdout
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))


@needs_fashion
def test_the_demo_ends_with_tables_plots_and_a_report(tmp_path):
    demo = [f"--configfile={ROOT / 'config' / 'demo.yaml'}", "--profile",
            str(ROOT / "profiles" / "local")]
    run_snakemake(tmp_path, *demo, timeout=1200)
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    # every column of a dlscale study's runs.csv is declared, with its unit (docs/analysis.md)
    from dlscale.core import columns

    declared = {c.name for c in columns.SCALING + columns.RUNS + columns.ACCOUNTED}
    assert [c for c in runs.columns if c not in declared] == []
    assert len(runs) == 6 and runs["counted"].all()  # 2 models x 1, 2, 4 replicas
    assert (tmp_path / "results/checks/points.txt").read_text().count("completed") == 6
    run_snakemake(tmp_path, *demo, "--report", str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text(errors="replace")
    for name in ("scaling.csv", "runs.csv", "failed.csv", "amdahl.csv", "references.csv",
                 "systems.csv", "speedup.png", "cost.png", "utilisation.png", "overview.png",
                 "breakdown.csv", "prediction.csv", "where_the_time_goes.png",
                 "prediction.png"):
        assert re.search(re.escape(name), html), name
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    # the report opens on the answer: its first page, as a browser shows it
    first = visible_text(tmp_path / "report.html")
    amdahl = pd.read_csv(tmp_path / "results/tables/amdahl.csv")
    assert "How this study scales" in first and "Failed points None" in first
    for model in ("MobileNetV2", "SimpleCNN"):
        top = table[(table["series"] == model) & (table["gpus"] == 4)].iloc[0]
        serial = amdahl.loc[amdahl["series"] == model, "serial_fraction"].iloc[0]
        assert (f"{model} 4 GPU(s) {top['speedup']:.3g} {top['efficiency']:.3g} "
                f"{serial:.3g}") in first, first[:3000]
    # why it scales: every point's window was read, each series has its prediction, and
    # the first page names the dominant cost at 4 GPUs and the efficiency at 8
    breakdown = pd.read_csv(tmp_path / "results/tables/breakdown.csv")
    assert len(breakdown) == 6 and breakdown["compute_share"].notna().all()
    assert breakdown.loc[breakdown["gpus"] > 1, "comm_total_share"].gt(0).all()
    prediction = pd.read_csv(tmp_path / "results/tables/prediction.csv")
    assert sorted(prediction.groupby("series")["gpus"].max()) == [16, 16]
    for model in ("MobileNetV2", "SimpleCNN"):
        assert f"{model} at 4 GPU(s): compute" in first
    assert first.count("predicted efficiency at 8 GPUs") == 2
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
