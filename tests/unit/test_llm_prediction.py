"""A language model's series predicted (issue 97, item 7): its gradient from the parameter
count at the dtype it trains in, its step from the output, its batch the tokens of a
step. The figures come from the real captures' own lines (tests/data/llm-chapter: the
chapter's benchmark.py under torchrun; tests/data/llm-logs: torchtitan on 8 B200)."""

from __future__ import annotations

import math
import re

import pandas as pd
import pytest
from conftest import ROOT

from dlscale.logparse.reader import parse_file_runs
from dlscale.reporting.prediction.links import Link
from dlscale.reporting.prediction.series import series_prediction
from dlscale.reporting.prediction.tokens import HALF, parameter_bytes

CHAPTER = ROOT / "tests" / "data" / "llm-chapter"
TITAN = ROOT / "tests" / "data" / "llm-logs" / "torchtitan_qwen3-14b_8xB200_run217.log"
LLAMA_1B = 1_235_814_400  # Llama-3.2-1B's parameters (its config: tied embeddings)


def test_torchtitans_parameters_and_step_are_read_from_its_lines():
    text = TITAN.read_text()
    [run] = parse_file_runs(str(TITAN))
    [size] = re.findall(r"size: ([\d,]+) total parameters", text)
    assert run.facts["parameters"] == int(size.replace(",", ""))
    local, length = (int(x) for x in re.findall(
        r"local batch size (\d+),.*sequence length (\d+)", text)[0])
    # its tps is one device's: a step is one device's tokens over it
    assert run.per_gpu and run.facts["step_time_s"] == pytest.approx(local * length / run.rate)
    # its launch trains in bfloat16 throughout (--training.dtype): 2 bytes a gradient
    [dtype] = re.findall(r"--training\.dtype=(\w+)", text)
    assert run.facts["param_dtype"] == dtype == "bfloat16"
    assert parameter_bytes(pd.DataFrame({"param_dtype": [dtype]})) == (
        2, "param_dtype bfloat16")


@pytest.mark.parametrize("name", ["tokens_1rank_sdpa_b2_fp32.out",
                                  "tokens_2rank_sdpa_b4_fp32.out"])
def test_the_trainers_step_is_one_over_its_steps_per_second(name):
    path = CHAPTER / name
    [run] = parse_file_runs(str(path))
    steps = re.findall(r"\[default0\]:.*'train_steps_per_second': '([\d.]+)'",
                       path.read_text())[-1]
    assert run.facts["step_time_s"] == pytest.approx(1 / float(steps))
    assert "parameters" not in run.facts  # the chapter's output does not state them


def test_a_llama_of_1_2_billion_parameters_in_bf16_all_reduces_2_5_gb():
    knob = pd.DataFrame({"model_precision": ["bf16", "bf16"]})
    assert parameter_bytes(knob)[0] * LLAMA_1B == pytest.approx(2.47e9, rel=1e-3)
    assert parameter_bytes(pd.DataFrame({"model_precision": ["fp32"]}))[0] == 4
    # mixed precision keeps float32 gradients
    assert parameter_bytes(pd.DataFrame({"precision": ["mixed_bfloat16"]}))[0] == 4
    assert {"bf16", "fp16"} <= HALF


def chapter_points(precision: str, parameters: int | None) -> pd.DataFrame:
    """The chapter's sdpa series at 1 and 2 ranks (micro-batch 2) from its captures, as
    scaling.csv holds it."""
    rows = []
    for ranks in (1, 2):
        [run] = parse_file_runs(str(CHAPTER / f"tokens_{ranks}rank_sdpa_b2_{precision}.out"))
        rows.append({"series": "llama", "gpus": ranks, "nodes": 1, "unit": "tokens",
                     "tokens_per_s": run.rate * ranks, "step_time_s": run.facts["step_time_s"],
                     "parameters": parameters, "model_precision": precision,
                     "epoch_time_ci95": math.nan, "epoch_time_s": math.nan})
    points = pd.DataFrame(rows)
    points["efficiency"] = (points["tokens_per_s"] / points["gpus"]
                            / points["tokens_per_s"].iloc[0])
    return points


NETWORK = {"within_node": (Link(5e-6, 10e9), "given")}


def test_a_token_series_is_predicted_from_its_parameters_and_steps():
    points = chapter_points("bf16", LLAMA_1B)
    rows = pd.DataFrame(series_prediction("llama", points, pd.DataFrame(columns=["series"]),
                                          {}, network=NETWORK))
    assert (rows["gradient_bytes"] == LLAMA_1B * 2).all()
    fit = rows[rows["role"] == "fit"].iloc[0]
    assert fit["measured_step_s"] == pytest.approx(points["step_time_s"].iloc[0])
    assert fit["error"] == pytest.approx(0, abs=1e-9)  # a fit point gives its step back
    held = rows[rows["role"] == "held out"].iloc[0]
    assert held["measured_step_s"] == pytest.approx(points["step_time_s"].iloc[1])
    assert math.isfinite(held["predicted_step_s"]) and math.isfinite(held["error"])
    assert (rows["role"] == "extrapolated").sum() == 2
    assert rows["note"].str.contains("1,235,814,400 parameters at 2 bytes "
                                     "\\(model_precision bf16\\)").all()


def test_without_parameters_a_token_series_says_what_is_missing():
    points = chapter_points("fp32", None)
    rows = pd.DataFrame(series_prediction("llama", points, pd.DataFrame(columns=["series"]),
                                          {}, network=NETWORK))
    assert (rows["role"] == "measured").all() and "predicted_step_s" not in rows
    assert rows["note"].str.contains("no line of its output states them").all()
    assert rows["measured_step_s"].tolist() == pytest.approx(points["step_time_s"].tolist())


def test_a_commands_parameters_reach_its_record(tmp_path):
    import shlex

    from dlscale.core.schema import validate
    from dlscale.launch.command import build_parser
    from dlscale.plan.study import Study

    config = {"sweep": {"models": [], "gpus": [1, 2], "commands": {"llama": {
        "run": "python bench.py --gpus {gpus}", "parameters": LLAMA_1B}}}}
    validate(config)
    s = Study(config, tmp_path)
    flags = shlex.split(s.command_flags(next(iter(s.points.values()))))
    args = build_parser().parse_args([*flags, "--out", str(tmp_path)])
    assert args.parameters == LLAMA_1B


def test_a_run_of_steps_cut_short_of_its_total_says_it_is_unfinished(tmp_path):
    # the real torchtitan log as a job cancelled after its sixth step would leave it
    lines = TITAN.read_text().splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if re.search(r"step:\s+6 ", line))
    cut = tmp_path / "cut.log"
    cut.write_text("".join(lines[:last + 1]))
    [whole], [part] = parse_file_runs(str(TITAN)), parse_file_runs(str(cut))
    assert "unfinished" not in whole.facts
    assert part.facts["unfinished"] == "its steps stopped at 6 of the 10 it was to take"
    assert part.facts["steps_done"] == 6 and any("unfinished" in w for w in part.warnings)
