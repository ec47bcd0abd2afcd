"""Your own model in the study: `sweep.models` may name a function that builds it.

A model entry is a name dlscale knows (ResNet50V2, SimpleCNN ...), a builder
`path/to/file.py:function` or `package.module:function` (labelled by the function's
name), or `{from: BUILDER, label: NAME}`. The function gets the input shape (h, w, c)
and the number of classes, by keyword when its parameters have one of the accepted
names (SHAPE_NAMES, CLASS_NAMES: `input_shape, num_classes` as dlscale's examples,
`input_shape, classes` as keras.applications), else positionally as its first two, and
returns an uncompiled Keras model (of the Keras the point trains with, training.keras:
`import tf_keras` or `from tensorflow import keras` for Keras 2, `import keras` for
Keras 3) whose input is the image as floats in [0, 1] and whose output is
one value per class (logits, or probabilities from a softmax). A model not built yet
(`keras.Sequential([...])` without `keras.Input`) is built on that input shape. dlscale
puts its own input (uint8, resize, rescale) in front and compiles it with its optimizer,
learning-rate scaling and precision like any other model.

At planning nothing of the builder runs: its file is found (a path is relative to the
workflow's working directory; a module is looked up on the import path, that folder
first, without importing its package) and read with `ast`: it must define the function
at its top level, or bind it by an import (`from .net import build`, followed to the file
that defines it), with parameters it can be called with. Those files are the inputs of
its points: an edit trains them again. At job time a function that raises, returns no
Keras model, or whose output does not hold one value per class ends the point as failed
with that reason.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from dlscale.core.errors import PlanError, RunError
from dlscale.core.schema import LABEL_MAX

MODULE = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
BUILDER = re.compile(rf"^(?P<where>[^:]*\S\.py|{MODULE}):(?P<function>[A-Za-z_][A-Za-z0-9_]*)$")
SHAPE_NAMES = ("input_shape", "shape", "image_shape")
CLASS_NAMES = ("num_classes", "classes", "n_classes", "nb_classes")
FOLLOW_IMPORTS = 8  # `from .x import f` hops followed to the file that defines f


def entries(models: list) -> list[tuple[str, str | None]]:
    """(label, builder or None) of each sweep.models entry, in order; PlanError when two
    entries share a label or a label is too long for a folder name."""
    found = []
    for entry in models:
        if isinstance(entry, dict):
            builder = entry["from"]
            label = entry.get("label") or BUILDER.match(builder)["function"]
        elif BUILDER.match(entry):
            builder, label = entry, BUILDER.match(entry)["function"]
        else:
            builder, label = None, entry
        if len(label) > LABEL_MAX:
            raise PlanError(f"sweep.models: the label '{label[:40]}...' has {len(label)} "
                            f"characters: expected at most {LABEL_MAX} (it names the points' "
                            "folders); give a shorter one ({from: BUILDER, label: NAME})")
        found.append((label, builder))
    labels = [label for label, _ in found]
    if twice := sorted({x for x in labels if labels.count(x) > 1}):
        raise PlanError(f"sweep.models: two models are labelled '{twice[0]}': give one a "
                        "label ({from: path/to/file.py:function, label: NAME})")
    return found


# --- where a builder is, read without running it -------------------------------------------

def search_path(basedir: Path | None = None) -> list[Path]:
    """Where a module is looked up: the working directory, then this Python's path (the
    jobs import it with the working directory first, see load)."""
    first = Path(basedir) if basedir is not None else Path.cwd()
    return [first] + [Path(p) for p in sys.path if p and Path(p) != first]


def module_file(module: str, search: list[Path]) -> Path | None:
    """The file `import module` would load (a .py module or a package's __init__.py),
    found on `search` without importing anything; None when there is none."""
    *packages, name = module.split(".")
    for root in search:
        folder = root.joinpath(*packages)
        for candidate in (folder / f"{name}.py", folder / name / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def package_module(path: Path) -> tuple[Path, str] | None:
    """(the folder above its packages, its dotted name) of a file inside a package (its
    folder holds an __init__.py), which imports its neighbours relatively; None for a
    file on its own. `pkg/net.py` -> (., "pkg.net"); `pkg/__init__.py` -> (., "pkg")."""
    path = Path(path).resolve()
    if not (path.parent / "__init__.py").is_file():
        return None
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)


@dataclass(frozen=True)
class Located:
    files: tuple[Path, ...]  # the module, then each file an import led to
    function: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | None  # None: not seen


def _parse(path: Path, builder: str) -> ast.Module:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError) as exc:
        raise PlanError(f"sweep.models: '{builder}': {path} is not valid Python "
                        f"({exc.__class__.__name__}: {exc})") from None


def _imported(node: ast.ImportFrom, module: str | None, is_package: bool) -> str | None:
    """The absolute module a `from ... import` names (None: a relative one out of reach)."""
    if not node.level:
        return node.module
    if module is None:
        return None
    base = module.split(".")
    base = base if is_package else base[:-1]
    if node.level - 1 >= len(base):
        return None
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def locate(builder: str, basedir: Path | None = None) -> Located:
    """The builder's files and definition, read with ast only; PlanError naming the builder
    when its file is missing, cannot be parsed, or binds no such name at its top level."""
    match = BUILDER.match(builder)
    if match is None:
        raise PlanError(f"sweep.models: '{builder}' is not path/to/file.py:function or "
                        "package.module:function")
    where, function = match["where"], match["function"]
    search = search_path(basedir)
    if where.endswith(".py"):
        path, module = Path(where), None
        path = path if path.is_absolute() or basedir is None else Path(basedir) / path
        if not path.is_file():
            raise PlanError(f"sweep.models: '{builder}': {path} does not exist or is not a file")
        if inside := package_module(path):  # its relative imports: as the job imports it
            module, search = inside[1], [inside[0], *search]
    else:
        path, module = module_file(where, search), where
        if path is None:
            raise PlanError(f"sweep.models: '{builder}': no module {where} in the working "
                            "directory or on the Python path (a file is named with its .py "
                            "suffix)")
    files, name = [path], function
    for _ in range(FOLLOW_IMPORTS):
        tree = _parse(path, builder)
        bound = None
        for node in _top_level(tree.body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and node.name == name:
                bound = node
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets):
                bound = None  # built by code (a partial, a factory): seen at job time
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for alias in node.names:
                    if (alias.asname or alias.name.split(".")[0]) == name:
                        bound = node
        if bound is None and not _binds(tree, name):
            bound = _star_source(tree, name, module, path, search)
        if bound is None and not _binds(tree, name):
            raise PlanError(f"sweep.models: '{builder}': {path} defines no function {name} "
                            "at its top level")
        if not isinstance(bound, ast.ImportFrom):
            return Located(tuple(files), bound if isinstance(bound, ast.AST) and not
                           isinstance(bound, ast.Import) else None)
        source = _imported(bound, module, path.name == "__init__.py")
        name = next((a.name for a in bound.names if (a.asname or a.name) == name), name)
        found = module_file(source, search) if source else None
        if found is None:  # from another package (keras.applications ...): not followed
            return Located(tuple(files), None)
        path, module = found, source
        files.append(path)
    return Located(tuple(files), None)


def _star_source(tree: ast.Module, name: str, module: str | None, path: Path,
                 search: list[Path]) -> ast.ImportFrom | None:
    """The `from X import *` of the module's top level whose module binds `name` (a
    package's __init__.py re-exporting its modules), or None."""
    for node in _top_level(tree.body):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            source = _imported(node, module, path.name == "__init__.py")
            found = module_file(source, search) if source else None
            if found is None:
                continue
            inner = _parse(found, str(found))
            if _binds(inner, name) or any(
                    getattr(n, "name", None) == name for n in _top_level(inner.body)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))):
                return node
    return None


def _top_level(body: list) -> list:
    """The module's statements, those inside top-level if/try/with blocks included (a
    guarded import binds a name too), not those inside functions or classes."""
    found = []
    for node in body:
        found.append(node)
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            inner = node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", [])
            inner += [s for h in getattr(node, "handlers", []) for s in h.body]
            found += _top_level(inner)
    return found


def _binds(tree: ast.Module, name: str) -> bool:
    return any(isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Name) and t.id == name
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))
        for node in _top_level(tree.body))


# --- how it is called -----------------------------------------------------------------------

# a parameter: (name, kind, has a default); kinds as inspect names them
Param = tuple[str, str, bool]


def _ast_params(node) -> list[Param] | None:
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef)
                     and n.name == "__init__"), None)
        if init is None:
            return None  # inherited: seen at job time
        return _ast_params(init)[1:]
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = len(args.defaults)
    params = [(a.arg, "POSITIONAL_ONLY" if i < len(args.posonlyargs) else
               "POSITIONAL_OR_KEYWORD", i >= len(positional) - defaults)
              for i, a in enumerate(positional)]
    if args.vararg:
        params.append((args.vararg.arg, "VAR_POSITIONAL", True))
    params += [(a.arg, "KEYWORD_ONLY", d is not None)
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        params.append((args.kwarg.arg, "VAR_KEYWORD", True))
    return params


def call_style(params: list[Param]) -> tuple[str, str] | None | str:
    """How to pass (input shape, number of classes): (shape keyword, classes keyword),
    None for positionally as the first two, or the reason it cannot take them."""
    names = {n for n, kind, _ in params if kind not in ("POSITIONAL_ONLY", "VAR_POSITIONAL",
                                                         "VAR_KEYWORD")}
    shape = next((n for n in SHAPE_NAMES if n in names), None)
    classes = next((n for n in CLASS_NAMES if n in names), None)
    kinds = {kind for _, kind, _ in params}
    if shape and classes:
        style, given = (shape, classes), {shape, classes}
    elif not shape and not classes and "VAR_KEYWORD" in kinds:
        style, given = (SHAPE_NAMES[0], CLASS_NAMES[0]), set()
    else:
        positional = [n for n, kind, _ in params if kind in ("POSITIONAL_ONLY",
                                                               "POSITIONAL_OR_KEYWORD")]
        first_two = (positional + [None, None])[:2]
        if (len(positional) < 2 and "VAR_POSITIONAL" not in kinds) or (
                shape and shape != first_two[0]) or (classes and classes != first_two[1]):
            return ("it takes no input shape and number of classes: name its parameters "
                    f"{' or '.join(SHAPE_NAMES)} and {' or '.join(CLASS_NAMES)}, or take "
                    "them as its first two")
        style, given = None, set(positional[:2])
    required = [n for n, kind, default in params
                if not default and n not in given and kind not in ("VAR_POSITIONAL",
                                                                    "VAR_KEYWORD")]
    if required:
        return (f"its parameter {required[0]} has no default (dlscale passes only the input "
                "shape and the number of classes)")
    return style


def signature_text(params: list[Param]) -> str:
    marks = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}
    return ", ".join(marks.get(kind, "") + name + ("=..." if default and kind not in marks
                                                   else "")
                     for name, kind, default in params)


def check(builder: str, basedir: Path | None = None) -> tuple[Path, ...]:
    """The builder's files (inputs of its points); PlanError naming the builder when it
    cannot be found, or its parameters cannot take the input shape and the classes."""
    located = locate(builder, basedir)
    params = _ast_params(located.function) if located.function is not None else None
    if params is not None:
        style = call_style(params)
        if isinstance(style, str):
            name = BUILDER.match(builder)["function"]
            raise PlanError(f"sweep.models: '{builder}': {name}({signature_text(params)}): "
                            f"{style}")
    return located.files


def source_files(builder: str) -> tuple[Path, ...]:
    """The files that define `builder` (empty when they cannot be found)."""
    try:
        return locate(builder).files
    except PlanError:
        return ()


# --- at job time ----------------------------------------------------------------------------

def load(builder: str):
    """The builder function (imports its file, or its module with the working directory
    first on the import path, as planning looked it up)."""
    match = BUILDER.match(builder or "")
    if match is None:
        raise RunError(f"--model-from '{builder}' is not path/to/file.py:function or "
                       "package.module:function", 2)
    where, function = match["where"], match["function"]
    try:
        if where.endswith(".py") and (inside := package_module(Path(where))):
            sys.path.insert(0, str(inside[0]))  # a package's module: its relative imports
            module = importlib.import_module(inside[1])
        elif where.endswith(".py"):
            spec = importlib.util.spec_from_file_location(f"dlscale_user_{Path(where).stem}",
                                                          where)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(where)
    except Exception as exc:  # the user's code: any error is the point's failure reason
        raise RunError(f"model {builder} could not be imported: "
                       f"{type(exc).__name__}: {exc}", 2) from None
    build = getattr(module, function, None)
    if not callable(build):
        raise RunError(f"model {builder}: {where} defines no function {function}", 2)
    return build


def _params(function) -> list[Param] | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    return [(p.name, p.kind.name, p.default is not inspect.Parameter.empty
             or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
            for p in signature.parameters.values()]


def build(builder: str, input_shape: tuple[int, int, int], num_classes: int):
    """The user's model, checked: a Keras model with one output of num_classes values."""
    from dlscale.train import keraschoice

    keras = keraschoice.keras()
    function = load(builder)
    params = _params(function)
    style = call_style(params) if params is not None else (SHAPE_NAMES[0], CLASS_NAMES[0])
    if isinstance(style, str):
        raise RunError(f"model {builder}: {style}", 2)
    shape = tuple(input_shape)
    try:
        model = (function(shape, num_classes) if style is None
                 else function(**{style[0]: shape, style[1]: num_classes}))
    except Exception as exc:
        raise RunError(f"model {builder} raised {type(exc).__name__}: {exc}", 2) from None
    if keraschoice.trains_on_torch() and not isinstance(model, keras.Model):
        model = torch_model(keras, model, shape, builder)
    if not isinstance(model, keras.Model):
        kind = f"{type(model).__module__}.{type(model).__name__}"
        other = {"keras": 3, "tf_keras": 2}.get(kind.split(".")[0])
        hint = (f"it is a Keras {other} model: set training.keras to {other}, or build it with "
                f"{'`import keras`' if keraschoice.keras_version() == 3 else '`import tf_keras`'}"
                if other and other != keraschoice.keras_version() else
                "build it with `import keras`" if keraschoice.keras_version() == 3 else
                "build it with `from tensorflow import keras`")
        raise RunError(f"model {builder} returned a {kind}, not a model of the Keras this "
                       f"point trains with (Keras {keraschoice.keras_version()}: {keras.__name__} "
                       f"{keras.__version__}): {hint}", 2)
    try:  # called on the input dlscale feeds it: builds a model given no keras.Input
        output = model(keras.Input(shape=shape))
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise RunError(f"model {builder} cannot take images of shape (None, {shape[0]}, "
                       f"{shape[1]}, {shape[2]}): {type(exc).__name__}: {first}", 2) from None
    got = tuple(output.shape) if not isinstance(output, (list, tuple, dict)) else None
    if got is None or len(got) != 2 or got[-1] != num_classes:
        shown = got if got is not None else f"{type(output).__name__} of outputs"
        raise RunError(f"model {builder} outputs shape {shown}, but the data has "
                       f"{num_classes} classes: expected (None, {num_classes})", 2)
    return model


def torch_model(keras, module, shape: tuple, builder: str):
    """Your `torch.nn.Module` (on backend torch) as a Keras model of NHWC images, the
    module given them as N x C x H x W (PyTorch's order): it returns logits."""
    import torch

    if not isinstance(module, torch.nn.Module):
        return module  # not a model: said below
    if not any(p.requires_grad for p in module.parameters()):  # torch.optim refuses it
        raise RunError(f"model {builder} returned the torch.nn.Module {type(module).__name__}, "
                       "which has no trainable parameters (module.parameters() is empty): "
                       "expected layers assigned as its attributes in __init__ "
                       "(self.conv = torch.nn.Conv2d(...)), which torch's optimizer trains", 2)
    from dlscale.train.frameworks.torch.torchloop import module_layer

    inputs = keras.Input(shape=shape)
    try:
        outputs = module_layer(keras, inputs, module, "user_module")
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        raise RunError(f"model {builder} cannot take images of shape (N, {shape[2]}, "
                       f"{shape[0]}, {shape[1]}) (PyTorch's order): {type(exc).__name__}: "
                       f"{first}", 2) from None
    return keras.Model(inputs, outputs, name=type(module).__name__)


def ends_in_softmax(model) -> bool:
    """Whether the model's last layer applies a softmax (its output is probabilities)."""
    layer = model.layers[-1]
    activation = getattr(layer, "activation", None)
    return (getattr(activation, "__name__", "") == "softmax"
            or type(layer).__name__ == "Softmax")
