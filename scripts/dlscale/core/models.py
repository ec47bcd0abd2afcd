"""The models dlscale builds by name, declared once: models.csv beside this module.

Each row is a name, its builder (a function of dlscale.train.training,
keras.applications with weights=None, or torchvision.models for backend torch), the
smallest image it accepts and its float32 gradient at ASSUMED_CLASSES classes and
ASSUMED_SIZE px. The schema's model choices, planning's image-size check, the gradient
of an outside log's model and the docs are read from here (docs/development.md, "A
built-in model"). Cheap: no TensorFlow, no pandas.
"""

from __future__ import annotations

import csv
import difflib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

TABLE = Path(__file__).with_name("models.csv")
HEADER = ("model", "builder", "min_image_size", "gradient_bytes")
APPLICATIONS = "keras.applications"  # the builder of every keras.applications row
TORCHVISION = "torchvision.models"  # torchvision's models by their names: backend torch only
ASSUMED_CLASSES, ASSUMED_SIZE = 10, 128  # the classic study: CIFAR-10 at 128 px
DEFAULT_MIN_IMAGE_SIZE = 32  # keras.applications' own floor for most families


@dataclass(frozen=True)
class Model:
    name: str
    builder: str  # a function of dlscale.train.training, or APPLICATIONS
    min_image_size: int  # px
    gradient_bytes: int | None  # float32 trainable weights; None where not yet measured


def parse(text: str) -> dict[str, Model]:
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    if tuple(rows.fieldnames or ()) != HEADER:
        raise ValueError(f"{TABLE}: header {rows.fieldnames}: expected {', '.join(HEADER)}")
    return {row["model"]: Model(row["model"], row["builder"], int(row["min_image_size"]),
                                int(row["gradient_bytes"]) if row["gradient_bytes"] else None)
            for row in rows}


@cache
def table() -> dict[str, Model]:
    """models.csv: name -> Model, in the file's order (dlscale's own models first)."""
    return parse(TABLE.read_text())


def names() -> tuple[str, ...]:
    return tuple(table())


def own() -> tuple[str, ...]:
    """dlscale's own models (built by a function of dlscale.train.training)."""
    return tuple(m.name for m in table().values()
                 if m.builder not in (APPLICATIONS, TORCHVISION))


def torch_only(name: str) -> bool:
    """Whether `name` is one of torchvision's models (trained on backend torch only)."""
    model = table().get(name)
    return model is not None and model.builder == TORCHVISION


def min_image_size(name: str) -> int:
    """The smallest input `name` accepts: 1 for a model not in the table (your own)."""
    model = table().get(name)
    return model.min_image_size if model else 1


def render() -> str:
    """The Markdown table of every model (docs/configuration.md's model list)."""
    lines = ["| model | builder | smallest image [px] | gradient [MiB] |", "|---|---|---|---|"]
    for m in table().values():
        size = mib(m.gradient_bytes) if m.gradient_bytes else "-"
        lines.append(f"| `{m.name}` | {m.builder} | {m.min_image_size} | {size} |")
    return "\n".join(lines) + "\n"


def mib(size: int) -> str:
    """`size` bytes in MiB as the models table shows it: one decimal from 1 MiB, two
    significant digits below (a small CNN's 0.021, not 0.0)."""
    value = size / 2**20
    return f"{value:.1f}" if value >= 1 else f"{value:.2g}"


def closest(name: str, known) -> str | None:
    """The name of `known` that `name` most likely meant, or None: the same name in
    another case first (ResNet18: torchvision's resnet18, where difflib on the names as
    written offered ResNet152), else the closest of the case-folded names."""
    folded: dict[str, str] = {}
    for candidate in known:
        folded.setdefault(candidate.casefold(), candidate)
    if name.casefold() in folded:
        return folded[name.casefold()]
    close = difflib.get_close_matches(name.casefold(), list(folded), n=1)
    return folded[close[0]] if close else None
