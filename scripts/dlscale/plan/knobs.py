"""sweep.knobs: a script's own settings as axes of the sweep (`NAME: [values]`), every
combination a point: a `{NAME}` placeholder of every command, a folder level and series
word where it varies (`llm/attention-sdpa/gpus2/rep1`, series `llm attention=sdpa`), a
column of runs.csv and scaling.csv (dlscale.reporting.seriesparts.with_knobs). dlscale's own
points take the knobs they understand: batch_per_gpu, their batch per GPU.
"""

from __future__ import annotations

import dataclasses
import itertools

from dlscale.core.errors import PlanError


class KnobError(PlanError):
    """A knob that cannot be what it says (said as "invalid sweep: ...")."""

    def __str__(self) -> str:
        return f"invalid sweep: {super().__str__()}"


BATCH_KNOB = "batch_per_gpu"  # the one knob dlscale's own points understand (issue 98 adds)


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
    others = [name for name in knobs if name != BATCH_KNOB]
    if others and not config["sweep"]["commands"]:
        raise KnobError(f"sweep.knobs.{others[0]}: a knob of your script's is a placeholder "
                         "of sweep.commands, and the study has none (dlscale's own points "
                         "take batch_per_gpu)")
    check_device(config)
    if BATCH_KNOB in knobs and config["sweep"]["scaling"] == "strong":
        raise KnobError("sweep.knobs.batch_per_gpu: sweep.scaling strong keeps the global "
                         "batch (training.global_batch): sweep the batch with weak scaling")


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


def knob_text(value) -> str:
    """A knob's value as a command and a table are given it: true and false in lower case
    (YAML's, and what a script's flags take), any other as written."""
    return str(value).lower() if isinstance(value, bool) else str(value)


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
