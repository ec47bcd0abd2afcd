"""Every config the project ships or tests with is a file that dry-runs (test_project.py
lints the workflow with the study's config)."""

from __future__ import annotations

import re
import shutil

import pytest
import yaml
from conftest import IN_CI, ROOT, TORCH_PYTHON, TORCH_READY, run_snakemake

CONFIGS = sorted([*(ROOT / "config").glob("*.yaml"), *(ROOT / "tests" / "configs").glob("*.yaml"),
                  *(ROOT / "examples").rglob("*.yaml")])
CONFIGS = [c for c in CONFIGS if c.name != "schema.yaml"]


def plans_torch_points(config) -> bool:
    """Whether the config trains on backend torch (planning then asks for torch.python)."""
    study = yaml.safe_load(config.read_text()) or {}
    backends = (study.get("sweep") or {}).get("backend") or [
        (study.get("training") or {}).get("backend")]
    return "torch" in backends


@pytest.mark.parametrize("config", CONFIGS, ids=[c.relative_to(ROOT).as_posix() for c in CONFIGS])
def test_config_dry_runs(config, tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")  # own-model.yaml's builder
    if plans_torch_points(config) and not TORCH_READY and not IN_CI:
        # `make test-fast` builds no PyTorch environment (5.6 GB): planning refuses the
        # torch points in one line, which is checked; the dry run itself needs it (in CI,
        # which builds it, a missing one fails)
        refused = run_snakemake(tmp_path, "-n", f"--configfile={config}", check=False)
        assert refused.returncode != 0, refused.stdout[-3000:]
        assert (f"backend torch points run with torch.python {TORCH_PYTHON}" in refused.stdout
                and "`make setup-torch` builds it" in refused.stdout), refused.stdout[-3000:]
        pytest.skip("the dry run of a config with torch points needs the PyTorch "
                    "environment: make setup-torch")
    dry = run_snakemake(tmp_path, "-n", f"--configfile={config}")
    assert "all" in dry.stdout.split("Job stats:")[1]
    assert not (tmp_path / "results").exists()


def test_a_multi_node_study_is_one_sweep_through_the_slurm_profile(tmp_path):
    """gpus [1 .. 32] with 4 GPUs per node: nodes 1, 1, 1, 2, 4, 8, each job asking for
    what the SLURM plugin turns into sbatch flags (nodes -> --nodes, gres -> --gres,
    tasks_per_gpu -> --ntasks-per-gpu, cpus_per_task -> -c, mem_mb -> --mem)."""
    dry = run_snakemake(tmp_path, "-n", "--profile", str(ROOT / "profiles" / "slurm"),
                        f"--configfile={ROOT / 'tests' / 'configs' / 'multinode.yaml'}")
    jobs = {}
    for block in dry.stdout.split("\nrule ")[1:]:
        if not block.startswith("train:"):
            continue
        point = re.search(r"wildcards: point=(\S+)", block).group(1)
        resources = dict(item.split("=", 1) for item in
                         re.search(r"resources: (.*)", block).group(1).split(", "))
        jobs[point] = resources
    planned = {int(re.search(r"gpus(\d+)", k).group(1)): v for k, v in jobs.items()}
    assert sorted(planned) == [1, 2, 4, 8, 16, 32]
    assert [int(planned[g]["nodes"]) for g in sorted(planned)] == [1, 1, 1, 2, 4, 8]
    assert [planned[g]["gres"] for g in sorted(planned)] == [
        "gpu:v100:1", "gpu:v100:2", "gpu:v100:4", "gpu:v100:4", "gpu:v100:4", "gpu:v100:4"]
    for gpus in (8, 16, 32):  # one task per GPU, launched by the rule (mpi), not wrapped
        assert (planned[gpus]["tasks"], planned[gpus]["tasks_per_gpu"],
                planned[gpus]["mpi"]) == (str(gpus), "1", "srun")
    for gpus in (1, 2, 4):
        assert "tasks" not in planned[gpus]  # one MirroredStrategy process


def test_a_point_of_several_processes_claims_the_cores_of_all_its_tasks_locally(tmp_path):
    """Under profiles/local a point's `threads` are its tasks' cores (cpus_per_task x tasks),
    so Snakemake runs no other point on them, and launch.py is told what was granted (each
    worker's thread count): a 2-process point claimed one task's core and ran beside a
    1-process point, a torch study's speedup 1.77 by default and 1.00 with -j 1."""
    dry = run_snakemake(tmp_path, "-n", "--profile", str(ROOT / "profiles" / "local"),
                        "--cores", "4", "--configfile",
                        str(ROOT / "tests" / "configs" / "slurm-command.yaml"))
    claimed = {}
    for block in dry.stdout.split("\nrule ")[1:]:
        if block.startswith("train:"):
            gpus = int(re.search(r"wildcards: point=\S+/gpus(\d+)/", block).group(1))
            threads = re.search(r"threads: (\d+)", block)
            claimed[gpus] = (int(threads.group(1)) if threads else 1,
                             int(re.search(r"--threads (\d+)", block).group(1)))
    assert claimed == {1: (1, 1), 2: (2, 2)}
