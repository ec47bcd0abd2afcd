"""The gradient an external log's model all-reduces each step, without building it.

A log that dlscale did not make names its model but holds no breakdown.json, so the
prediction takes the gradient's size from the model itself: its trainable weights in
float32, as the classic study builds it (ASSUMED_CLASSES classes, ASSUMED_SIZE px,
weights=None). Building one costs TensorFlow's start and the build (on this project's
VM about 4 s and, over the 71 models, 4.5 s each on average) in an analysis step that
otherwise needs neither, and fails where TensorFlow is not installed; so the sizes of
every keras.applications model are kept in gradients.csv beside this module, written from
the installed Keras:

  python -m dlscale.reporting.gradients --write   # after a Keras upgrade

tests/unit/test_explain.py builds some of them again and checks the file. Names the file
lacks (dlscale's own small models, a model of a newer Keras) are built as before.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ASSUMED_CLASSES, ASSUMED_SIZE = 10, 128  # the classic study: CIFAR-10 at 128 px
TABLE = Path(__file__).with_name("gradients.csv")
HEADER = ["model", "gradient_bytes"]


def known() -> dict[str, int]:
    """gradients.csv: model name -> float32 gradient bytes."""
    with TABLE.open(newline="") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {row["model"]: int(row["gradient_bytes"]) for row in rows}


def built(name: str) -> int | None:
    """The gradient's bytes of `name` built with Keras (2, as the classic study), or None
    for a name dlscale cannot build."""
    from dlscale.core.errors import RunError
    from dlscale.train import keraschoice, training
    from dlscale.train.profwindow import gradient_bytes

    keraschoice.use_keras(2)
    try:
        model = training.build_model(name, (32, 32, 3), ASSUMED_CLASSES, ASSUMED_SIZE)
    except (RunError, ValueError):
        return None
    return gradient_bytes(model)  # as a point's window counts it


def model_gradient_bytes(name: str) -> int | None:
    """The float32 gradient of a built-in or keras.applications model with
    ASSUMED_CLASSES classes at ASSUMED_SIZE px (the size matters only where a model
    flattens its features: VGG), or None for a name dlscale cannot build."""
    return known().get(name) or built(name)


def applications() -> list[str]:
    """Every model name of the installed Keras 2's keras.applications."""
    from dlscale.train import keraschoice

    keraschoice.use_keras(2)
    keras = keraschoice.keras()
    return sorted(n for n in dir(keras.applications) if n[:1].isupper())


def write(path: Path = TABLE) -> int:
    """Build every keras.applications model and write gradients.csv (atomically)."""
    from dlscale.core.files import atomic
    from dlscale.train import keraschoice

    rows = []
    for name in applications():
        size = built(name)
        print(f"{name}: {size}", file=sys.stderr)
        if size:
            rows.append([name, size])
    keras = keraschoice.keras()
    with atomic(path) as tmp, open(tmp, "w", newline="") as f:
        f.write(f"# python -m dlscale.reporting.gradients --write (tf_keras "
                f"{keras.__version__}): float32 trainable weights, weights=None, "
                f"{ASSUMED_CLASSES} classes, {ASSUMED_SIZE} px\n")
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(rows)
    return len(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true",
                        help="build every keras.applications model and write gradients.csv")
    args = parser.parse_args(argv)
    if not args.write:
        parser.print_help()
        return 2
    print(f"wrote {write()} models to {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
