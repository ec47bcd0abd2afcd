"""The batch-size search, driven by a stand-in for the out-of-memory trial."""

from __future__ import annotations

import pytest

from dlscale.train.batchsearch import search


def fits_below(limit):
    return lambda batch: batch <= limit


def test_doubles_then_bisects_and_keeps_a_margin():
    result = search(fits_below(700), start=16, resolution=0.05, margin=0.9)
    batches = [b for b, _ in result.trials]
    assert batches[:7] == [16, 32, 64, 128, 256, 512, 1024]
    assert len(batches) == len(set(batches)), "no batch is tried twice"
    assert result.smallest_failed - result.largest_ok <= 0.05 * result.largest_ok
    assert 665 <= result.largest_ok <= 700
    assert result.chosen == int(result.largest_ok * 0.9) // 8 * 8
    assert all(ok == (b <= 700) for b, ok in result.trials)


def test_start_too_large_walks_down():
    result = search(fits_below(5), start=64)
    assert result.largest_ok == 5 and result.chosen == 4


def test_nothing_trains():
    result = search(fits_below(0), start=4)
    assert result.largest_ok is None and result.chosen is None
    assert [b for b, _ in result.trials] == [4, 2, 1]


def test_everything_trains_up_to_the_maximum():
    result = search(fits_below(10**9), start=16, maximum=300)
    assert result.largest_ok == 300 and result.smallest_failed is None
    assert [b for b, _ in result.trials] == [16, 32, 64, 128, 256, 300]


def test_bad_arguments():
    with pytest.raises(ValueError, match="start=0"):
        search(fits_below(10), start=0)
