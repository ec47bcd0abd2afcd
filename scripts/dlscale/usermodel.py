"""Your own model in the study: `sweep.models` may name a function that builds it.

A model entry is a name dlscale knows (ResNet50V2, SimpleCNN ...), a builder
`path/to/file.py:function` or `package.module:function` (labelled by the function's
name), or `{from: BUILDER, label: NAME}`. The function is called as
`function(input_shape=(h, w, c), num_classes=n)` and returns an uncompiled Keras model
(built with `from tensorflow import keras`, the Keras TensorFlow trains with)
whose input is the image as floats in [0, 1] and whose output is one value per class
(logits, or probabilities from a softmax). dlscale puts its own input (uint8, resize,
rescale) in front and compiles it with its optimizer, learning-rate scaling and
precision like any other model.

At planning the builder is checked without importing TensorFlow: the file exists (a
path is relative to the workflow's working directory) and defines the function at its
top level. At job time a function that raises, returns no Keras model, or whose output
does not hold one value per class ends the point as failed with that reason.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from pathlib import Path

from dlscale.errors import PlanError, RunError

BUILDER = re.compile(r"^(?P<where>[^:\s]+):(?P<function>[A-Za-z_][A-Za-z0-9_]*)$")


def entries(models: list) -> list[tuple[str, str | None]]:
    """(label, builder or None) of each sweep.models entry, in order; PlanError when two
    entries share a label."""
    found = []
    for entry in models:
        if isinstance(entry, dict):
            builder = entry["from"]
            label = entry.get("label") or BUILDER.match(builder)["function"]
        elif BUILDER.match(entry):
            builder, label = entry, BUILDER.match(entry)["function"]
        else:
            builder, label = None, entry
        found.append((label, builder))
    labels = [label for label, _ in found]
    if twice := sorted({x for x in labels if labels.count(x) > 1}):
        raise PlanError(f"sweep.models: two models are labelled '{twice[0]}': give one a "
                        "label ({from: path/to/file.py:function, label: NAME})")
    return found


def source_file(builder: str, basedir: Path | None = None) -> Path | None:
    """The file that defines `builder`: the path it names, or the module's file (None
    when the module cannot be found)."""
    where = BUILDER.match(builder)["where"]
    if where.endswith(".py"):
        path = Path(where)
        return path if path.is_absolute() or basedir is None else Path(basedir) / path
    try:
        spec = importlib.util.find_spec(where)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def check(builder: str, basedir: Path | None = None) -> None:
    """PlanError naming the builder when its file is missing, cannot be parsed, or does
    not define the function at its top level."""
    match = BUILDER.match(builder)
    if match is None:
        raise PlanError(f"sweep.models: '{builder}' is not path/to/file.py:function or "
                        "package.module:function")
    function, path = match["function"], source_file(builder, basedir)
    if path is None:
        raise PlanError(f"sweep.models: '{builder}': no module {match['where']} on the Python "
                        "path (a file is named with its .py suffix)")
    if not path.is_file():
        raise PlanError(f"sweep.models: '{builder}': {path} does not exist or is not a file")
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError) as exc:
        raise PlanError(f"sweep.models: '{builder}': {path} is not valid Python "
                        f"({exc.__class__.__name__}: {exc})") from None
    defined = {node.name for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    defined |= {target.id for node in tree.body if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)}
    if function not in defined:
        raise PlanError(f"sweep.models: '{builder}': {path} defines no function {function} at "
                        "its top level")


def load(builder: str):
    """The builder function (imports its file or module)."""
    match = BUILDER.match(builder or "")
    if match is None:
        raise RunError(f"--model-from '{builder}' is not path/to/file.py:function or "
                       "package.module:function", 2)
    where, function = match["where"], match["function"]
    try:
        if where.endswith(".py"):
            spec = importlib.util.spec_from_file_location(f"dlscale_user_{Path(where).stem}",
                                                          where)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except Exception as exc:  # the user's code: any error is the point's failure reason
        raise RunError(f"model {builder} could not be imported: "
                       f"{type(exc).__name__}: {exc}", 2) from None
    build = getattr(module, function, None)
    if not callable(build):
        raise RunError(f"model {builder}: {where} defines no function {function}", 2)
    return build


def build(builder: str, input_shape: tuple[int, int, int], num_classes: int):
    """The user's model, checked: a Keras model with one output of num_classes values."""
    from dlscale import cli as K

    keras = K.keras()
    try:
        model = load(builder)(input_shape=tuple(input_shape), num_classes=num_classes)
    except RunError:
        raise
    except Exception as exc:
        raise RunError(f"model {builder} raised {type(exc).__name__}: {exc}", 2) from None
    if not isinstance(model, keras.Model):
        kind = f"{type(model).__module__}.{type(model).__name__}"
        raise RunError(f"model {builder} returned a {kind}, not a model of the Keras that "
                       f"TensorFlow trains with here ({keras.__name__} {keras.__version__}): "
                       "build it with `from tensorflow import keras`", 2)
    shape = tuple(model.output_shape) if not isinstance(model.output_shape, list) else None
    if shape is None or len(shape) != 2 or shape[-1] != num_classes:
        raise RunError(f"model {builder} outputs shape {model.output_shape}, but the data has "
                       f"{num_classes} classes: expected (None, {num_classes})", 2)
    return model


def ends_in_softmax(model) -> bool:
    """Whether the model's last layer applies a softmax (its output is probabilities)."""
    layer = model.layers[-1]
    activation = getattr(layer, "activation", None)
    return (getattr(activation, "__name__", "") == "softmax"
            or type(layer).__name__ == "Softmax")
