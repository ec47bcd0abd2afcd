"""The gradient an external log's model all-reduces each step, without building it.

A log that dlscale did not make names its model but holds no breakdown.json, so the
prediction takes the gradient's size from the models table (dlscale.core.models): its
float32 trainable weights as the classic study builds it (10 classes, 128 px,
weights=None). Building a model there would cost TensorFlow's start and the build in an
analysis step that otherwise needs neither, and fail where TensorFlow is not installed.
The table's sizes are written from the installed Keras:

  python -m dlscale.reporting.gradients --write   # after a Keras upgrade
  python -m dlscale.reporting.gradients --write --model TinyNet   # one new row

tests/unit/test_explain.py builds some of them again and checks the table. A name the
table lacks (a model of a newer Keras) is built as before.
"""

from __future__ import annotations

import argparse
import csv
import sys

from dlscale.core import models
from dlscale.core.models import ASSUMED_CLASSES, ASSUMED_SIZE


def known() -> dict[str, int]:
    """The models table's sizes: model name -> float32 gradient bytes."""
    return {m.name: m.gradient_bytes for m in models.table().values() if m.gradient_bytes}


def built(name: str) -> int | None:
    """The gradient's bytes of `name` built with Keras (2, as the classic study), or None
    for a name dlscale cannot build."""
    from dlscale.core.errors import RunError
    from dlscale.measure.profwindow import gradient_bytes
    from dlscale.train import keraschoice, training

    keraschoice.use_keras(2)
    try:
        model = training.build_model(name, (32, 32, 3), ASSUMED_CLASSES, ASSUMED_SIZE)
    except (RunError, ValueError):
        return None
    return gradient_bytes(model)  # as a point's window counts it


def model_gradient_bytes(name: str) -> int | None:
    """The float32 gradient of a built-in or keras.applications model with
    ASSUMED_CLASSES classes at ASSUMED_SIZE px (the size matters only where a model
    flattens its features: VGG, SimpleCNN), or None for a name dlscale cannot build."""
    return known().get(name) or built(name)


def applications() -> list[str]:
    """Every model name of the installed Keras 2's keras.applications."""
    from dlscale.train import keraschoice

    keraschoice.use_keras(2)
    keras = keraschoice.keras()
    return sorted(n for n in dir(keras.applications) if n[:1].isupper())


def write(only: list[str] | None = None) -> int:
    """Build every model of the table and of keras.applications (or the rows named in
    `only`, the others keeping their sizes), and write the table's gradient_bytes
    (atomically): a new keras.applications model gets a row, with keras.applications'
    usual smallest image size."""
    from dlscale.core.files import atomic
    from dlscale.train import keraschoice

    table = dict(models.table())
    unknown = sorted(set(only or ()) - set(table))
    if unknown:
        raise SystemExit(f"--model {', '.join(unknown)}: not a row of {models.TABLE}; "
                         "add its row first (docs/development.md, 'A built-in model')")
    for name in applications() if only is None else ():
        table.setdefault(name, models.Model(name, models.APPLICATIONS,
                                            models.DEFAULT_MIN_IMAGE_SIZE, None))
    rows = []
    for model in table.values():
        kept = model.builder == models.TORCHVISION or (only and model.name not in only)
        size = model.gradient_bytes if kept else built(model.name)  # (torch's: kept)
        print(f"{model.name}: {size}", file=sys.stderr)
        rows.append([model.name, model.builder, model.min_image_size, size or ""])
    comments = [line for line in models.TABLE.read_text().splitlines(keepends=True)
                if line.startswith("#") and "tf_keras" not in line]
    keras = keraschoice.keras()
    with atomic(models.TABLE) as tmp, open(tmp, "w", newline="") as f:
        f.writelines(comments)
        f.write(f"# gradient_bytes written by `python -m dlscale.reporting.gradients --write` "
                f"(tf_keras {keras.__version__})\n")
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(models.HEADER)
        writer.writerows(rows)
    models.table.cache_clear()
    return len(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="build every model and write the models table's gradient sizes")
    parser.add_argument("--model", action="append", metavar="NAME",
                        help="with --write: build only this row's model (repeatable), the "
                        "others keeping their sizes")
    args = parser.parse_args(argv)
    if not args.write:
        parser.print_help()
        return 2
    print(f"wrote {write(args.model)} models to {models.TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
