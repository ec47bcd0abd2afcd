"""The models table (dlscale.core.models) is the one place a built-in model is declared:
the schema's choices, planning's image-size check and the gradient sizes come from it."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT

from dlscale.core import models, schema
from dlscale.core.errors import PlanError
from dlscale.plan.sweep import SweepError, plan_sweep


@pytest.fixture
def one_more_model(monkeypatch):
    """The table with a model added by its row alone: TinyNet, SimpleCNN's builder, 64 px
    at least."""
    table = {**models.table(),
             "TinyNet": models.Model("TinyNet", "simple_cnn", 64, None)}
    monkeypatch.setattr(models, "table", lambda: table)
    schema.load.cache_clear()
    schema._validator.cache_clear()
    yield
    monkeypatch.undo()
    schema.load.cache_clear()
    schema._validator.cache_clear()


def config(model: str, image_size: int) -> dict:
    """The demo's study with one model, checked as rules/common.smk checks a config."""
    study = yaml.safe_load((ROOT / "config" / "demo.yaml").read_text())
    study["sweep"]["models"] = [model]
    study["data"]["image_size"] = image_size
    schema.check_raw_config(study)
    schema.validate(study)
    return study


def test_a_row_of_the_table_is_a_model_the_schema_and_planning_know(one_more_model):
    assert "TinyNet" in schema.load()["$defs"]["model"]["enum"]
    points = plan_sweep(config("TinyNet", 64))[0]
    assert {p.model for p in points} == {"TinyNet"}
    with pytest.raises(SweepError, match="model TinyNet needs images of at least 64px, "
                                         "but data.image_size is 32"):
        plan_sweep(config("TinyNet", 32))


def test_a_name_not_in_the_table_is_refused_at_validation():
    # (a name no recipe adds: docs/development.md's built-in model may be any other)
    with pytest.raises(PlanError, match="unknown model 'NoSuchModel'.*" + ", ".join(
            models.own())):
        config("NoSuchModel", 64)


def test_each_own_builder_is_a_function_of_training():
    from dlscale.train import training

    own = [m for m in models.table().values()
           if m.builder not in (models.APPLICATIONS, models.TORCHVISION)]
    assert [m.name for m in own] == list(models.own())
    assert {"SimpleCNN", "MLP"} <= set(models.own())  # (a recipe's new row may join them)
    for model in own:
        assert callable(getattr(training, model.builder)), model


def test_the_table_is_read_strictly(tmp_path):
    with pytest.raises(ValueError, match="expected model, builder, min_image_size, "
                                         "gradient_bytes"):
        models.parse("model,gradient_bytes\nResNet50V2,1\n")
    parsed = models.parse("# a comment\nmodel,builder,min_image_size,gradient_bytes\n"
                          "X,keras.applications,75,\n")
    assert parsed == {"X": models.Model("X", "keras.applications", 75, None)}
