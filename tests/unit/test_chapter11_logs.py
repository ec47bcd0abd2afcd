"""The 2026 edition's chapter 11 output read by its own lines (issue 98, item 5):
`train.py` unchanged on CPU (tests/data/chapter11, captured by its capture.sh from
examples/hpc4ai-chapter11: the book's files byte for byte). Each epoch is timed by its own
`[EPOCH: N] Training throughput` line, never by the whole-second stamps across a
validation; the figures expected are read from the captures' lines here."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from dlscale.logparse.reader import parse_file_runs

CAPTURES = ROOT / "tests" / "data" / "chapter11"


@pytest.mark.parametrize("name", ["custom_b16_w0.out", "custom_b32_w2.out",
                                  "custom_b16_w0_compile.out", "custom_b16_w0_bf16.out"])
def test_each_epoch_is_timed_by_its_own_rate_line(name):
    text = (CAPTURES / name).read_text()
    [run] = parse_file_runs(str(CAPTURES / name))
    [samples] = re.findall(r"Total training samples \(batches\): (\d+)", text)
    rates = [float(r) for r in re.findall(r"\[EPOCH: \d+\] Training throughput: ([\d.]+)",
                                          text)]
    rows = run.rows()
    assert [r["epoch"] for r in rows] == list(range(1, len(rates) + 1))
    assert [r["seconds"] for r in rows] == pytest.approx([int(samples) / r for r in rates])
    [total] = re.findall(r"Complete training Time: (\d+) s", text)
    assert run.facts["train_seconds"] == float(total)
    [steady] = re.findall(r"INFO - Training throughput:\s+(\d+) imgs/s", text)
    assert run.facts["summary_images_per_s"] == float(steady)
    assert "memory_gib" not in run.facts and "no GPU counted it" in run.facts["memory_note"]
    losses = re.findall(r"\[EPOCH: (\d+)\] Loss at iteration \d+: ([\d.]+)", text)
    last = {int(e): float(v) for e, v in losses}  # each epoch's last
    assert [r["loss"] for r in rows] == [last[e] for e in range(1, len(rates) + 1)]


def test_compiles_warm_up_is_its_first_epoch_not_its_validations():
    # torch.compile's first epoch is its warm-up; the stamps put epoch 2's validation
    # (compiled again for eval) into it: 8 s of whole-second stamps against 2 s for epoch 3
    [run] = parse_file_runs(str(CAPTURES / "custom_b16_w0_compile.out"))
    first, second, third, _ = (r["seconds"] for r in run.rows())
    assert first > 5 * third and second < 1.5 * third


def test_a_precision_that_torch_did_not_apply_is_said_and_flagged():
    # the chapter's --mixed_precision autocasts on "cuda": on a CPU torch warns and
    # disables it (the script still logs `AMP Enabled: True`): a bf16 point trained in fp32
    text = (CAPTURES / "custom_b16_w0_bf16.out").read_text()
    assert "### mixed_precision: bf16" in text and "AMP Enabled: True" in text
    [run] = parse_file_runs(str(CAPTURES / "custom_b16_w0_bf16.out"))
    note = run.facts["precision_note"]
    assert "disabled autocast" in note and "float32" in note
    [line] = [n for n, t in enumerate(text.splitlines(), 1) if "Disabling autocast" in t][:1]
    assert f"line {line}:" in note and sum(note in w for w in run.warnings) == 1
    [plain] = parse_file_runs(str(CAPTURES / "custom_b16_w0.out"))
    assert "precision_note" not in plain.facts


def test_a_point_whose_runs_trained_without_their_precision_is_flagged():
    import pandas as pd

    from dlscale.reporting.analysis import flags_of

    row = pd.Series({"accuracy_flag": False, "speedup": 1.0, "efficiency": 1.0,
                     "serial_fraction": 0.0, "gpus_logged": [], "final_accuracy": 0.5,
                     "unit": "images", "gpus": 1,
                     "precision_note": "torch disabled autocast (line 24: ...)"})
    assert "torch disabled autocast" in flags_of(next(pd.DataFrame([row]).itertuples()), 0.02)
