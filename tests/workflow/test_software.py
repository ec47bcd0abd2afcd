"""The site's software stack: environment modules for real (Debian's environment-modules),
the container as far as this machine allows (Apptainer is not packaged for Debian 12)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import IN_CI, MODULES_INIT, ROOT, run_snakemake, site_modules, write_config

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]


def small_config(path, software: str):
    return write_config(path, f"""
data: {{dataset: fashion_mnist, image_size: 16, shards: 2, limit_train: 64, limit_test: 32}}
sweep: {{models: [MLP], gpus: [1]}}
training: {{epochs: 1, batch_per_gpu: 16, device: cpu}}
resources: {{cpus_per_gpu: 1, mem_mb_per_gpu: 1000, runtime_min: 5}}
software: {software}
""")


@pytest.mark.skipif(not MODULES_INIT.exists() and not IN_CI,
                    reason="environment-modules is not installed (make sysdeps)")
def test_a_site_module_is_loaded_for_the_training_job(tmp_path):
    module, env = site_modules(tmp_path)
    config = small_config(tmp_path / "c.yaml", f"{{modules: [{module}]}}")
    run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", "--sdm=env-modules", "--",
                  "results/runs/MLP/gpus1/rep1/run.json", env=env)
    run = json.loads((tmp_path / "results/runs/MLP/gpus1/rep1/run.json").read_text())
    assert run["status"] == "completed"
    assert (run["env"]["LOADEDMODULES"], run["env"]["DLSCALE_SITE_STACK"]) == (module,
                                                                              "test-stack")
    assert run["system"]["modules"] == [module]


def test_a_container_reaches_the_jobs_that_run_tensorflow(tmp_path):
    """Without Apptainer, what can be seen is that Snakemake gives the jobs the image:
    with software.container, --sdm apptainer needs the apptainer command; without, not."""
    image = "docker://nvcr.io/nvidia/tensorflow:23.03-tf2-py3"
    plain = small_config(tmp_path / "plain.yaml", "{}")
    assert run_snakemake(tmp_path, "-n", f"--configfile={plain}", "--sdm=apptainer").returncode == 0
    boxed = small_config(tmp_path / "boxed.yaml", f"{{container: '{image}'}}")
    proc = run_snakemake(tmp_path, "-n", f"--configfile={boxed}", "--sdm=apptainer", check=False)
    if shutil.which("apptainer") or shutil.which("singularity"):
        assert proc.returncode == 0
    else:
        assert proc.returncode != 0
        assert "apptainer or singularity command has to be available" in proc.stdout


@pytest.mark.skipif(not MODULES_INIT.exists() and not IN_CI,
                    reason="environment-modules is not installed (make sysdeps)")
def test_a_job_without_the_module_command_fails_its_point_with_the_reason(tmp_path):
    # the README's BASH_ENV step forgotten: Snakemake's `module load` fails in the job's
    # shell and the training would run with whatever python is on PATH
    module, env = site_modules(tmp_path)
    del env["BASH_ENV"]
    config = small_config(tmp_path / "c.yaml", f"{{modules: [{module}]}}")
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", "--sdm=env-modules",
                         env=env, check=False)
    assert proc.returncode != 0
    run = json.loads((tmp_path / "results/runs/MLP/gpus1/rep1/run.json").read_text())
    assert run["status"] == "failed" and "no `module` command" in run["failure"]
    assert f"software.modules asks for {module}" in run["failure"]
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")  # the tables are still made
    assert list(runs["status"]) == ["failed"]


@pytest.mark.parametrize("software, value", [
    ('{modules: ["x; touch HACKED"]}', "'x; touch HACKED' does not match"),
    ("{container: 'image $(touch HACKED)'}", "'image $(touch HACKED)' does not match"),
])
def test_a_module_or_image_name_with_shell_characters_is_refused_at_planning(tmp_path,
                                                                             software, value):
    config = small_config(tmp_path / "c.yaml", software)
    proc = run_snakemake(tmp_path, *PROFILE, f"--configfile={config}", "--sdm=env-modules",
                         check=False)
    assert proc.returncode != 0 and value in proc.stdout
    assert not (tmp_path / "HACKED").exists() and not (tmp_path / "results").exists()
