"""The report's first page as Snakemake renders it (Jinja2, then docutils): what tables
and logs hold is shown as it is, whatever characters it has."""

from __future__ import annotations

import pandas as pd
from docutils.core import publish_parts
from jinja2 import Environment

from dlscale.reporting.firstpage import page


def rendered(text: str) -> str:
    # what snakemake.report does with the workflow description
    return publish_parts(Environment().from_string(text).render(), writer="html",
                         settings_overrides={"report_level": 1})["html_body"]


def test_the_answer_flags_and_failed_points_survive_rendering_as_written():
    scaling = pd.DataFrame([
        {"series": "my_net*v2", "nodes": 1, "gpus": 1, "epoch_time_s": 10.0, "speedup": 1.0,
         "efficiency": 1.0, "accuracy_delta": 0.0, "flags": None},
        {"series": "my_net*v2", "nodes": 2, "gpus": 8, "epoch_time_s": 2.0, "speedup": 5.0,
         "efficiency": 0.625, "accuracy_delta": -0.01, "flags": "efficiency above 1 |x|",
         "time_to_solution_s": 12.5}])
    amdahl = pd.DataFrame([{"series": "my_net*v2", "serial_fraction": 0.0857}])
    failed = pd.DataFrame([{"run": "cmd/gpus4/rep1", "status": "failed",
                            "problem": "exited 1: `rm {out_dir}` {% endraw %} {{ x }} \x1b[31m"}])
    html = rendered(page(scaling, amdahl, failed))
    assert "system-message" not in html and "System Message" not in html
    assert "my_net*v2" in html and "8 GPU(s) on 2 nodes" in html
    assert "<td>5</td>" in html and "<td>0.625</td>" in html and "<td>0.0857</td>" in html
    # the time to solution beside them (issue 98 item 6): the whole training, warm-up included
    assert "time to solution (s)" in html and "<td>12.5</td>" in html
    assert "efficiency above 1 |x|" in html
    assert "exited 1: `rm {out_dir}` { % endraw % } {{ x }} \\x1b[31m" in html


def test_a_study_without_results_says_so():
    html = rendered(page(pd.DataFrame(columns=["series", "nodes", "gpus"]),
                         pd.DataFrame(columns=["series", "serial_fraction"]),
                         pd.DataFrame([{"run": "a/gpus1/rep1", "status": "timeout",
                                        "problem": "the time limit"}])))
    assert "No point of this study has a result yet" in html
    assert "a/gpus1/rep1: timeout, the time limit" in html


def test_a_failed_point_is_one_line_with_its_status_said_once(tmp_path):
    """A reason of several lines (a command's last output) was shown whole in status, on
    the first page and in failed.csv, and the page read 'failed, failed: ...'. Each shows
    its first line and where the rest is; run.json keeps the whole."""
    import json

    from helpers.studies import study_epochs

    from dlscale.reporting.analysis import summarize_runs
    from dlscale.reporting.status import point_status

    reason = "the command exited with status 1\nTraceback (most recent call last):\n  boom"
    run = tmp_path / "results" / "runs" / "cmd" / "gpus4" / "rep1"
    run.mkdir(parents=True)
    from dlscale.core.contract import RunRecord, Status

    RunRecord.ending(Status.FAILED, reason, {"epochs": 3}, {}, epochs_completed=1).write(run)
    assert json.loads((run / "run.json").read_text())["failure"] == reason  # kept whole
    shown = point_status(tmp_path, {"key": "cmd/gpus4/rep1", "epochs": 3}, {})
    assert shown.detail == ("1 of 3 epoch(s): the command exited with status 1 [...; the "
                            "whole reason is in the point's run.json]")
    epochs = study_epochs()
    epochs.loc[epochs["run"] == "ref4", ["status", "failure"]] = ["failed", reason]
    runs = summarize_runs(epochs, 1)
    problem = runs.loc[runs["run"] == "ref4", "problem"].iloc[0]
    assert problem.startswith("failed: the command exited with status 1 [...; the whole")
    assert "\n" not in problem
    html = rendered(page(pd.DataFrame(columns=["series", "nodes", "gpus"]),
                         pd.DataFrame(columns=["series", "serial_fraction"]),
                         pd.DataFrame([{"run": "cmd/gpus4/rep1", "status": "failed",
                                        "problem": problem}])))
    assert "cmd/gpus4/rep1: failed, the command exited with status 1" in html
    assert "failed, failed" not in html


def test_the_dominant_cost_says_when_the_traced_steps_ran_slower_than_the_epochs():
    """The shares are of the traced steps; where those took over 1.2x the epochs' steps
    (one at a time, profiled), the first page says so next to the dominant cost."""
    from dlscale.reporting.firstpage import why_lines

    row = {"series": "Net", "nodes": 1, "gpus": 4, "compute_share": 0.5,
           "communication": "separable", "communication_share": 0.3,
           "comm_total_share": 0.4, "input_share": 0.1, "other_share": 0.1,
           "dominant": "compute", "notes": "", "step_s": 0.1}
    slow = why_lines(pd.DataFrame([{**row, "window_step_s": 0.23}]), pd.DataFrame(
        columns=["series", "gpus", "predicted_efficiency", "verdict"]))
    assert any("the dominant cost is compute (of the traced steps, which took 2.3x the "
               "epochs' steps" in line for line in slow)
    alike = why_lines(pd.DataFrame([{**row, "window_step_s": 0.11}]), pd.DataFrame(
        columns=["series", "gpus", "predicted_efficiency", "verdict"]))
    assert not any("traced steps, which took" in line for line in alike)


def test_an_outside_series_without_a_window_still_shows_its_prediction():
    """A study of outside logs only stopped at "no traced steps" and dropped the
    prediction prediction.csv held (issue 78, 5)."""
    from dlscale.reporting.firstpage import why_lines

    breakdown = pd.DataFrame([{"series": "V100 study", "nodes": 1, "gpus": g,
                               "compute_share": float("nan"),
                               "notes": "no breakdown.json: an external log"}
                              for g in (1, 2, 4)])
    prediction = pd.DataFrame([{"series": "V100 study", "gpus": 8,
                                "predicted_efficiency": 0.874, "verdict": "explained"}])
    [line] = [x for x in why_lines(breakdown, prediction) if x.startswith("- ")]
    assert line.startswith("- V100 study at 4 GPU(s): no traced steps")
    assert line.endswith("; predicted efficiency at 8 GPUs 0.874 (model explained).")
