"""Training points through `snakemake --profile profiles/local` (replicas on CPUs)."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, run_snakemake, write_config

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]


@pytest.fixture(scope="module")
def config(cifar_python, tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    return write_config(path, f"""
data: {{source: {cifar_python}, image_size: 32, shards: 2}}
sweep: {{models: [SimpleCNN], gpus: [1, 2], repeats: 1, strategy: [mirrored, multiworker]}}
training: {{epochs: 2, batch_per_gpu: 8, device: cpu}}
resources: {{cpus_per_gpu: 1, mem_mb_per_gpu: 1000, runtime_min: 10}}
""")


def test_one_point_trains_with_two_replicas_and_records_say_so(tmp_path, config):
    target = "results/runs/SimpleCNN/mirrored/gpus2/rep1/run.json"
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", target)
    run = json.loads((tmp_path / target).read_text())
    assert (run["status"], run["replicas"], run["strategy"]) == ("completed", 2, "mirrored")
    assert run["global_batch"] == 16 and run["lr"] == pytest.approx(0.02)
    assert len((tmp_path / target).with_name("epochs.jsonl").read_text().splitlines()) == 2
    # only that point ran: no other run folder exists
    assert sorted(p.parent.relative_to(tmp_path / "results/runs").as_posix()
                  for p in (tmp_path / "results/runs").rglob("run.json")) == [
        "SimpleCNN/mirrored/gpus2/rep1"]


def test_multiworker_point_starts_two_workers(tmp_path, config):
    target = "results/runs/SimpleCNN/multiworker/gpus2/rep1/run.json"
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", target)
    assert "rule train_workers" in proc.stdout
    run = json.loads((tmp_path / target).read_text())
    assert (run["strategy"], run["workers"], run["replicas"]) == ("multiworker", 2, 2)
