"""sweep.knobs: a script's own settings as axes of the sweep (issues 97 and 98, built
once for both): every combination a point, a placeholder of every command (quoted), a
folder level and series word, the batch per GPU of dlscale's own points; refused at
planning where a knob cannot be what it says."""

from __future__ import annotations

import copy
import json
import re
import shlex

import pytest
from helpers.studies import torch_python

from dlscale.core.schema import validate
from dlscale.plan.study import PlanError, Study

KNOBS = {"attention": ["eager", "sdpa"], "batch_per_gpu": [6, 37]}
COMMAND = "python bench.py --attn {attention} --batch {batch_per_gpu} --gpus {gpus}"


def study(tmp_path, **sections) -> Study:
    config = copy.deepcopy(sections)
    validate(config)
    return Study(config, tmp_path)


def command_study(tmp_path, command=COMMAND, knobs=None, **sweep) -> Study:
    return study(tmp_path, sweep={"models": [], "gpus": [1, 2], "commands": {"llm": command},
                                  "knobs": knobs or KNOBS, **sweep})


def test_every_combination_of_the_knobs_is_a_point_with_its_folder_and_series(tmp_path):
    s = command_study(tmp_path)
    assert sorted(s.points) == sorted(
        f"llm/attention-{a}/batch_per_gpu-{b}/gpus{g}/rep1"
        for a in ("eager", "sdpa") for b in (6, 37) for g in (1, 2))
    p = s.points["llm/attention-sdpa/batch_per_gpu-37/gpus2/rep1"]
    assert p.series == "llm attention=sdpa batch_per_gpu=37"
    assert (p.batch_per_gpu, p.global_batch) == (37, 74)  # the knob is the batch per GPU
    assert p.knobs == (("attention", "sdpa"), ("batch_per_gpu", 37))


def test_a_knobs_value_reaches_the_command_quoted_and_the_tables_by_name(tmp_path):
    s = command_study(tmp_path, knobs={"attention": ["sdpa", "a+b.c_2"]})
    p = next(p for p in s.points.values() if dict(p.knobs)["attention"] != "sdpa")
    flags = shlex.split(s.command_flags(p))
    assert flags[flags.index("--knob") + 1] == "attention=a+b.c_2"
    meta = shlex.split(s.point_meta(p))
    assert "attention=a+b.c_2" in meta and "knobs=attention" in meta
    from dlscale.launch.command import build_parser, render, values

    args = build_parser().parse_args(flags + ["--out", str(tmp_path)])
    assert shlex.split(render(p.command, values(args)))[3] == "a+b.c_2"


@pytest.mark.parametrize("value", ["../up", "a b", "$(touch x)", ""])
def test_knob_values_that_cannot_name_a_folder_are_refused_by_the_schema(value):
    with pytest.raises(PlanError, match=re.escape(f"sweep.knobs.attention[0]: {value!r}")):
        validate({"sweep": {"knobs": {"attention": [value]}}})


@pytest.mark.parametrize("sweep, words", [
    ({"knobs": {"gpus": [1, 2]}}, "sweep.knobs.gpus: gpus is a column or placeholder"),
    ({"knobs": {"attention": ["sdpa"]}, "commands": {"llm": "python b.py"}},
     "sweep.commands.llm: the command does not use the knob {attention}"),
    ({"knobs": {"batch_per_gpu": [2, 4]}, "scaling": "strong"},
     "sweep.knobs.batch_per_gpu: sweep.scaling strong keeps the global batch"),
    ({"knobs": {"batch_per_gpu": [0, 4]}}, "sweep.knobs.batch_per_gpu: 0 is not a batch"),
    ({"knobs": {"attention": ["a", "b"], "batch_per_gpu": [1, 2, 3]}, "max_points": 10},
     "the sweep combines into 12 points, more than sweep.max_points (10)"),
])
def test_a_knob_that_cannot_be_what_it_says_is_refused_at_planning(tmp_path, sweep, words):
    sections = {"models": [], "gpus": [1, 2],
                "commands": {"llm": "python b.py {attention} {batch_per_gpu}"}, **sweep}
    if sweep.get("scaling") == "strong":
        sections["models"], sections["commands"] = ["SimpleCNN"], {}
    with pytest.raises(PlanError) as refused:
        study(tmp_path, sweep=sections, training={"global_batch": 8})
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_knob_only_commands_take_is_refused_in_a_study_without_commands(tmp_path):
    with pytest.raises(PlanError, match=re.escape(
            "sweep.knobs.attention: a knob of your script's is a placeholder of "
            "sweep.commands, and the study has none")):
        study(tmp_path, sweep={"models": ["SimpleCNN"], "knobs": {"attention": ["sdpa"]}})


def test_dlscales_own_points_take_the_batch_knob_as_their_batch_per_gpu(tmp_path):
    s = study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1, 2],
                               "knobs": {"batch_per_gpu": [16, 32]}})
    p = s.points["SimpleCNN/batch_per_gpu-32/gpus2/rep1"]
    assert (p.batch_per_gpu, p.global_batch, p.series) == (32, 64, "SimpleCNN batch_per_gpu=32")
    flags = shlex.split(s.train_flags(p))
    assert flags[flags.index("--batch-per-gpu") + 1] == "32"
    assert json.loads(shlex.split(s.launch_plan(p))[1])["planned"]["batch_per_gpu"] == 32


@pytest.mark.parametrize("knobs, words", [
    ({"attention": ["sdpa", "flash_attention_2"]},
     "sweep.knobs.attention: 'flash_attention_2' needs a GPU (FlashAttention 2"),
    ({"use_liger_kernel": [False, True]},
     "sweep.knobs.use_liger_kernel: True needs a GPU (Liger kernels"),
])
def test_a_knob_value_that_needs_a_gpu_is_refused_on_a_cpu_study(tmp_path, knobs, words):
    command = "python b.py " + " ".join(f"{{{k}}}" for k in knobs)
    with pytest.raises(PlanError) as refused:
        study(tmp_path, sweep={"models": [], "commands": {"llm": command}, "knobs": knobs},
              training={"device": "cpu"})
    assert words in str(refused.value) and "\n" not in str(refused.value)
    assert study(tmp_path, sweep={"models": [], "commands": {"llm": command}, "knobs": knobs},
                 training={"device": "gpu"}).points  # on GPUs it plans


def test_a_true_or_false_knob_reaches_the_command_as_yaml_writes_it(tmp_path):
    s = command_study(tmp_path, command="python b.py --use_liger_kernel {liger}",
                      knobs={"liger": [False, True]})
    p = s.points["llm/liger-true/gpus1/rep1"]
    flags = shlex.split(s.command_flags(p))
    assert flags[flags.index("--knob") + 1] == "liger=true"  # (True before: no flag takes it)
    assert "liger=true" in shlex.split(s.point_meta(p))


def test_dlscales_own_torch_points_take_num_workers_and_compile_as_flags_and_columns(
        tmp_path):
    """On backend torch, num_workers and compile reach train.py (--num-workers, --compile)
    and are a folder level, a series word and a column each (issue 98 item 1)."""
    torch_python(tmp_path)
    s = study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1],
                               "knobs": {"num_workers": [0, 2], "compile": [False, True]}},
              training={"keras": 3, "backend": "torch"})
    assert sorted(s.points) == sorted(
        f"SimpleCNN/num_workers-{w}/compile-{c}/gpus1/rep1"
        for w in (0, 2) for c in ("false", "true"))
    p = s.points["SimpleCNN/num_workers-2/compile-true/gpus1/rep1"]
    assert p.series == "SimpleCNN num_workers=2 compile=true"
    flags = shlex.split(s.train_flags(p))
    assert flags[flags.index("--num-workers") + 1] == "2" and "--compile" in flags
    assert "--no-compile" in shlex.split(
        s.train_flags(s.points["SimpleCNN/num_workers-0/compile-false/gpus1/rep1"]))
    meta = shlex.split(s.point_meta(p))
    assert {"num_workers=2", "compile=true", "knobs=num_workers,compile"} <= set(meta)
    from dlscale.train.settings import parse

    settings = parse(flags + ["--out", str(tmp_path), "--data-dir", str(tmp_path)])
    assert (settings.num_workers, settings.compile) == (2, True)
    assert settings.planned()["num_workers"] == 2


@pytest.mark.parametrize("sections, words", [
    ({"knobs": {"compile": [False, True]}},
     "sweep.knobs.compile: dlscale's own points take it on backend torch only"),
    ({"knobs": {"num_workers": [0, 2]}, "backend": ["jax", "torch"]},
     "sweep.knobs.num_workers: dlscale's own points take it on backend torch only"),
    ({"knobs": {"num_workers": [-1]}},
     "sweep.knobs.num_workers: -1 is not a count of DataLoader workers"),
    ({"knobs": {"compile": ["yes"]}}, "sweep.knobs.compile: 'yes' is not true or false"),
])
def test_num_workers_and_compile_are_refused_where_they_cannot_be_what_they_say(
        tmp_path, sections, words):
    keras = 3 if "backend" in sections else 2
    with pytest.raises(PlanError) as refused:
        study(tmp_path, sweep={"models": ["SimpleCNN"], **sections},
              training={"keras": keras} if keras == 3 else {})
    assert words in str(refused.value) and "\n" not in str(refused.value)
