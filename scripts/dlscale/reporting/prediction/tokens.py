"""A language model's series as the prediction models it (issue: the LLM chapter).

Its points count tokens, not images: a step trains the tokens of its global batch, and
its gradient is the model's parameters at the dtype they train in, whatever the tokens.
A Llama of 1.24 B parameters trained in bf16 all-reduces 2.47 GB a step; in float32 (or
in mixed precision, whose master weights and gradients stay float32) twice that. The
model (dlscale.reporting.prediction.model) then reads a point as it reads an image
workload's: its step time (the output's step_time_s), its "batch" the tokens of a step
(tokens/s x the step), so weak scaling (the tokens a GPU trains held) and strong scaling
(the run's held) are told apart as the images' are.
"""

from __future__ import annotations

import pandas as pd

# dtypes of two bytes, as the chapter's knobs (model_precision: bf16) and torch name them
HALF = frozenset({"bf16", "bfloat16", "fp16", "float16", "half"})
NO_PARAMETERS = ("not predicted: a language model's gradient is its parameters, and no "
                 "line of its output states them (give the command's or outside log's "
                 "`parameters`)")
NO_STEP = ("not predicted: a language model's output that gives no step time (a Trainer's "
           "train_steps_per_second, or the tokens of a step) leaves its step unknown")
GRADIENT = ("a language model: its gradient is its {parameters:,} parameters at {size} "
            "bytes ({why}), a point's step the output's step time, its batch the tokens "
            "of a step")


def parameter_bytes(points: pd.DataFrame) -> tuple[int, str]:
    """(bytes a parameter's gradient takes, why): 2 where a precision or dtype column (a
    knob) says bf16 or fp16, else 4."""
    for name in points.columns:
        if "precision" in name or "dtype" in name:
            values = {str(v).lower() for v in points[name].dropna()}
            if values and values <= HALF:
                return 2, f"{name} {'/'.join(sorted(values))}"
    return 4, "float32: no precision or dtype of the points says bf16 or fp16"


def token_points(points: pd.DataFrame) -> tuple[pd.DataFrame | None, int | None, str]:
    """(the points as the model reads them, the gradient's bytes, the note that says so),
    or (None, None, why not predicted). The tokens of a step are rounded to whole tokens
    (the printed rates and steps/s carry 4 to 6 digits)."""
    parameters = pd.to_numeric(points.get("parameters", pd.Series(dtype=float)),
                               errors="coerce").max()
    if pd.isna(parameters):
        return None, None, NO_PARAMETERS
    step = pd.to_numeric(points.get("step_time_s", pd.Series(dtype=float)), errors="coerce")
    rate = pd.to_numeric(points["tokens_per_s"], errors="coerce")
    if len(step) != len(points) or step.isna().any() or rate.isna().any():
        return None, None, NO_STEP
    size, why = parameter_bytes(points)
    tokens = (rate * step).round()
    frame = points.assign(global_batch=tokens, images_per_s=tokens / step)
    note = GRADIENT.format(parameters=int(parameters), size=size, why=why)
    return frame, int(parameters) * size, note


def is_token_series(points: pd.DataFrame) -> bool:
    return "unit" in points and bool((points["unit"] == "tokens").any())
