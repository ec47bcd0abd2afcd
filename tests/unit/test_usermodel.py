"""dlscale/train/usermodel.py: your own model found and checked at planning without running
any of it, and called at job time as its parameters say."""

from __future__ import annotations

import pytest

from dlscale.core.errors import PlanError, RunError
from dlscale.train import usermodel

SIDE_EFFECT = "import pathlib\npathlib.Path(__file__).with_name('RAN').write_text('x')\n"


def write(root, files: dict) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_a_package_builder_is_found_without_running_the_package(tmp_path):
    """`from .net import build` in an __init__ that does work (imports TensorFlow, raises):
    planning reads both files, runs neither, and takes both as the model's inputs."""
    write(tmp_path, {
        "mynets/__init__.py": SIDE_EFFECT + "import tensorflow\nraise RuntimeError('no GPU')\n"
                              "from .net import build\n",
        "mynets/net.py": SIDE_EFFECT + "def build(input_shape, classes, width=16):\n    ...\n",
        "mynets/deep/__init__.py": "",
        "mynets/deep/res.py": "from ..net import build as wide\n",
    })
    files = usermodel.check("mynets:build", tmp_path)
    assert files == (tmp_path / "mynets/__init__.py", tmp_path / "mynets/net.py")
    assert usermodel.check("mynets.deep.res:wide", tmp_path) == (
        tmp_path / "mynets/deep/res.py", tmp_path / "mynets/net.py")
    assert not (tmp_path / "mynets" / "RAN").exists()


@pytest.mark.parametrize("signature", [
    "input_shape, num_classes", "input_shape, classes", "shape, n_classes, width=16",
    "h, w", "shape, n", "*args", "**kwargs", "input_shape=None, classes=1000, *, weights=None",
])
def test_a_builder_that_can_take_the_shape_and_the_classes_passes(tmp_path, signature):
    write(tmp_path, {"net.py": f"def build({signature}):\n    ...\n"})
    assert usermodel.check("net.py:build", tmp_path) == (tmp_path / "net.py",)


@pytest.mark.parametrize("signature, words", [
    ("width", "build(width): it takes no input shape and number of classes: name its "
              "parameters input_shape or shape or image_shape and num_classes or classes"),
    ("input_shape, num_classes, depth", "build(input_shape, num_classes, depth): its "
                                        "parameter depth has no default"),
    ("n_out, input_shape", "it takes no input shape and number of classes"),
])
def test_a_builder_that_cannot_take_them_is_named_at_planning(tmp_path, signature, words):
    write(tmp_path, {"net.py": f"def build({signature}):\n    ...\n"})
    with pytest.raises(PlanError) as info:
        usermodel.check("net.py:build", tmp_path)
    assert str(info.value).startswith("sweep.models: 'net.py:build': ")
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_path_with_a_space_is_a_builder_and_a_long_label_is_refused(tmp_path):
    write(tmp_path, {"my nets/net.py": "def build(input_shape, num_classes):\n    ...\n"})
    assert usermodel.check("my nets/net.py:build", tmp_path) == (tmp_path / "my nets/net.py",)
    assert usermodel.entries(["my nets/net.py:build"]) == [("build", "my nets/net.py:build")]
    with pytest.raises(PlanError, match="has 300 characters: expected at most 100"):
        usermodel.entries([f"net.py:{'b' * 300}"])


KERAS_MODELS = {
    "Sequential without Input": (
        "def build(input_shape, num_classes):\n"
        "    return keras.Sequential([keras.layers.Conv2D(4, 3), keras.layers.Flatten(),\n"
        "                             keras.layers.Dense(num_classes)])\n"),
    "keras.applications' names": (
        "def build(input_shape=None, classes=1000, weights=None):\n"
        "    inputs = keras.Input(shape=input_shape)\n"
        "    x = keras.layers.GlobalAveragePooling2D()(inputs)\n"
        "    return keras.Model(inputs, keras.layers.Dense(classes)(x))\n"),
    "positional": (
        "def build(shape_hw, n):\n"
        "    return keras.Sequential([keras.layers.Flatten(), keras.layers.Dense(n)])\n"),
}


@pytest.mark.parametrize("what", KERAS_MODELS)
def test_a_builder_is_called_as_its_parameters_say_and_built_on_the_input(tmp_path, what):
    write(tmp_path, {"net.py": "from tensorflow import keras\n\n" + KERAS_MODELS[what]})
    model = usermodel.build(f"{tmp_path / 'net.py'}:build", (8, 8, 3), 5)
    assert model.built and model.output_shape == (None, 5)


def test_a_model_that_cannot_take_the_images_is_a_one_line_reason(tmp_path):
    write(tmp_path, {"net.py": "from tensorflow import keras\n\n"
                               "def build(input_shape, num_classes):\n"
                               "    return keras.Sequential([keras.layers.Dense(num_classes,"
                               " input_shape=(7,))])\n"})
    with pytest.raises(RunError) as info:
        usermodel.build(f"{tmp_path / 'net.py'}:build", (8, 8, 3), 5)
    message = str(info.value)
    assert message.startswith(f"model {tmp_path / 'net.py'}:build cannot take images of "
                              "shape (None, 8, 8, 3): ") and "\n" not in message


def _package(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


BUILD = "def build(input_shape, num_classes):\n    return head(input_shape, num_classes)\n"


def _study(tmp_path, builder: str, **training):
    import copy

    from dlscale.core.schema import validate
    from dlscale.plan.study import Study

    config = copy.deepcopy({"sweep": {"models": [builder], "gpus": [1]},
                            "training": {"device": "cpu", "batch_per_gpu": 8, **training}})
    validate(config)
    return Study(config, tmp_path)


def test_every_local_module_a_builders_file_imports_is_an_input(tmp_path, monkeypatch):
    """mymodels/net.py does `from .layers import head`, layers.py imports blocks.py: an edit
    to either trains the points again, as docs/your-own-work.md says."""
    _package(tmp_path, {"mymodels/__init__.py": "",
                        "mymodels/net.py": "from .layers import head\n\n" + BUILD,
                        "mymodels/layers.py": "from mymodels import blocks\n\n"
                                              "def head(shape, n):\n    return blocks\n",
                        "mymodels/blocks.py": "import os\n"})
    monkeypatch.chdir(tmp_path)
    study = _study(tmp_path, "mymodels.net:build")
    point = next(iter(study.points.values()))
    assert sorted(study.model_files(point)) == sorted(
        str(tmp_path / "mymodels" / name)  # the package's __init__.py runs with them
        for name in ("__init__.py", "net.py", "layers.py", "blocks.py"))


def test_a_relative_import_that_reaches_no_module_is_refused_at_planning(tmp_path,
                                                                        monkeypatch):
    _package(tmp_path, {"mymodels/__init__.py": "",
                        "mymodels/net.py": "from .lyers import head\n\n" + BUILD})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlanError) as error:
        _study(tmp_path, "mymodels.net:build")
    assert str(error.value) == (
        f"sweep.models: 'mymodels.net:build': {tmp_path / 'mymodels' / 'net.py'}, line 1: "
        f"'from .lyers import ...' reaches no module of {tmp_path}: it would fail when the "
        "point's job imports it")


def test_a_builder_re_exported_with_a_star_import_is_found(tmp_path, monkeypatch):
    _package(tmp_path, {"mymodels/__init__.py": "from .net import *\n",
                        "mymodels/net.py": "def head(s, n):\n    return None\n\n" + BUILD})
    monkeypatch.chdir(tmp_path)
    study = _study(tmp_path, "mymodels:build")
    point = next(iter(study.points.values()))
    assert str(tmp_path / "mymodels" / "net.py") in study.model_files(point)


def test_a_model_that_imports_jax_is_refused_for_tensorflow_points(tmp_path, monkeypatch):
    _package(tmp_path, {"net.py": "import jax.numpy as jnp\nimport keras\n\n"
                                  "def head(s, n):\n    return None\n\n" + BUILD})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlanError) as error:
        _study(tmp_path, "net.py:build", keras=3)
    assert str(error.value) == (f"sweep.models: 'net.py:build': {tmp_path / 'net.py'} imports "
                                "jax, which its TensorFlow points cannot run: set "
                                "training.backend to jax")
    _study(tmp_path, "net.py:build", keras=3, backend="jax")  # on JAX it plans


def test_modules_that_import_names_from_each_other_are_refused_at_planning(tmp_path,
                                                                          monkeypatch):
    """net.py imports head from layers.py, which imports build from net.py: the job's
    import fails ('partially initialized module'); planning says so, naming both."""
    _package(tmp_path, {"mymodels/__init__.py": "",
                        "mymodels/net.py": "from .layers import head\n\n" + BUILD,
                        "mymodels/layers.py": "from .net import build\n\n"
                                              "def head(s, n):\n    return build\n"})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlanError) as error:
        _study(tmp_path, "mymodels.net:build")
    net, layers = tmp_path / "mymodels" / "net.py", tmp_path / "mymodels" / "layers.py"
    assert str(error.value) == (
        f"sweep.models: 'mymodels.net:build': {layers}, which imports from {net}, which "
        f"imports from {layers}: a circular import of names fails when the point's job "
        "imports them; move what both need into a third module")
    # a module imported as a module, inside a function, is no circle
    _package(tmp_path, {"mymodels/layers.py": "def head(s, n):\n"
                                              "    from . import net\n    return net\n"})
    _study(tmp_path, "mymodels.net:build")


def test_a_builder_given_by_path_inside_a_package_imports_its_neighbours(tmp_path,
                                                                         monkeypatch):
    """`mymodels/net.py:build` with `from .layers import head` passed planning, then
    failed every point ("attempted relative import with no known parent package"); and
    `mymodels/__init__.py:build` re-exporting with `*` was refused while `mymodels:build`
    trained (issue 78, 3). Both are read, and imported, as the package's modules."""
    _package(tmp_path, {"mymodels/__init__.py": "from .net import *\n",
                        "mymodels/net.py": "from .layers import head\n\n" + BUILD,
                        "mymodels/layers.py": "def head(shape, n):\n"
                                              "    return ('built', tuple(shape), n)\n"})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))  # load() adds to it
    import sys

    try:
        for builder in ("mymodels/net.py:build", "mymodels/__init__.py:build"):
            study = _study(tmp_path, builder)
            point = next(iter(study.points.values()))
            assert str(tmp_path / "mymodels" / "layers.py") in study.model_files(point)
            build = usermodel.load(builder)
            assert build((8, 8, 3), 5) == ("built", (8, 8, 3), 5)
    finally:  # the worker's next test finds no package of this one's
        for name in [m for m in sys.modules if m.split(".")[0] == "mymodels"]:
            del sys.modules[name]
