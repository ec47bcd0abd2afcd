"""Throughput and memory against each knob (plots/knobs.png, issues 97 and 98): a row per
knob that takes two values, a line per GPU count and combination of the other knobs, a
token study's rate in tokens per GPU, out-of-memory values marked."""

from __future__ import annotations

import matplotlib.image
import pandas as pd

from dlscale.reporting.knobplots import (
    draw_knobs,
    knob_lines,
    memory_of,
    out_of_memory,
    varied_knobs,
)

# chapter 15's shape: attention x micro-batch on 1 GPU, and one fixed knob (bf16)
SCALING = pd.DataFrame({
    "series": [f"llm attention={a} batch_per_gpu={b} model_precision=bf16"
               for a in ("eager", "sdpa") for b in (6, 37)],
    "attention": ["eager", "eager", "sdpa", "sdpa"], "batch_per_gpu": [6, 37, 6, 37],
    "model_precision": ["bf16"] * 4, "model": ["llm"] * 4, "gpus": [1] * 4,
    "unit": ["tokens"] * 4,
    "images_per_s": [float("nan")] * 4,
    "tokens_per_s_per_gpu": [10485.0, 20000.0, 30000.0, 48081.0],
    "memory_gib": [61.89, 70.1, 40.2, 62.33], "time_to_solution_s": [90.0, 80.0, 60.0, 50.0]})
RUNS = SCALING.assign(knobs="attention,batch_per_gpu,model_precision", status="completed")


def test_each_knob_of_two_values_is_a_row_with_a_line_per_other_combination():
    assert varied_knobs(SCALING) == ["attention", "batch_per_gpu"]  # bf16 alone: none
    lines = list(knob_lines(SCALING, "batch_per_gpu"))
    assert [label for label, *_ in lines] == [
        "llm attention=eager model_precision=bf16, 1 GPU(s)",
        "llm attention=sdpa model_precision=bf16, 1 GPU(s)"]
    label, values, rates, rows = lines[1]
    assert (values, rates, memory_of(rows)) == (["6", "37"], [30000.0, 48081.0], [40.2, 62.33])


def test_a_value_that_ran_out_of_memory_is_marked_and_the_figure_has_a_row_per_knob(
        tmp_path):
    runs = pd.concat([RUNS, RUNS.iloc[[3]].assign(batch_per_gpu=64, status="out_of_memory")])
    assert out_of_memory(runs, SCALING, "batch_per_gpu") == ["64"]
    assert out_of_memory(runs, SCALING, "attention") == []  # sdpa trained at 6 and 37
    written = draw_knobs(SCALING, runs, tmp_path / "knobs")
    assert sorted(p.name for p in written) == ["knobs.png", "knobs.svg"]
    height, width = matplotlib.image.imread(written[0]).shape[:2]
    assert height > 0.55 * width  # two rows; one knob's figure is about 0.35 as high
    one = draw_knobs(SCALING.drop(columns="attention"),
                     RUNS.assign(knobs="batch_per_gpu"), tmp_path / "one")
    height, width = matplotlib.image.imread(one[0]).shape[:2]
    assert height < 0.45 * width


def test_a_study_without_a_varied_knob_draws_one_panel_that_says_so(tmp_path):
    written = draw_knobs(SCALING.iloc[:1], RUNS.iloc[:1], tmp_path / "knobs")
    assert written[0].exists() and varied_knobs(SCALING.iloc[:1]) == []
    assert varied_knobs(SCALING.drop(columns="model")) == []  # not a scaling.csv's layout


def test_the_first_page_says_each_knob_values_throughput_and_memory_per_gpu():
    from dlscale.reporting.firstpage import knob_section

    lines = knob_section(SCALING)
    assert lines[:2] == ["By knob", "-------"]
    assert ("- batch\\_per\\_gpu, llm attention=sdpa model\\_precision=bf16, 1 GPU(s): "
            "6: 30000 tokens/s per GPU, 40.2 GiB, 60 s in all; 37: 48081 tokens/s per GPU, "
            "62.3 GiB, 50 s in all") in lines
    assert knob_section(SCALING.iloc[:1]) == []
