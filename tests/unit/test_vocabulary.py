"""config/schema.yaml and dlscale/vocabulary.py state the same choices and defaults."""

from __future__ import annotations

import yaml

from conftest import ROOT
from dlscale import vocabulary as V

SCHEMA = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
PROPS = SCHEMA["properties"]


def test_choices_are_the_vocabularys():
    assert tuple(SCHEMA["$defs"]["precision"]["enum"]) == V.PRECISIONS
    assert tuple(SCHEMA["$defs"]["strategy"]["enum"]) == V.STRATEGIES
    assert tuple(PROPS["training"]["properties"]["device"]["enum"]) == V.DEVICES
    assert tuple(PROPS["training"]["properties"]["lr_scaling"]["enum"]) == V.LR_SCALINGS
    assert tuple(PROPS["training"]["properties"]["optimizer"]["enum"]) == V.OPTIMIZERS
    assert set(V.SMALL_MODELS) <= set(SCHEMA["$defs"]["model"]["enum"])
    assert tuple(PROPS["sweep"]["properties"]["scaling"]["enum"]) == V.SCALINGS
    assert tuple(PROPS["data"]["properties"]["resize"]["enum"]) == V.RESIZES


def test_defaults_are_the_vocabularys():
    for section, defaults in V.DEFAULTS.items():
        for key, value in defaults.items():
            assert PROPS[section]["properties"][key]["default"] == value, f"{section}.{key}"


def test_each_plot_has_its_units_and_a_report_caption():
    for name, (column, title, label, _) in V.PLOTS.items():
        assert "[" in label or name == "accuracy", f"{name}: the axis label names no unit"
        assert (ROOT / "report" / f"{name}.rst").is_file()
    assert (ROOT / "report" / f"{V.OVERVIEW}.rst").is_file()


def test_every_config_key_is_documented_and_the_reference_is_current():
    from dlscale.schema_docs import render, undocumented

    assert undocumented(SCHEMA) == []
    current = (ROOT / "docs" / "configuration.md").read_text()
    assert current == render(SCHEMA), "docs/configuration.md is stale: run make docs"
