"""What a user sees when points fail, through `snakemake --profile profiles/local`."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess

import pandas as pd
import pytest
import yaml
from conftest import ROOT, needs_fashion, run_snakemake, write_config

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]
FAILURES = ROOT / "tests" / "configs" / "failures.yaml"


def job_counts(output: str) -> dict[str, int]:
    stats = output.split("Job stats:")[1].split("total")[0]
    return {line.split()[0]: int(line.split()[1]) for line in stats.splitlines()
            if re.fullmatch(r"[a-z_]+\s+\d+", line.strip())}


def report_tables(html: str) -> str:
    """The CSV files a Snakemake report embeds (base64 data URIs), as text."""
    return "\n".join(base64.b64decode(b).decode("utf-8", "replace") for b in
                     re.findall(r"data:text/csv[^,\"']*;base64,([A-Za-z0-9+/=]+)", html))


@needs_fashion
def test_a_failed_point_is_listed_everywhere_and_rerun_alone(tmp_path):
    first = run_snakemake(tmp_path, *PROFILE, f"--configfile={FAILURES}", check=False)
    assert first.returncode != 0
    assert "failed point: SimpleCNN/gpus1/rep1: failed: loss became NaN" in first.stdout
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv").set_index("run")
    assert runs.loc["MLP/gpus1/rep1", "counted"]
    assert runs.loc["SimpleCNN/gpus1/rep1", "status"] == "failed"
    failed = pd.read_csv(tmp_path / "results/tables/failed.csv")
    assert list(failed["run"]) == ["SimpleCNN/gpus1/rep1"] and "NaN" in failed["problem"][0]
    assert list(pd.read_csv(tmp_path / "results/tables/scaling.csv")["series"]) == ["MLP"]
    for name in ("epoch_time", "speedup", "overview"):
        assert (tmp_path / f"results/plots/{name}.png").stat().st_size > 10_000
    assert not (tmp_path / "results/checks/points.txt").exists()
    record = tmp_path / "results/runs/SimpleCNN/gpus1/rep1/run.json"
    assert record.exists()  # the failed point's record survived

    run_snakemake(tmp_path, *PROFILE, f"--configfile={FAILURES}", "--report",
                  str(tmp_path / "report.html"))
    embedded = report_tables((tmp_path / "report.html").read_text(errors="replace"))
    assert "SimpleCNN/gpus1/rep1,dlscale" in embedded and "loss became NaN" in embedded

    dry = run_snakemake(tmp_path, *PROFILE, f"--configfile={FAILURES}", "-n")
    assert job_counts(dry.stdout)["train"] == 1
    assert "point SimpleCNN/gpus1/rep1 ended failed" in dry.stdout

    done = tmp_path / "results/runs/MLP/gpus1/rep1/run.json"
    kept = done.stat().st_mtime_ns

    # the cause fixed, naming the failed point reruns it alone; then the study is whole
    fixed = yaml.safe_load(FAILURES.read_text())
    del fixed["models"]
    fixed_config = write_config(tmp_path / "fixed.yaml", yaml.safe_dump(fixed))
    one = run_snakemake(tmp_path, *PROFILE, f"--configfile={fixed_config}",
                        "results/runs/SimpleCNN/gpus1/rep1/run.json")
    assert job_counts(one.stdout) == {"train": 1}
    assert done.stat().st_mtime_ns == kept
    run_snakemake(tmp_path, *PROFILE, f"--configfile={fixed_config}")
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert runs["counted"].all() and len(runs) == 2
    assert pd.read_csv(tmp_path / "results/tables/failed.csv").empty
    assert (tmp_path / "results/checks/points.txt").read_text().count("completed") == 2


def test_a_checkout_and_a_working_folder_with_spaces_and_shell_characters(tmp_path,
                                                                          cifar_python):
    checkout = tmp_path / "dl scale's $HOME"
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    for name in files:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, checkout / name)
    work = tmp_path / "work dir $(touch PWNED)"
    data = tmp_path / "my data"
    data.mkdir()
    archive = shutil.copy(cifar_python, data / "cifar 10.tar.gz")
    label = "$x$ and $$ 50%_{y} $(touch PWNED)"
    logs = ROOT / "tests" / "data" / "reference-study"
    config = write_config(tmp_path / "c.yaml", yaml.safe_dump({
        "data": {"source": str(archive), "image_size": 32, "shards": 2},
        # one point: every path and label reaches the shell the same way for each
        "sweep": {"models": ["SimpleCNN"], "gpus": [2]},
        "training": {"epochs": 2, "batch_per_gpu": 8, "device": "cpu"},
        "resources": {"cpus_per_gpu": 1, "mem_mb_per_gpu": 1000, "runtime_min": 10},
        "analysis": {"accuracy_tolerance": 1.0},
        "external_runs": [{"log": str(logs / f"ResNet50_{g}gpu.out"), "model": "ResNet50V2",
                           "gpus": g, "global_batch": 256 * g, "train_images": 50000,
                           "label": label} for g in (1, 2)]}))
    workflow = ["--profile", str(checkout / "profiles" / "local"), f"--configfile={config}"]
    snakefile = checkout / "Snakefile"
    run_snakemake(work, *workflow, snakefile=snakefile)
    run_snakemake(work, *workflow, "--report", str(work / "report.html"), snakefile=snakefile)
    assert (work / "report.html").stat().st_size > 100_000
    table = pd.read_csv(work / "results/tables/scaling.csv")
    assert set(table["series"]) == {"SimpleCNN", label}
    assert (work / "results/plots/speedup.svg").read_text().count("50%_{y}") >= 1
    assert not list(tmp_path.rglob("PWNED")) and not list(ROOT.rglob("PWNED"))


def test_a_url_whose_file_name_holds_shell_characters_is_refused_at_planning(tmp_path):
    config = write_config(tmp_path / "c.yaml", yaml.safe_dump({
        "data": {"source": "https://example.invalid/dl/x$(touch PWNED).tar.gz"},
        "sweep": {"models": ["SimpleCNN"]}}))
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", check=False)
    assert proc.returncode != 0
    assert ("the file name 'x$(touch PWNED).tar.gz' may hold only letters, digits and . _ + -"
            in proc.stdout)
    assert not list(tmp_path.rglob("PWNED")) and not (tmp_path / "results").exists()


def test_a_global_batch_beyond_the_training_images_fails_before_any_job(tmp_path, cifar_python):
    config = write_config(tmp_path / "c.yaml", yaml.safe_dump({
        "data": {"source": str(cifar_python), "image_size": 32, "limit_train": 320},
        "sweep": {"models": ["SimpleCNN"], "gpus": [1, 2]},
        "training": {"batch_per_gpu": 200, "device": "cpu"}}))
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", check=False)
    assert proc.returncode != 0
    assert ("point SimpleCNN/gpus2/rep1: global batch 400 (batch_per_gpu 200 x 2 GPUs) is larger "
            "than the 320 training images of data.limit_train") in proc.stdout
    assert not (tmp_path / "results").exists()
