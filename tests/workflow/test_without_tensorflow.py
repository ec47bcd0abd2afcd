"""Keras 3 on JAX without TensorFlow (issue 60), through `snakemake --profile
profiles/local`: every process of the study (Snakemake, preparation, the points, the
analysis) starts with TensorFlow unimportable, as where it is not installed, and the
study still ends in its tables."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from conftest import NO_TENSORFLOW, ROOT, run_snakemake

pytestmark = pytest.mark.workflow
PROFILE = ["--profile", str(ROOT / "profiles" / "local")]


def test_a_jax_study_runs_to_its_tables_with_tensorflow_unimportable(tmp_path):
    site = tmp_path / "site"  # Python imports sitecustomize from PYTHONPATH at start-up
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_TENSORFLOW)
    run_snakemake(tmp_path, *PROFILE,
                  f"--configfile={ROOT / 'tests/configs/jax-without-tensorflow.yaml'}",
                  env={"PYTHONPATH": str(site)})
    runs = pd.read_csv(tmp_path / "results/tables/runs.csv")
    assert sorted(zip(runs["gpus"], runs["status"], runs["backend"])) == [
        (1, "completed", "jax"), (2, "completed", "jax")]
    for gpus in (1, 2):
        run = json.loads((tmp_path / f"results/runs/SimpleCNN/gpus{gpus}/rep1/run.json"
                          ).read_text())
        assert run["versions"]["tensorflow"] is None and run["versions"]["jax"]
        assert (run["train_input"], run["test_images"]) == ("files", 40)
        assert run["breakdown"]["notes"] == []  # the window, on JAX, needs none either
    scaling = pd.read_csv(tmp_path / "results/tables/scaling.csv")
    assert scaling.set_index("gpus").loc[2, "speedup"] > 0
    assert (tmp_path / "results/tables/breakdown.csv").exists()


@pytest.mark.parametrize(("change", "expected"), [
    ({"training": {"backend": "tensorflow"}},
     "point SimpleCNN/tensorflow/gpus1/rep1 trains with TensorFlow (Keras 3, backend "
     "tensorflow), which is not installed here"),
    ({"data": {"image_size": 32, "resize": "prepare"}},
     "data.resize prepare: preparation resizes to 32 px with TensorFlow, which is not "
     "installed here: set data.resize: on_device"),
    # the shipped example model imports TensorFlow: it passed planning, failed at the job
    # (issue 78, 4)
    ({"sweep": {"models": ["examples/my_model.py:small_resnet"]}},
     "my_model.py imports tensorflow, which is not installed here (a JAX-only "
     "environment)")])
def test_what_needs_tensorflow_is_refused_at_planning_in_one_line(tmp_path, change,
                                                                  expected):
    """A dry run, where TensorFlow is missing, of a study that would need it: one line
    naming what needs it, before any job (here a backend sweep, or resizing shards)."""
    import yaml

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_TENSORFLOW)
    config = yaml.safe_load((ROOT / "tests/configs/jax-without-tensorflow.yaml").read_text())
    for section, values in change.items():
        config[section].update(values)
    if "backend" in change.get("training", {}):
        config["sweep"]["backend"] = ["jax", "tensorflow"]
    if "models" in change.get("sweep", {}):
        shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(config))
    done = run_snakemake(tmp_path, *PROFILE, "-n", f"--configfile={tmp_path / 'study.yaml'}",
                         env={"PYTHONPATH": str(site)}, check=False)
    assert done.returncode != 0
    errors = [line for line in done.stdout.splitlines() if "not installed here" in line]
    assert len(errors) == 1 and expected in errors[0], done.stdout[-3000:]
    assert "Traceback" not in done.stdout and not (tmp_path / "results").exists()
