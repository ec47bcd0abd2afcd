"""sweep.knobs: a script's own settings as axes of the sweep (`NAME: [values]`), every
combination a point: a `{NAME}` placeholder of every command, a folder level and series
word where it varies (`llm/attention-sdpa/gpus2/rep1`, series `llm attention=sdpa`), a
column of runs.csv and scaling.csv (dlscale.reporting.seriesparts.with_knobs). dlscale's own
points take the knobs they understand (OWN_KNOBS): batch_per_gpu, their batch per GPU, and
on backend torch num_workers (the DataLoader's input processes) and compile (torch.compile).
"""

from __future__ import annotations

import dataclasses
import itertools

from dlscale.core.errors import PlanError
from dlscale.core.vocabulary import BATCH_KNOB, knob_text


class KnobError(PlanError):
    """A knob that cannot be what it says (said as "invalid sweep: ...")."""

    def __str__(self) -> str:
        return f"invalid sweep: {super().__str__()}"


# the knobs dlscale's own PyTorch points take beside the batch (train.py's --num-workers
# and --compile)
TORCH_KNOBS = ("num_workers", "compile")
OWN_KNOBS = frozenset({BATCH_KNOB, *TORCH_KNOBS})


def knob_sets(config: dict, understood=None) -> list[tuple[tuple[str, object], ...]]:
    """Every combination of sweep.knobs, as (name, value) pairs in the config's order;
    `understood`: only those knobs (dlscale's own points). [()] without any."""
    knobs = {name: values for name, values in (config["sweep"].get("knobs") or {}).items()
             if understood is None or name in understood}
    return [tuple(zip(knobs, values)) for values in itertools.product(*knobs.values())]


def check_knobs(config: dict) -> None:
    """SweepError for a knob whose name is a column dlscale writes or a placeholder of its
    own (batch_per_gpu excepted: it is the batch), or a batch knob under strong scaling."""
    from dlscale.core.columns import RUNS_CSV, SCALING_COLUMNS
    from dlscale.launch.command import PLACEHOLDERS

    knobs = config["sweep"].get("knobs") or {}
    taken = {c.name for c in RUNS_CSV} | set(SCALING_COLUMNS) | set(PLACEHOLDERS) | {"knobs"}
    for name in knobs:
        if name in taken and name != BATCH_KNOB:
            raise KnobError(f"sweep.knobs.{name}: {name} is a column or placeholder of "
                             "dlscale's own; name the knob otherwise (e.g. my_{name})")
    for value in knobs.get(BATCH_KNOB, []):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise KnobError(f"sweep.knobs.batch_per_gpu: {value!r} is not a batch: expected "
                             "whole numbers of 1 or more, e.g. [16, 32, 64]")
    others = [name for name in knobs if name not in OWN_KNOBS]
    if others and not config["sweep"]["commands"]:
        raise KnobError(f"sweep.knobs.{others[0]}: a knob of your script's is a placeholder "
                         "of sweep.commands, and the study has none (dlscale's own points "
                         f"take {', '.join(sorted(OWN_KNOBS))})")
    check_torch_knobs(config, knobs)
    check_device(config)
    if BATCH_KNOB in knobs and config["sweep"]["scaling"] == "strong":
        raise KnobError("sweep.knobs.batch_per_gpu: sweep.scaling strong keeps the global "
                         "batch (training.global_batch): sweep the batch with weak scaling")


def check_torch_knobs(config: dict, knobs: dict) -> None:
    """KnobError for num_workers or compile values that are not what the flag takes, or
    for either where dlscale's own points train on a backend other than torch."""
    for value in knobs.get("num_workers", []):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise KnobError(f"sweep.knobs.num_workers: {value!r} is not a count of "
                             "DataLoader workers: expected whole numbers of 0 or more, e.g. "
                             "[0, 2, 4]")
    for value in knobs.get("compile", []):
        if not isinstance(value, bool):
            raise KnobError(f"sweep.knobs.compile: {value!r} is not true or false: expected "
                             "[false, true]")
    sweep, training = config["sweep"], config["training"]
    backends = sweep.get("backend") or [training["backend"]]
    asked = [name for name in TORCH_KNOBS if name in knobs]
    if asked and sweep["models"] and (training["keras"] != 3 or backends != ["torch"]):
        others = [b for b in backends if b != "torch"] or [f"Keras {training['keras']}"]
        raise KnobError(f"sweep.knobs.{asked[0]}: dlscale's own points take it on backend "
                         f"torch only (training.keras 3, backend torch), and this study "
                         f"trains on {others[0]}: leave it out, or train on torch")


# knob values that need a GPU: refused at planning on a CPU study (training.device cpu)
GPU_ONLY_VALUES = {"flash_attention_2": "FlashAttention 2 (flash-attn) runs on CUDA GPUs only"}
GPU_ONLY_SWITCHES = {"liger": "Liger kernels (Triton) run on GPUs only",
                     "use_liger_kernel": "Liger kernels (Triton) run on GPUs only"}


def check_device(config: dict) -> None:
    """KnobError for a knob value that needs a GPU in a study on CPUs."""
    if config["training"]["device"] != "cpu":
        return
    for name, values in (config["sweep"].get("knobs") or {}).items():
        for value in values:
            why = GPU_ONLY_VALUES.get(str(value)) or (
                GPU_ONLY_SWITCHES.get(name) if value is True or str(value).lower() == "true"
                else None)
            if why:
                raise KnobError(f"sweep.knobs.{name}: {value!r} needs a GPU ({why}), but "
                                "training.device is cpu: leave it out of a CPU study")


def knob_level(name: str, value) -> str:
    """A knob's folder level and series word: `attention=sdpa` (a folder's `attention-sdpa`)."""
    return f"{name}={knob_text(value)}"


def with_knobs(point, knobs: tuple, varied: set):
    """The point with its knobs: a folder level and a series word each varied one."""
    if not knobs:
        return point
    words = [knob_level(n, v) for n, v in knobs if n in varied]
    parts = point.key.split("/")
    key = "/".join([parts[0], *(w.replace("=", "-") for w in words), *parts[1:]])
    return dataclasses.replace(point, key=key, knobs=knobs,
                               series=" ".join([point.series, *words]))
