"""Tables, plots and report through snakemake, for external logs and for a whole sweep."""

from __future__ import annotations

import pandas as pd
import pytest

from conftest import IN_CI, ROOT, run_snakemake, write_config

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]
STUDY = ROOT / "tests" / "data" / "reference-study"
PLOTS = ["epoch_time", "throughput", "speedup", "efficiency", "accuracy", "overview"]


def test_external_logs_alone_reproduce_the_published_study(tmp_path):
    runs = "\n".join(
        f"  - {{log: {STUDY}/ResNet50_{g}gpu.out, model: ResNet50V2, gpus: {g}, "
        f"global_batch: {256 * g}, train_images: 50000, label: \"Bob's $5 study\"}}" for g in (1, 2, 4))
    config = write_config(tmp_path / "c.yaml", f"sweep: {{models: []}}\nexternal_runs:\n{runs}\n")
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    assert "rule train" not in proc.stdout and "prepare_dataset" not in proc.stdout
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(table["series"].unique()) == ["Bob's $5 study"]  # quoted for the shell
    assert list(table["epoch_time_s"]) == [45, 24, 12]
    assert list(table["speedup"]) == [1, 1.875, 3.75]
    assert list(table["efficiency"]) == [1, 0.9375, 0.9375]
    assert [round(v) for v in table["images_per_s"]] == [1111, 2083, 4167]
    for name in PLOTS:
        assert (tmp_path / f"results/plots/{name}.png").stat().st_size > 10_000
        assert (tmp_path / f"results/plots/{name}.svg").exists()


def test_missing_external_log_fails_before_any_job(tmp_path):
    config = write_config(tmp_path / "c.yaml", "sweep: {models: []}\nexternal_runs:\n"
                          "  - {log: /no/such.out, model: M, gpus: 1, global_batch: 8, "
                          "train_images: 80}\n")
    proc = run_snakemake(tmp_path, "-n", f"--configfile={config}", check=False)
    assert proc.returncode != 0 and "external_runs: log '/no/such.out' does not exist" in proc.stdout


def test_whole_sweep_ends_with_tables_plots_and_report(tmp_path, cifar_python):
    config = write_config(tmp_path / "c.yaml", f"""
data: {{source: {cifar_python}, image_size: 32, shards: 2}}
sweep: {{models: [SimpleCNN], gpus: [1, 2], repeats: 2}}
training: {{epochs: 3, batch_per_gpu: 8, device: cpu}}
resources: {{cpus_per_gpu: 1, mem_mb_per_gpu: 1000, runtime_min: 10}}
analysis: {{accuracy_tolerance: 1.0}}
""")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert len(runs) == 4 and runs["counted"].all()
    assert set(runs["run"]) == {f"SimpleCNN/gpus{g}/rep{r}" for g in (1, 2) for r in (1, 2)}
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert list(table["gpus"]) == [1, 2] and list(table["repeats"]) == [2, 2]
    assert list(table["epochs_used"]) == [4, 4]  # 2 repeats x (3 epochs - 1 skipped)
    assert table["epoch_time_ci95"].notna().all()
    epochs = pd.read_csv(tmp_path / "results/tables/epochs.csv")
    assert len(epochs) == 12
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", "--report",
                  str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text(errors="replace")
    assert "speedup" in html and "scaling.csv" in html


@pytest.mark.skipif(not __import__("shutil").which("dot") and not IN_CI,
                    reason="graphviz's dot is missing (make sysdeps)")
def test_dag_and_rulegraph_pictures_from_a_dry_run(tmp_path):
    import subprocess

    for kind in ("--dag", "--rulegraph"):
        graph = run_snakemake(tmp_path, kind, "dot", f"--configfile={ROOT}/config/demo.yaml")
        dot_text = graph.stdout[graph.stdout.index("digraph"):]
        svg = subprocess.run(["dot", "-Tsvg"], input=dot_text, capture_output=True, text=True,
                             check=True).stdout
        assert "<svg" in svg and "train" in svg and "plot_scaling" in svg
    assert not (tmp_path / "results").exists()  # nothing ran
