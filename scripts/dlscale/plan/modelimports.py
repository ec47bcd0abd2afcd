"""What your model's files import, read with ast and never run: the modules of your own
tree they import (inputs of its points: an edit to a helper trains them again), and the
Keras and backend they need (refused at planning when the points train with others)."""

from __future__ import annotations

import ast
from pathlib import Path

from dlscale.core.errors import PlanError
from dlscale.train.usermodel import _imported, _parse, module_file


def local_imports(files: tuple[Path, ...], builder: str,
                  basedir: Path | None = None) -> tuple[Path, ...]:
    """`files` and every module of the user's own tree (below the working directory) that
    they import, at any depth and transitively, read with ast: the inputs of the builder's
    points, so that an edit to a helper trains them again. PlanError naming the file and
    line for a relative import that reaches no module, and for modules that import names
    from each other at their top level (a circle: one finds the other half-initialised);
    either would fail when the job imports them."""
    root = (Path(basedir) if basedir is not None else Path.cwd()).resolve()
    found = dict.fromkeys(Path(f).resolve() for f in files)
    pending = list(found)
    names_from: dict[Path, set[Path]] = {}  # a module -> those it imports names from
    while pending:
        path = pending.pop()
        try:
            parts = list(path.relative_to(root).with_suffix("").parts)
        except ValueError:  # outside the tree: installed code, not followed
            continue
        package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if package else parts)
        for node in ast.walk(_parse(path, builder)):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _imported(node, module or None, package)
                source = module_file(base, [root]) if base else None
                if node.level and source is None:
                    dots = "." * node.level + (node.module or "")
                    raise PlanError(f"sweep.models: '{builder}': {path}, line {node.lineno}: "
                                    f"'from {dots} import ...' reaches no module of "
                                    f"{root}: it would fail when the point's job imports it")
                targets = [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]
                if source is not None and node.col_offset == 0 and any(
                        module_file(f"{base}.{a.name}", [root]) is None for a in node.names):
                    names_from.setdefault(path, set()).add(source.resolve())
            else:
                continue
            for target in filter(None, targets):
                file = module_file(target, [root])
                if file is not None and file.resolve() not in found:
                    found[file.resolve()] = None
                    pending.append(file.resolve())
    if circle := _circle(names_from):
        raise PlanError(f"sweep.models: '{builder}': " + ", which imports from ".join(
            str(p) for p in circle) + ": a circular import of names fails when the point's "
            "job imports them; move what both need into a third module")
    return tuple(found)


def _circle(edges: dict[Path, set[Path]]) -> list[Path] | None:
    """A cycle of the graph (its first node repeated at the end), or None."""
    state: dict[Path, int] = {}  # 1: on the current path, 2: done
    trail: list[Path] = []

    def visit(node: Path) -> list[Path] | None:
        state[node] = 1
        trail.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        trail.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return None


def top_packages(path: Path) -> set[str]:
    """The installed packages a file imports (`import keras.ops`, `from jax import numpy`:
    keras, jax), read with ast; relative imports are the user's own."""
    names = set()
    for node in ast.walk(_parse(Path(path), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return names


def imports_jax(imported: dict[Path, set[str]]) -> Path | None:
    """The first file (of {file: top_packages}) that imports jax or flax; None if none does."""
    return next((Path(path) for path, names in imported.items() if names & {"jax", "flax"}),
                None)


# the modules that name one Keras whatever the environment (`from tensorflow import
# keras` follows training.keras: it is not listed)
KERAS_MODULES = {"keras": 3, "tf_keras": 2}


def keras_of(files) -> int | None:
    """The Keras the builder's files import (3: `keras`, 2: `tf_keras`), read with ast;
    None when they name neither, or both."""
    return _keras(top_packages(Path(path)) for path in files)


def _keras(imported) -> int | None:
    seen = {KERAS_MODULES[name] for names in imported for name in names & KERAS_MODULES.keys()}
    return seen.pop() if len(seen) == 1 else None


def keras_problem(builder: str, imported: int | None, asked: int) -> str | None:
    """Why a model whose files import Keras `imported` cannot train with Keras `asked`."""
    if imported is None or imported == asked:
        return None
    module = "keras" if imported == 3 else "tf_keras"
    return (f"sweep.models: '{builder}' imports {module} (Keras {imported}), but its points "
            f"train with Keras {asked}: set training.keras (or sweep.keras) to {imported}, or "
            f"build it with {'`import keras`' if asked == 3 else '`import tf_keras`'}")


def check(builder: str, files: tuple[Path, ...], points: list,
          software: dict | None = None) -> None:
    """PlanError when the builder's files import a Keras or a backend that some of its
    points (`points`, the builder's) do not train with, or TensorFlow where it is not
    installed (a JAX-only environment; `software`: modules or a container the jobs load
    may hold it: not judged)."""
    from dlscale.train.keraschoice import tensorflow_installed

    imported = {path: top_packages(path) for path in files}  # each file read once
    if (jax_file := imports_jax(imported)) and any(p.backend != "jax" for p in points):
        raise PlanError(f"sweep.models: '{builder}': {jax_file} imports jax, which its "
                        "TensorFlow points cannot run: set training.backend to jax")
    torch_file = next((Path(path) for path, names in imported.items()
                       if names & {"torch", "torchvision"}), None)
    if torch_file and (other := next((p for p in points if p.backend != "torch"), None)):
        raise PlanError(f"sweep.models: '{builder}': {torch_file} imports torch, which its "
                        f"{other.backend} points cannot run: set training.backend (or "
                        "sweep.backend) to torch")
    tf_file = next((Path(path) for path, names in imported.items()
                    if names & {"tensorflow", "tf_keras"}), None)
    loads = software and (software.get("modules") or software.get("container"))
    if tf_file and not loads and not tensorflow_installed():
        raise PlanError(f"sweep.models: '{builder}': {tf_file} imports tensorflow, which is "
                        "not installed here (a JAX-only environment): build the model with "
                        "`import keras` (Keras 3 on JAX), or install TensorFlow "
                        "(requirements.txt)")
    keras = _keras(imported.values())
    for asked in dict.fromkeys(p.keras for p in points):
        if problem := keras_problem(builder, keras, asked):
            raise PlanError(problem)
