"""Config schema and sweep expansion: bad input fails with the key's name, defaults fill in."""

from __future__ import annotations

import copy
import re

import pytest
import yaml
from conftest import ROOT

from dlscale.core import models
from dlscale.core.errors import PlanError
from dlscale.core.schema import load, validate
from dlscale.plan.sweep import SweepError, plan_sweep


def points_of(config: dict):
    """The sweep's points (plan_sweep without its notes)."""
    return plan_sweep(config)[0]

SCHEMA = str(ROOT / "config" / "schema.yaml")


def study() -> dict:
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    validate(config)
    return config


def test_study_config_is_the_study():
    points = points_of(study())
    assert [p.key for p in points] == [
        "ResNet50V2/gpus1/rep1", "ResNet50V2/gpus2/rep1", "ResNet50V2/gpus4/rep1",
        "ResNet152V2/gpus1/rep1", "ResNet152V2/gpus2/rep1", "ResNet152V2/gpus4/rep1"]
    four = points[2]
    assert (four.global_batch, four.cpus_per_task, four.mem_mb, four.gres, four.tasks) == (
        1024, 32, 64000, "gpu:4", 1)
    assert points[4].batch_per_gpu == 128 and points[4].global_batch == 256  # per-model override
    assert four.strategy == "mirrored" and four.epochs == 5 and four.runtime == 30


def test_defaults_are_filled_in():
    config = {}
    validate(config)
    assert config["data"]["image_size"] == 128
    assert config["training"]["lr_scaling"] == "linear"
    assert config["analysis"]["skip_epochs"] == 1
    assert config["external_runs"] == []


@pytest.mark.parametrize("bad, words", [
    ({"data": {"datset": "cifar10"}}, "'datset' was unexpected"),
    ({"data": {"dataset": "imagenet"}}, "'imagenet' is not one of"),
    ({"data": {"image_size": "big"}}, "'big' is not of type 'integer'"),
    ({"data": {"image_size": 4}}, "4 is less than the minimum of 8"),
    ({"data": {"md5": "abc"}}, "'abc' does not match"),
    ({"sweep": {"gpus": [0]}}, "0 is less than the minimum of 1"),
    ({"training": {"precision": "fp8"}}, "'fp8' is not one of"),
    ({"models": {"Res Net9": {"batch_per_gpu": 8}}}, "'Res Net9': expected one of"),
    ({"models": {"ResNet50V2": {"bach_per_gpu": 8}}}, "'bach_per_gpu' was unexpected"),
    ({"external_runs": [{"log": "x.out", "gpus": 2}]}, "'model' is a required"),
])
def test_bad_values_fail_with_the_offending_key(bad, words):
    with pytest.raises(PlanError) as info:
        validate(copy.deepcopy(bad))
    assert words in str(info.value)


def test_a_bad_value_is_one_line_with_its_keys_path():
    with pytest.raises(PlanError) as info:
        validate({"data": {"image_size": "big"}, "external_runs": []})
    assert str(info.value) == "config: data.image_size: 'big' is not of type 'integer'"
    with pytest.raises(PlanError) as info:
        validate({"external_runs": [{"log": "x.out", "model": "MLP"}, {"log": "y.out"}]})
    assert str(info.value) == "config: external_runs[1]: 'model' is a required property"


@pytest.mark.parametrize("name", ["config.yaml", "demo.yaml"])
def test_the_defaults_filled_in_are_snakemakes(name):
    """dlscale's validation (the schema read once, by libyaml) fills in what Snakemake's
    `snakemake.utils.validate` fills in, and leaves no list or dict shared with the schema."""
    from snakemake.utils import validate as snakemakes

    ours, theirs = (yaml.safe_load((ROOT / "config" / name).read_text()) for _ in "12")
    validate(ours)
    snakemakes(theirs, SCHEMA)
    assert ours == theirs
    ours["external_runs"].append({"log": "x.out"})
    assert validate({})["external_runs"] == []


def test_model_names_are_exactly_keras_applications_plus_dlscales_own():
    """The models table names every keras.applications model of the installed Keras, and
    the schema's choices are the table's names (torchvision's too, for backend torch)."""
    keras = pytest.importorskip("tf_keras")
    applications = {n for n in dir(keras.applications) if n[0].isupper()}
    table = models.table()
    assert {n for n, m in table.items() if m.builder == models.APPLICATIONS} == applications
    torchvision = {n for n, m in table.items() if m.builder == models.TORCHVISION}
    assert {"resnet50", "resnet152", "mobilenet_v2"} <= torchvision  # the names
    assert all(name.islower() for name in torchvision)  # torchvision's own spelling
    assert set(load()["$defs"]["model"]["enum"]) == applications | set(models.own()) | \
        torchvision


def _config(**sections) -> dict:
    config = copy.deepcopy(sections)
    validate(config)
    return config


def test_run_folder_gains_levels_only_for_varied_settings():
    config = _config(sweep={"models": ["SimpleCNN"], "gpus": [2, 4], "nodes": [1, 2],
                            "precision": ["float32", "mixed_float16"], "repeats": 2})
    keys = [p.key for p in points_of(config)]
    assert "SimpleCNN/nodes2/mixed_float16/gpus4/rep2" in keys
    assert len(keys) == 2 * 2 * 2 * 2  # gpus x nodes x precision x repeats
    multi = [p for p in points_of(config) if p.nodes == 2 and p.gpus == 4][0]
    assert (multi.strategy, multi.tasks, multi.tasks_per_node, multi.gpus_per_node,
            multi.gres) == ("multiworker", 4, 2, 2, "gpu:2")
    assert {p.seed for p in points_of(config)} == {42, 43}  # one seed per repeat


def test_one_gpu_cannot_span_two_nodes_so_that_point_is_not_planned():
    config = _config(sweep={"models": ["SimpleCNN"], "gpus": [1, 2], "nodes": [2]})
    assert [p.key for p in points_of(config)] == ["SimpleCNN/gpus2/rep1"]


def test_workers_per_node():
    config = _config(sweep={"models": ["SimpleCNN"], "gpus": [8], "nodes": [2]},
                     training={"workers": "per_node"})
    point = points_of(config)[0]
    assert (point.tasks, point.tasks_per_node, point.cpus_per_task) == (2, 1, 32)


@pytest.mark.parametrize("sections, words", [
    ({"sweep": {"gpus": [8], "nodes": [1]}},
     "no point of the sweep can run: 8 GPUs on 1 node(s) need 8 GPUs per node, but "
     "resources.max_gpus_per_node is 4"),
    ({"sweep": {"nodes": [2], "gpus": [2], "strategy": ["mirrored"]}}, "mirrored runs on one node"),
    ({"data": {"image_size": 16}}, "ResNet50V2 needs images of at least 32px"),
])
def test_impossible_points_fail_before_any_job(sections, words):
    with pytest.raises(SweepError, match=re.escape(words)):
        points_of(_config(**sections))


def test_nodes_auto_puts_each_point_on_as_few_nodes_as_hold_its_gpus():
    config = _config(sweep={"models": ["SimpleCNN"], "gpus": [1, 2, 4, 8, 16, 32]})
    points = points_of(config)
    assert [(p.gpus, p.nodes) for p in points] == [(1, 1), (2, 1), (4, 1), (8, 2), (16, 4),
                                                   (32, 8)]
    assert [p.strategy for p in points] == ["mirrored"] * 3 + ["multiworker"] * 3
    assert [p.key for p in points][3] == "SimpleCNN/gpus8/rep1"  # no nodes level
    assert {p.gres for p in points[3:]} == {"gpu:4"}


def test_a_gpus_by_nodes_grid_leaves_out_what_cannot_run_with_a_note():
    from dlscale.plan.sweep import plan_sweep

    config = _config(sweep={"models": ["SimpleCNN"], "gpus": [1, 2, 8], "nodes": [1, 2],
                            "strategy": ["mirrored", "multiworker"]})
    points, notes = plan_sweep(config)
    assert [p.key for p in points] == [
        "SimpleCNN/nodes1/mirrored/gpus1/rep1", "SimpleCNN/nodes1/mirrored/gpus2/rep1",
        "SimpleCNN/nodes1/multiworker/gpus1/rep1", "SimpleCNN/nodes1/multiworker/gpus2/rep1",
        "SimpleCNN/nodes2/multiworker/gpus2/rep1", "SimpleCNN/nodes2/multiworker/gpus8/rep1"]
    assert notes == [
        "sweep: 1 GPU(s) on 2 node(s) with mirrored left out: 1 GPU(s) cannot span 2 nodes",
        "sweep: 2 GPU(s) on 2 node(s) with mirrored left out: strategy mirrored runs on one "
        "node, not 2",
        "sweep: 8 GPU(s) on 1 node(s) with mirrored left out: 8 GPUs on 1 node(s) need 8 GPUs "
        "per node, but resources.max_gpus_per_node is 4",
        "sweep: 8 GPU(s) on 2 node(s) with mirrored left out: strategy mirrored runs on one "
        "node, not 2",
        "sweep: 1 GPU(s) on 2 node(s) with multiworker left out: 1 GPU(s) cannot span 2 nodes",
        "sweep: 8 GPU(s) on 1 node(s) with multiworker left out: 8 GPUs on 1 node(s) need 8 "
        "GPUs per node, but resources.max_gpus_per_node is 4"]


def test_strong_scaling_keeps_the_global_batch_and_the_learning_rate():
    config = _config(sweep={"models": ["SimpleCNN", "ResNet50V2"], "gpus": [1, 2, 4],
                            "scaling": "strong"},
                     training={"global_batch": 512}, models={"ResNet50V2": {"global_batch": 256}})
    points = points_of(config)
    assert [(p.model, p.batch_per_gpu, p.global_batch) for p in points] == [
        ("SimpleCNN", 512, 512), ("SimpleCNN", 256, 512), ("SimpleCNN", 128, 512),
        ("ResNet50V2", 256, 256), ("ResNet50V2", 128, 256), ("ResNet50V2", 64, 256)]
    assert {(p.scaling, p.lr_scaling) for p in points} == {("strong", "none")}
    weak = points_of(_config(sweep={"models": ["SimpleCNN"], "gpus": [2]}))[0]
    assert (weak.scaling, weak.lr_scaling, weak.global_batch) == ("weak", "linear", 512)


@pytest.mark.parametrize("training, words", [
    ({}, "sweep.scaling strong keeps the global batch, but SimpleCNN has none: set "
         "training.global_batch"),
    ({"global_batch": 100}, "global batch 100 of SimpleCNN cannot be split equally over 8 GPUs"),
])
def test_strong_scaling_needs_a_global_batch_every_gpu_count_divides(training, words):
    with pytest.raises(SweepError, match=words.replace(".", r"\.")):
        points_of(_config(sweep={"models": ["SimpleCNN"], "gpus": [1, 8], "scaling": "strong"},
                       training=training))


def test_batch_auto_leaves_the_global_batch_open():
    config = _config(sweep={"models": ["ResNet50V2"], "gpus": [2]},
                     training={"batch_per_gpu": "auto", "precision": "mixed_auto"})
    point = points_of(config)[0]
    assert (point.batch_per_gpu, point.global_batch, point.precision) == ("auto", None,
                                                                          "mixed_auto")
    with pytest.raises(PlanError, match=r"'big': expected an integer \(at least 1\), or auto"):
        _config(training={"batch_per_gpu": "big"})


def test_horovod_points_start_one_process_per_gpu():
    config = _config(sweep={"models": ["SimpleCNN"], "gpus": [1, 4], "strategy": ["horovod"]})
    one, four = points_of(config)
    assert (one.tasks, four.tasks, four.tasks_per_node, four.cpus_per_task) == (1, 4, 4, 8)
    assert four.key == "SimpleCNN/gpus4/rep1" and four.strategy == "horovod"


def test_horovod_across_nodes_needs_an_mpi_launcher():
    sweep = {"models": ["SimpleCNN"], "gpus": [2], "nodes": [2], "strategy": ["horovod"]}
    with pytest.raises(SweepError, match="horovod across 2 nodes needs Horovod built with MPI"):
        points_of(_config(sweep=sweep))
    point = points_of(_config(sweep=sweep, horovod={"mpi_launcher": "srun --mpi=pmix"}))[0]
    assert (point.tasks, point.tasks_per_node) == (2, 1)


def test_an_unknown_model_name_is_named_with_the_forms_expected():
    from dlscale.core import models
    from dlscale.plan.study import PlanError, check_raw_config

    with pytest.raises(PlanError) as info:
        check_raw_config({"sweep": {"models": ["SimpleCNN", "ResNet51V2"]}})
    assert str(info.value) == (  # (dlscale's own models as the table has them)
        "sweep.models: unknown model 'ResNet51V2' (did you mean ResNet50V2?): expected a "
        f"keras.applications name such as ResNet50V2, {', '.join(models.own())}, or your "
        "own as path/to/file.py:function")


@pytest.mark.parametrize("entry, words", [
    # a module name holds no space (a .py path may)
    ("my model:build", "'my model:build': expected one of"),
    ("my_model.py:", "or your own model: path/to/file.py:function, or a mapping"),
    ({"from": "m.py:build", "label": "two words"}, "does not match"),
    ({"label": "Mine"}, "'from' is a required property"),
])
def test_a_builder_of_the_wrong_form_is_refused_by_the_schema(entry, words):
    with pytest.raises(PlanError) as info:
        validate({"sweep": {"models": [entry]}})
    assert words in str(info.value)


def test_your_own_model_is_a_series_labelled_by_its_function_or_label():
    config = _config(sweep={"models": ["SimpleCNN", "examples/my_model.py:small_resnet",
                                       {"from": "my/nets.py:build", "label": "Wide"}],
                            "gpus": [1, 2]},
                     models={"Wide": {"batch_per_gpu": 4}})
    points = points_of(config)
    assert [(p.key, p.model, p.model_from, p.batch_per_gpu) for p in points] == [
        ("SimpleCNN/gpus1/rep1", "SimpleCNN", None, 256),
        ("SimpleCNN/gpus2/rep1", "SimpleCNN", None, 256),
        ("small_resnet/gpus1/rep1", "small_resnet", "examples/my_model.py:small_resnet", 256),
        ("small_resnet/gpus2/rep1", "small_resnet", "examples/my_model.py:small_resnet", 256),
        ("Wide/gpus1/rep1", "Wide", "my/nets.py:build", 4),
        ("Wide/gpus2/rep1", "Wide", "my/nets.py:build", 4)]


def test_two_models_with_one_label_are_refused():
    with pytest.raises(PlanError) as info:
        points_of(_config(sweep={"models": ["a.py:build", "b.py:build"]}))
    assert "two models are labelled 'build'" in str(info.value)


@pytest.mark.parametrize("text,value", [("1e-3", 0.001), ("5E-4", 0.0005), ("1E+0", 1.0)])
def test_a_number_in_exponent_form_is_a_number(text, value):
    """PyYAML (YAML 1.1) reads `base_lr: 1e-3` as the string '1e-3'; YAML 1.2 and JSON
    read a number, and so does the config."""
    config = yaml.safe_load(f"training: {{base_lr: {text}}}\n"
                            f"analysis: {{accuracy_tolerance: {text}}}")
    assert config["training"]["base_lr"] == text  # as PyYAML reads it
    validate(config)
    assert config["training"]["base_lr"] == value
    assert config["analysis"]["accuracy_tolerance"] == value


@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf", ".NaN"])
def test_nan_and_infinity_are_refused_by_key(text):
    config = yaml.safe_load(f"training: {{base_lr: {text}}}")
    with pytest.raises(PlanError) as error:
        validate(config)
    message = str(error.value)
    assert message.startswith("config: training.base_lr: ") and "not a finite number" in message
    assert "\n" not in message



@pytest.mark.parametrize("text,words", [
    ('sweep: {commands: {mine: {run: "python x.py", bogus: 1}}}',
     "config: sweep.commands.mine: Additional properties are not allowed ('bogus' was "
     "unexpected)"),
    ('sweep: {commands: {mine: {run: "python x.py", tasks: bogus}}}',
     "config: sweep.commands.mine.tasks: 'bogus' is not one of ['one', 'per_gpu', "
     "'per_node']"),
    ('sweep: {models: [{from: "net.py:build", label: "my label"}]}',
     "config: sweep.models[0].label: 'my label' does not match '^[A-Za-z][A-Za-z0-9_-]*$'"),
])
def test_a_value_that_fits_none_of_a_keys_forms_names_the_key_and_its_rule(text, words):
    """Inside an anyOf (a command as text or as a mapping), the error is the form of the
    value's own type and the key that broke it, not 'is not valid under any of the given
    schemas'."""
    with pytest.raises(PlanError) as error:
        validate(yaml.safe_load(text))
    assert str(error.value) == words


def test_a_sweep_beyond_max_points_is_refused_before_any_point_is_made():
    """A 60,000-point sweep (an axis mistyped) planned silently for minutes: past
    sweep.max_points (10,000 by default) it is one line at once, and can be raised."""
    config = {"sweep": {"models": ["SimpleCNN"], "gpus": list(range(1, 601)),
                        "repeats": 100}}
    validate(config)
    with pytest.raises(SweepError) as error:
        points_of(config)
    assert ("the sweep combines into 60000 points, more than sweep.max_points (10000)"
            in str(error.value))
    config["sweep"].update(gpus=[1, 2], repeats=3, max_points=6)
    assert len(points_of(config)) == 6


@pytest.mark.parametrize("config, words", [
    ({"training": {"batch_per_gpu": 0}}, "training.batch_per_gpu: 0: expected an integer "
                                         "(at least 1), or auto"),
    ({"training": {"batch_per_gpu": -3}}, "-3: expected an integer (at least 1), or auto"),
    ({"training": {"batch_per_gpu": "autox"}}, "'autox': expected an integer (at least 1), "
                                               "or auto"),
    ({"sweep": {"nodes": "autoo"}}, "sweep.nodes: 'autoo': expected auto, or a list"),
    ({"sweep": {"commands": {"x": 42}}}, "sweep.commands.x: 42: expected a string (not "
                                         "empty), or a mapping")])
def test_a_plain_value_that_fits_no_form_says_what_the_forms_expect(config, words):
    """It read "is not valid under any of the given schemas" (issue 78, 11)."""
    with pytest.raises(PlanError) as info:
        validate(config)
    assert words in str(info.value) and "given schemas" not in str(info.value)
