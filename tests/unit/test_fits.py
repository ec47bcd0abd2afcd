"""What fits in memory on the first page (issue 98, item 2): a point out of memory is a
result: per series (its batch per GPU aside) and GPU count, the largest batch per GPU
that trained and the smallest that did not."""

from __future__ import annotations

import pandas as pd

from dlscale.reporting.firstpage import page


def tables():
    # the chapter 15 knobs' shape: sdpa at 6 and 14 sequences a GPU trained, 37 ran out
    scaling = pd.DataFrame([
        {"series": f"llama attention=sdpa batch_per_gpu={b}", "gpus": 1, "nodes": 1,
         "global_batch": b, "unit": "tokens", "tokens_per_s_per_gpu": rate,
         "images_per_s": float("nan"), "memory_gib": memory, "speedup": 1.0,
         "efficiency": 1.0, "epoch_time_s": float("nan"), "flags": "",
         "tokens_per_s": rate, "time_to_solution_s": 60.0, "cost_efficiency": 1.0}
        for b, rate, memory in ((6, 10485.0, 61.89), (14, 21000.0, 70.5))])
    failed = pd.DataFrame([
        {"run": "llama/attention-sdpa/batch_per_gpu-37/gpus1/rep1", "source": "dlscale",
         "series": "llama attention=sdpa batch_per_gpu=37", "model": "llama", "nodes": 1,
         "gpus": 1, "global_batch": 37, "repeat": 1, "status": "out_of_memory",
         "epochs_done": 0, "epochs_expected": 1, "problem": "CUDA out of memory"},
        {"run": "llama/attention-eager/batch_per_gpu-6/gpus1/rep1", "source": "dlscale",
         "series": "llama attention=eager batch_per_gpu=6", "model": "llama", "nodes": 1,
         "gpus": 1, "global_batch": 6, "repeat": 1, "status": "out_of_memory",
         "epochs_done": 0, "epochs_expected": 1, "problem": "CUDA out of memory"}])
    return scaling, failed


def test_the_first_page_names_the_largest_batch_that_fit():
    scaling, failed = tables()
    text = page(scaling, pd.DataFrame(), failed)
    assert "What fits in memory" in text
    assert ("- llama attention=sdpa on 1 GPU(s): the largest batch per GPU that fit is 14 "
            "(21000 tokens/s per GPU, 70.5 GiB); 37 ran out of memory") in text
    assert ("- llama attention=eager on 1 GPU(s): no batch per GPU fit: the smallest "
            "tried, 6, ran out of memory") in text


def test_no_section_where_nothing_ran_out_of_memory():
    scaling, failed = tables()
    text = page(scaling, pd.DataFrame(), failed.assign(status="failed"))
    assert "What fits in memory" not in text
