"""Files and values from elsewhere, checked once at planning with one line naming them
(issue: broken and hostile inputs, third pass)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import ROOT

from dlscale.core.errors import PlanError
from dlscale.core.schema import load as load_schema
from dlscale.core.vocabulary import COMPARED_COLUMNS
from dlscale.plan.analysisplan import unreadable_file
from dlscale.plan.study import Study
from dlscale.plan.sweep import check_gres
from dlscale.reporting.analysis import read_studies
from dlscale.reporting.references import ReferenceError, load


def test_a_binary_references_file_is_named(tmp_path):
    binary = tmp_path / "references.yaml"
    binary.write_bytes(b"references:\n  - " + bytes(range(128, 256)))
    with pytest.raises(ReferenceError, match=f"references file '{binary}' is not text "
                                             r"\(UTF-8\): byte 16 cannot be read"):
        load(str(binary), ROOT, load_schema())


def test_a_reference_to_a_model_the_study_does_not_run_is_refused():
    spec = [{"model": "SimpleCNNN", "gpus": 1, "images_per_s": 10.0}]
    with pytest.raises(ReferenceError, match="model 'SimpleCNNN' is neither a model dlscale "
                                             r"knows nor one this study runs \(SimpleCNN\)"):
        load(spec, ROOT, load_schema(), {"SimpleCNN"})
    spec[0]["model"] = "ResNet50V2"  # a shared file may list models this study does not run
    assert load(spec, ROOT, load_schema(), {"SimpleCNN"})[0]["model"] == "ResNet50V2"


@pytest.mark.parametrize("template, words", [
    ("gpu:{n}", "resources.gres 'gpu:{n}' names {n}: the only placeholder is {gpus}"),
    ("gpu:{gpus", "resources.gres 'gpu:{gpus' is not a template"),
])
def test_a_gres_template_with_an_unknown_placeholder_is_refused(template, words):
    with pytest.raises(PlanError, match="invalid sweep: " + words.replace("{", r"\{")
                       .replace("(", r"\(")):
        check_gres(template)
    check_gres("gpu:v100:{gpus}")


def test_unusable_paths_say_what_they_are(tmp_path):
    loop = tmp_path / "loop.out"
    loop.symlink_to(tmp_path / "loop.out")
    assert unreadable_file(loop).startswith("is a symbolic link that leads nowhere")
    assert unreadable_file(tmp_path) == "is a directory, expected a file"
    assert unreadable_file(tmp_path / "none.out") == "does not exist"
    good = tmp_path / "job.out"
    good.write_text("x")
    assert unreadable_file(good) is None


def test_an_external_log_that_is_a_directory_fails_planning_naming_it(tmp_path):
    config = minimal_config({"external_runs": [
        {"log": str(tmp_path), "model": "M", "gpus": 1, "train_images": 10}]})
    with pytest.raises(PlanError, match=f"external_runs\\[0\\]: log '{tmp_path}' is a "
                                        "directory, expected a file"):
        Study(config, ROOT)


def test_a_compared_table_from_an_older_dlscale_is_drawn_with_its_missing_columns_empty(
        tmp_path):
    from dlscale.reporting.analysis import EXTRA_COLUMNS, SCALING_COLUMNS
    from dlscale.reporting.plots import plot_all

    ours = pd.DataFrame([{c: 1.0 for c in SCALING_COLUMNS + EXTRA_COLUMNS}
                         | {"series": "M", "gpus": g, "nodes": 1} for g in (1, 2)])
    ours.to_csv(tmp_path / "ours.csv", index=False)
    old = ours[list(COMPARED_COLUMNS)]  # exactly what planning checks, nothing more
    old.to_csv(tmp_path / "old.csv", index=False)
    studies = read_studies(tmp_path / "ours.csv", [("last year", tmp_path / "old.csv")])
    assert studies[1][1]["cpu_percent"].isna().all()
    written = plot_all(ours, tmp_path / "plots", "", None, studies[1:])
    assert (tmp_path / "plots" / "utilisation.png") in written


def minimal_config(extra: dict) -> dict:
    """A config as validation leaves it (defaults filled), with `extra` over it."""
    from dlscale.core.schema import validate

    config = {"sweep": {"models": []}, **extra}
    validate(config)
    return config
