"""Messages and text a user reads: a torch module with nothing to train, a model name in
the wrong case, a small gradient's size, what runs.csv's backend holds, and DDP's
warning about gradient strides in every torchvision model's log."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import ROOT, SCRIPTS, TORCH_PYTHON, needs_torch

from dlscale.core import columns, models
from dlscale.core.errors import PlanError
from dlscale.plan.study import check_raw_config

# In .venv-torch: a torch module without parameters built as a point builds it, and
# torchvision's resnet18 stepped twice under DistributedDataParallel (one gloo rank) as
# the loop wraps it, with every warning recorded.
TORCH_CHECKS = r'''
import json, sys, warnings
sys.path.insert(0, sys.argv[1])
from dlscale.train import keraschoice
keraschoice.use_keras(3, "torch")
import torch, torch.distributed as dist, torchvision
from dlscale.core.errors import RunError
from dlscale.train import usermodel
from dlscale.train.frameworks.torch.torchloop import module_layer

said = {}
try:
    usermodel.build(sys.argv[2] + ":build", (16, 16, 3), 10)
except RunError as exc:
    said["empty"] = str(exc)
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[3], rank=0,
                        world_size=1)
keras = keraschoice.keras()
images = keras.Input(shape=(32, 32, 3))
model = keras.Model(images, module_layer(keras, images, torchvision.models.resnet18(
    num_classes=10), "resnet18"))
replica = torch.nn.parallel.DistributedDataParallel(model)
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    for _ in range(2):
        replica(torch.rand(4, 32, 32, 3)).sum().backward()
said["warnings"] = [str(w.message)[:120] for w in seen]
print(json.dumps(said))
'''

EMPTY_MODULE = '''
import torch


class Pool(torch.nn.Module):
    """Averages the image: nothing to train."""

    def forward(self, x):
        return x.mean(dim=(2, 3)).repeat(1, 4)[:, :10]


def build(input_shape, num_classes):
    return Pool()
'''


@needs_torch
def test_a_torch_module_without_parameters_and_ddps_grad_strides(tmp_path):
    """A module with no parameters failed in torch's optimizer ("optimizer got an empty
    parameter list"): its build says so in one line, naming it and what was expected.
    torchvision's models, given the channels-last view Keras' Permute makes, got their
    convolutions' gradients channels-last and DDP warned "Grad strides do not match
    bucket view strides" in every log: the module is given contiguous input."""
    from dlscale.jobs.locks import reserve_ports

    (tmp_path / "pool.py").write_text(EMPTY_MODULE)
    done = subprocess.run([str(TORCH_PYTHON), "-c", TORCH_CHECKS, str(SCRIPTS),
                           str(tmp_path / "pool.py"), str(reserve_ports(1)[0])],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said.get("empty") == (
        f"model {tmp_path / 'pool.py'}:build returned the torch.nn.Module Pool, which has no "
        "trainable parameters (module.parameters() is empty): expected layers assigned as "
        "its attributes in __init__ (self.conv = torch.nn.Conv2d(...)), which torch's "
        "optimizer trains"), said
    assert not [w for w in said["warnings"] if "Grad strides" in w], said["warnings"]


@pytest.mark.parametrize("given, meant", [("ResNet18", "resnet18"), ("RESNET50V2", "ResNet50V2"),
                                          ("ResNet51V2", "ResNet50V2"),
                                          ("mobilenetv2", "MobileNetV2")])
def test_an_unknown_model_name_suggests_the_name_in_another_case_first(given, meant):
    """`ResNet18` got "did you mean ResNet152?": torchvision's resnet18 is the same name
    in lower case; the suggestion compares case-folded names."""
    with pytest.raises(PlanError, match=rf"unknown model '{given}' \(did you mean {meant}\?\)"):
        check_raw_config({"sweep": {"models": [given]}})


def test_a_small_gradient_is_not_shown_as_zero_mib(monkeypatch):
    """A gradient under 0.05 MiB was "0.0" in the models table of the docs."""
    assert [models.mib(n) for n in (22_000, 300_000, 2_831_016, 2**20)] == [
        "0.021", "0.29", "2.7", "1.0"]
    monkeypatch.setattr(models, "table", lambda: {
        "Tiny": models.Model("Tiny", "tiny", 8, 22_000),
        "Wide": models.Model("Wide", "wide", 8, 100_000_000)})
    assert models.render().splitlines()[2:] == ["| `Tiny` | tiny | 8 | 0.021 |",
                                                "| `Wide` | wide | 8 | 95.4 |"]


def test_runs_csvs_backend_column_names_torch():
    """runs.csv's `backend` was described as "tensorflow or jax"; torch points write it too."""
    backend = next(c for c in columns.RUNS + columns.SCALING if c.name == "backend")
    assert backend.meaning == "the Keras backend that trained it: tensorflow, jax or torch"
    assert "tensorflow, jax or torch" in (ROOT / "docs" / "analysis.md").read_text()


def test_the_built_in_model_recipe_names_the_tests_and_how_gradient_bytes_is_found():
    """docs/development.md's recipe for a built-in model left out tests/unit/test_config.py
    (the schema's choices against the table) and where the row's gradient bytes come
    from (tests/unit/test_project.py checks that what it cites exists)."""
    text = (ROOT / "docs" / "development.md").read_text()
    recipe = text.split("**A built-in model.**", 1)[1].split("\n**", 1)[0]
    assert "`tests/unit/test_config.py`" in recipe
    assert "python -m dlscale.reporting.gradients --write" in recipe
    assert "leave the field\nempty" in recipe or "leave the field empty" in recipe
