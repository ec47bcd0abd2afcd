"""NVIDIA DeepLearningExamples' README tables as corpus series (bench/corpus_dle.py, issue
100, item 5): each copy byte for byte (its git blob as the index states it), each series'
points the table's own rows, and the prediction on them."""

from __future__ import annotations

import hashlib
import re
import sys

import pytest
import yaml
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import corpus_dle  # noqa: E402
import prediction_corpus  # noqa: E402

INDEX = yaml.safe_load((corpus_dle.ROOT / "series.yaml").read_text())


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("entry", INDEX, ids=[e["id"] for e in INDEX])
def test_each_copy_is_the_readme_byte_for_byte(entry):
    assert git_blob((corpus_dle.ROOT / entry["file"]).read_bytes()) == entry["blob"]


def test_a_series_is_its_tables_rows():
    [series] = corpus_dle.load(ids=["dle-mxnet-resnet50-dgx2-amp"])
    entry = next(e for e in INDEX if e["id"] == series.id)
    lines = (corpus_dle.ROOT / entry["file"]).read_text().splitlines()
    rows = [line for line in lines[entry["first_line"] + 1:entry["last_line"]]]
    # the table as printed: | GPUs | ... | Throughput - mixed precision | ...
    assert series.points["gpus"].tolist() == [int(re.findall(r"\d+", r)[0]) for r in rows]
    assert (series.points["global_batch"] == 256 * series.points["gpus"]).all()
    assert series.points["scaling"].iloc[0] == "weak" and series.gpus_per_node == 16


def test_series_over_nodes_or_without_a_batch_are_left_out_with_the_reason():
    left = corpus_dle.left_out()
    assert "over nodes" in left["dle-tf-biobert-pretrain-seq128-dgx1-amp"]
    assert "no batch per GPU" in left["dle-pytorch-efficientdet-d0-dgxa100-amp"]
    assert {s.id for s in corpus_dle.load()}.isdisjoint(left)


def test_the_readme_series_are_predicted_within_their_band():
    for series in corpus_dle.load():
        row = prediction_corpus.evaluate(series)
        assert row["inside"] and abs(row["model_error"]) <= 0.10, row
