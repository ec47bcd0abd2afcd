"""Training points through `snakemake --profile profiles/local` (replicas on CPUs)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import ROOT, comparison_config, run_snakemake, write_config

from dlscale.core.contract import KEPT

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]


@pytest.fixture(scope="module")
def config(cifar_python, tmp_path_factory):
    path = tmp_path_factory.mktemp("cfg") / "config.yaml"
    return write_config(path, f"""
data: {{source: {cifar_python}, image_size: 48, shards: 2, cache_mb: 0}}
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
    # data.resize: on_device (the default): 32 px shards, the model resizes to 48 px
    assert (run["resize"], run["image_size"]) == ("on_device", 48)
    assert run["dataset"]["dir"] == "results/data/cifar10-32px"
    assert run["train_input"] == "files"  # data.cache_mb: 0 reached train.py
    # only that point ran: no other run folder exists (completed/: its kept copy)
    assert sorted(p.parent.relative_to(tmp_path / "results/runs").as_posix()
                  for p in (tmp_path / "results/runs").rglob("run.json")
                  if p.parent.name != KEPT) == ["SimpleCNN/mirrored/gpus2/rep1"]
    assert (tmp_path / f"results/runs/SimpleCNN/mirrored/gpus2/rep1/{KEPT}/run.json").exists()
    # the all-reduce timed at every size after training, one graph for all sizes (one a
    # size, before: TensorFlow's "triggered tf.function retracing" in the log, 1.6 s of CPU)
    window = json.loads((tmp_path / target).with_name("breakdown.json").read_text())
    assert len(window["collective"]["seconds"]) == len(window["collective"]["bytes"]) > 1
    log = (tmp_path / "logs/train/SimpleCNN/mirrored/gpus2/rep1.log").read_text()
    assert "retracing" not in log


def test_multiworker_point_starts_two_workers(tmp_path, config):
    target = "results/runs/SimpleCNN/multiworker/gpus2/rep1/run.json"
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", target)
    assert "rule train:" in proc.stdout and "mpi=srun" in proc.stdout
    run = json.loads((tmp_path / target).read_text())
    assert (run["strategy"], run["workers"], run["replicas"]) == ("multiworker", 2, 2)
    # the chief's window holds the collective ops (CollectiveReduceV2) of the two workers,
    # and both took part in the all-reduce timed after training
    window = json.loads((tmp_path / target).with_name("breakdown.json").read_text())
    # its first epoch has 6 steps: the window says it traced 4 of the 5 asked
    assert window["communication"] == "separable" and window["notes"] == [
        "the first epoch has 6 step(s): the window traced 4 of the 5 asked "
        "(analysis.breakdown), from step 3"]
    assert 0 < window["summary"]["comm_total_s"] < window["summary"]["wall_s"]
    assert len(window["collective"]["seconds"]) == len(window["collective"]["bytes"]) > 1


def test_fast_config_runs_end_to_end_on_cpu(tmp_path, cifar_python):
    import yaml

    fast = yaml.safe_load((ROOT / "config" / "fast.yaml").read_text())
    fast.update({"data": {"source": str(cifar_python), "image_size": 32, "shards": 2},
                 "sweep": {"models": ["SimpleCNN"], "gpus": [1, 2]},
                 "resources": {"cpus_per_gpu": 1, "mem_mb_per_gpu": 1000, "runtime_min": 10}})
    fast["training"].update({"epochs": 2, "batch_per_gpu": 8, "device": "cpu"})
    config = write_config(tmp_path / "fast.yaml", yaml.safe_dump(fast))
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    one = json.loads((tmp_path / "results/runs/SimpleCNN/gpus1/rep1/run.json").read_text())
    # mixed_auto: bfloat16 where this machine's CPU has its instructions, else float32
    from dlscale.train.telemetry import cpu_flags
    from dlscale.train.training import resolve_precision

    assert (one["precision"], one["precision_asked"], one["xla"], one["warmup_epochs"]) == (
        resolve_precision("mixed_auto", "cpu", cpu_flags()), "mixed_auto", True, 1)
    two = json.loads((tmp_path / "results/runs/SimpleCNN/gpus2/rep1/run.json").read_text())
    assert (two["xla_asked"], two["xla"]) == (True, False)
    assert "several logical CPU devices" in two["xla_note"]
    assert (tmp_path / "results/plots/speedup.png").exists()


def test_batch_auto_plans_one_search_per_model_before_training(tmp_path, cifar_python):
    config = write_config(tmp_path / "auto.yaml", f"""
data: {{source: {cifar_python}, image_size: 32}}
sweep: {{models: [SimpleCNN], gpus: [1, 2]}}
training: {{batch_per_gpu: auto, device: gpu}}
""")
    proc = run_snakemake(tmp_path, "-n", f"--configfile={config}")
    stats = proc.stdout.split("Job stats:")[1].split("total")[0]
    assert "find_batch_size        1" in stats and "train                  2" in stats


def test_the_batch_search_asks_for_its_models_own_resources(tmp_path, cifar_python):
    config = write_config(tmp_path / "auto.yaml", f"""
data: {{source: {cifar_python}, image_size: 32}}
sweep: {{models: [SimpleCNN], gpus: [1]}}
training: {{batch_per_gpu: auto, device: gpu}}
models: {{SimpleCNN: {{cpus_per_gpu: 3, mem_mb_per_gpu: 1234, runtime_min: 7}}}}
""")
    proc = run_snakemake(tmp_path, "-n", f"--configfile={config}")
    job = proc.stdout.split("rule find_batch_size:")[1].split("\n\n")[0]
    assert all(f"{k}={v}," in job for k, v in (("mem_mb", 1234), ("runtime", 7),
                                               ("cpus_per_task", 3)))


def test_a_sweep_comparing_fit_and_the_custom_loop(tmp_path, cifar_python):
    """The loop as a sweep axis, on 2 replicas (the custom loop against fit on one
    process: tests/training/test_features.py)."""
    config = comparison_config(tmp_path / "loops.yaml", cifar_python, "loop: [fit, custom]",
                               gpus="[2]")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}")
    run = json.loads((tmp_path / "results/runs/SimpleCNN/custom/gpus2/rep1/run.json")
                     .read_text())
    assert (run["loop"], run["replicas"], run["status"]) == ("custom", 2, "completed")
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert sorted(zip(table["series"], table["gpus"])) == [
        ("SimpleCNN custom", 2), ("SimpleCNN fit", 2)]
    svg = (tmp_path / "results/plots/throughput.svg").read_text()
    assert "SimpleCNN custom" in svg and "SimpleCNN fit" in svg
