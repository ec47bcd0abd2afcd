"""Keras 2 or 3, TensorFlow or JAX (issue 44): the sweep's axes, and what cannot train
refused at planning with its reason (no job is submitted for it)."""

from __future__ import annotations

import copy
import re

import pytest

from dlscale.core.errors import PlanError
from dlscale.core.schema import validate
from dlscale.plan import modelimports
from dlscale.plan.sweep import SweepError, plan_sweep


def _config(**sections) -> dict:
    config = copy.deepcopy(sections)
    validate(config)
    return config


def test_keras_defaults_to_2_on_tensorflow_and_a_point_names_both():
    points, _ = plan_sweep(_config(sweep={"models": ["SimpleCNN"], "gpus": [1]}))
    assert (points[0].keras, points[0].backend, points[0].strategy) == (2, "tensorflow",
                                                                        "mirrored")


def test_a_backend_sweep_gives_one_series_and_folder_per_backend():
    points, notes = plan_sweep(_config(sweep={"models": ["SimpleCNN"], "gpus": [1, 2],
                                              "backend": ["tensorflow", "jax"]},
                                       training={"keras": 3}))
    assert [(p.key, p.series, p.strategy) for p in points] == [
        ("SimpleCNN/tensorflow/gpus1/rep1", "SimpleCNN tensorflow", "mirrored"),
        ("SimpleCNN/tensorflow/gpus2/rep1", "SimpleCNN tensorflow", "mirrored"),
        ("SimpleCNN/jax/gpus1/rep1", "SimpleCNN jax", "dataparallel"),
        ("SimpleCNN/jax/gpus2/rep1", "SimpleCNN jax", "dataparallel")]
    assert notes == [] and {p.tasks for p in points} == {1}  # one process holds the devices


def test_jax_across_nodes_is_one_process_per_node_holding_its_gpus():
    points, notes = plan_sweep(_config(sweep={"models": ["SimpleCNN"], "gpus": [8]},
                                       training={"keras": 3, "backend": "jax"}))
    point = points[0]
    assert notes == [] and (point.strategy, point.nodes, point.gpus_per_node) == (
        "dataparallel", 2, 4)
    assert (point.tasks, point.tasks_per_node, point.gres) == (2, 1, "gpu:4")


def test_a_keras_sweep_leaves_out_keras_2_on_jax_with_a_note():
    points, notes = plan_sweep(_config(sweep={"models": ["SimpleCNN"], "gpus": [2],
                                              "keras": [2, 3], "backend": ["tensorflow", "jax"]}))
    assert [p.key for p in points] == ["SimpleCNN/keras2/tensorflow/gpus2/rep1",
                                       "SimpleCNN/keras3/tensorflow/gpus2/rep1",
                                       "SimpleCNN/keras3/jax/gpus2/rep1"]
    assert notes == ["sweep: 2 GPU(s) on 1 node(s) with mirrored on Keras 2 (jax, loop fit) "
                     "left out: backend jax runs Keras 3 only: set training.keras (or "
                     "sweep.keras) to 3"]


def test_keras_3_across_nodes_is_left_out_and_keras_2_keeps_them():
    points, notes = plan_sweep(_config(sweep={"models": ["SimpleCNN"], "gpus": [4, 8],
                                              "keras": [2, 3]}))
    assert [p.key for p in points] == ["SimpleCNN/keras2/gpus4/rep1", "SimpleCNN/keras2/gpus8/rep1",
                                       "SimpleCNN/keras3/gpus4/rep1"]
    assert len(notes) == 1 and "8 GPU(s) on 2 node(s) with multiworker on Keras 3" in notes[0]
    assert "keras-team/keras#20585" in notes[0]


@pytest.mark.parametrize("sections, words", [
    ({"training": {"backend": "jax"}}, "backend jax runs Keras 3 only"),
    ({"training": {"keras": 3, "loop": "custom"}},
     "the custom training loop is written for tf-keras (Keras 2)"),
    ({"training": {"keras": 3}, "sweep": {"models": ["SimpleCNN"], "strategy": ["horovod"]}},
     "Horovod trains tf-keras (Keras 2) only"),
    ({"training": {"keras": 3}, "sweep": {"models": ["SimpleCNN"], "strategy": ["multiworker"]}},
     "Keras 3 on TensorFlow trains under MirroredStrategy on one node"),
    ({"training": {"keras": 3, "backend": "jax"},
      "sweep": {"models": ["SimpleCNN"], "strategy": ["mirrored"]}},
     "strategy mirrored is TensorFlow's: Keras 3 on JAX trains with "
     "keras.distribution.DataParallel"),
    ({"training": {"keras": 3, "backend": "torch", "tensorboard": True}},
     "training.tensorboard writes its event files with TensorFlow (Keras' TensorBoard "
     "callback), which PyTorch's environment (.venv-torch) does not have: set it to false"),
    ({"training": {"keras": 3, "batch_per_gpu": "auto"}},
     "batch_per_gpu auto searches with tf-keras (Keras 2) only, not yet with Keras 3"),
    ({"sweep": {"models": ["SimpleCNN"], "strategy": ["dataparallel"]}},
     "strategy dataparallel is keras.distribution.DataParallel on JAX"),
])
def test_what_cannot_train_is_refused_at_planning_with_the_reason(sections, words):
    sections.setdefault("sweep", {"models": ["SimpleCNN"], "gpus": [1]})
    with pytest.raises(SweepError, match=re.escape(words)) as refused:
        plan_sweep(_config(**sections))
    assert str(refused.value).startswith("invalid sweep: no point of the sweep can run: ")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_profile_steps_plan_on_jax_and_torch(backend):
    """training.profile_steps was refused at planning on JAX and PyTorch; dlscale's window
    traces them now (tests/training: test_keras3.py, test_torch.py)."""
    points, _ = plan_sweep(_config(training={"keras": 3, "backend": backend,
                                             "profile_steps": [2, 3]},
                                   sweep={"models": ["SimpleCNN"], "gpus": [1, 2]}))
    assert [(p.gpus, p.backend, p.profile_steps) for p in points] == [
        (1, backend, (2, 3)), (2, backend, (2, 3))]


def test_tensorboard_where_tensorflow_is_not_installed_is_refused_at_planning(monkeypatch):
    """A JAX point's training.tensorboard needs TensorFlow (tf.summary writes Keras' event
    files): where it is not installed the job failed with ModuleNotFoundError; planning
    says so in one line. Its profile_steps alone need no TensorFlow."""
    from dlscale.train import keraschoice

    monkeypatch.setattr(keraschoice, "tensorflow_installed", lambda: False)
    for tensorboard, expected in ((True, "point SimpleCNN/gpus1/rep1: training.tensorboard "
                                   "writes its event files with TensorFlow (Keras' TensorBoard"
                                   " callback), which is not installed here (or install it: "
                                   "requirements.txt): set it to false"), (False, None)):
        points, _ = plan_sweep(_config(training={"keras": 3, "backend": "jax",
                                                 "tensorboard": tensorboard,
                                                 "profile_steps": [2, 3]},
                                       sweep={"models": ["SimpleCNN"], "gpus": [1]}))
        problem = keraschoice.without_tensorflow_problem(points, {}, 32, 32)
        assert (problem or "").startswith(expected) if expected else problem is None, problem


@pytest.mark.parametrize("source, found", [
    ("import keras\n", 3),
    ("from keras import layers\n", 3),
    ("import keras.ops as ops\n", 3),
    ("import tf_keras as keras\n", 2),
    ("from tensorflow import keras\n", None),  # follows training.keras
    ("import tf_keras\nimport keras\n", None),  # both: job time decides
    ("def f():\n    import keras\n", 3),
])
def test_the_keras_a_model_file_imports_is_read_without_running_it(tmp_path, source, found):
    path = tmp_path / "net.py"
    path.write_text("raise SystemExit('ran')\n" + source)
    assert modelimports.keras_of([path]) == found


def test_a_model_of_the_other_keras_is_refused_at_planning(tmp_path, monkeypatch):
    from dlscale.plan.study import Study

    (tmp_path / "net.py").write_text("import keras\n\n"
                                     "def build(input_shape, num_classes):\n"
                                     "    return keras.Sequential()\n")
    monkeypatch.chdir(tmp_path)
    config = _config(sweep={"models": ["net.py:build"], "gpus": [1]},
                     training={"device": "cpu", "batch_per_gpu": 8})
    Study(_config(sweep={"models": ["net.py:build"], "gpus": [1]},
                  training={"device": "cpu", "batch_per_gpu": 8, "keras": 3}), tmp_path)
    with pytest.raises(PlanError) as refused:
        Study(config, tmp_path)
    assert str(refused.value) == (
        "sweep.models: 'net.py:build' imports keras (Keras 3), but its points train with "
        "Keras 2: set training.keras (or sweep.keras) to 3, or build it with `import tf_keras`")


@pytest.mark.parametrize("sweep, words", [
    ({"backend": ["tensorflow", "jax"]},
     "sweep.backend: jax gives no point that can run: backend jax runs Keras 3 only"),
    ({"strategy": ["mirrored", "horovod"], "keras": [3]},
     "sweep.strategy: horovod gives no point that can run: "),
])
def test_a_swept_value_that_loses_every_point_is_an_error_naming_it(sweep, words):
    """sweep.backend: [tensorflow, jax] with Keras 2 dropped the whole JAX axis with a
    note while [jax] alone was an error: a value asked for that gives no point is one."""
    with pytest.raises(SweepError) as error:
        plan_sweep(_config(sweep={"models": ["SimpleCNN"], "gpus": [1, 2], **sweep}))
    assert words in str(error.value) and "\n" not in str(error.value)


SEEDED = """
import json, random, sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "tensorflow first":  # as a model module of yours that imports it
    import tensorflow
from dlscale.train import keraschoice
keraschoice.use_keras(3, "jax")
keraschoice.seed(7)
keras = keraschoice.keras()
import numpy as np
dense = keras.layers.Dense(3)
dense.build((None, 2))
print(json.dumps({"tensorflow": "tensorflow" in sys.modules, "python": random.random(),
                  "numpy": float(np.random.rand()),
                  "keras": np.asarray(keras.random.normal((2,))).tolist(),
                  "weights": np.asarray(dense.kernel).tolist()}))
"""


def test_a_jax_process_is_seeded_as_keras_seeds_it_without_starting_tensorflow():
    """keraschoice.seed on JAX: Python's, NumPy's and Keras's seeds (weights and
    keras.random) as keras.utils.set_random_seed sets them, without importing TensorFlow
    (before, each JAX point started it only to seed it: on a 2-replica point 2.4 s of CPU
    and 475 MB of peak memory more)."""
    import json
    import subprocess
    import sys

    from conftest import SCRIPTS

    pytest.importorskip("tensorflow")
    seen = {}
    for how in ("jax alone", "tensorflow first"):
        proc = subprocess.run([sys.executable, "-c", SEEDED, str(SCRIPTS), how],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen[how] = json.loads(proc.stdout.splitlines()[-1])
    alone, first = seen["jax alone"], seen["tensorflow first"]
    assert alone.pop("tensorflow") is False and first.pop("tensorflow") is True
    assert alone == first
