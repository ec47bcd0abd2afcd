"""The schema is where choices and defaults are written; the vocabulary reads them."""

from __future__ import annotations

import re

from conftest import ROOT, SCRIPTS

from dlscale.core import models, schema, vocabulary

SCHEMA = schema.load()
PROPS = SCHEMA["properties"]


def test_the_schema_ships_in_the_package_and_config_links_to_it():
    assert schema.PATH.parent == SCRIPTS / "dlscale" / "core"
    assert (ROOT / "config" / "schema.yaml").resolve() == schema.PATH.resolve()


def test_choices_and_defaults_are_the_schemas():
    assert tuple(SCHEMA["$defs"]["precision"]["enum"]) == vocabulary.PRECISIONS
    assert tuple(PROPS["training"]["properties"]["device"]["enum"]) == vocabulary.DEVICES
    assert tuple(SCHEMA["$defs"]["model"]["enum"]) == models.names()
    epochs = PROPS["training"]["properties"]["epochs"]["default"]
    assert vocabulary.DEFAULTS["training"]["epochs"] == epochs


def test_each_plot_has_its_units_and_a_report_caption():
    for name, (_column, _title, label, _) in vocabulary.PLOTS.items():
        assert "[" in label or name == "accuracy", f"{name}: the axis label names no unit"
        assert (ROOT / "report" / f"{name}.rst").is_file()
    assert (ROOT / "report" / f"{vocabulary.OVERVIEW}.rst").is_file()


def test_every_config_key_is_documented_and_the_reference_is_current():
    from dlscale.core.schema_docs import render, undocumented

    assert undocumented(SCHEMA) == []
    current = (ROOT / "docs" / "configuration.md").read_text()
    assert current == render(SCHEMA), "docs/configuration.md is stale: run make docs"


def test_every_megabyte_key_of_the_schema_says_mib():
    """A key in MiB (bytes / 2^20: SLURM's --mem, Snakemake's mem_mb, the cache) says so,
    and no description says MB for it."""
    from dlscale.core.schema_docs import rows

    sized = [(name, meaning) for name, _, _, meaning in rows(PROPS, SCHEMA)
             if re.search(r"_mb(_|$)", name)]
    assert {name for name, _ in sized} >= {"data.cache_mb", "resources.mem_mb_per_gpu"}
    assert [name for name, meaning in sized
            if "MiB" not in meaning or re.search(r"\bMB\b", meaning)] == []
