"""The 2026 edition's chapter 15 through `snakemake --profile profiles/local`: its
benchmark.py outputs (captured unchanged under torchrun, 1 and 2 ranks, two attention
implementations: tests/data/llm-chapter) as external runs, one series per knob value.
What a reader then sees: tokens/s per GPU and in all, never images/s; speedup and
efficiency from tokens/s; memory unknown on a CPU, never 0; time to solution; the cost
proxy and the price of a million tokens; the first page's token table; a throughput plot
in tokens/s; a prediction from the parameters where given, and where not a note that
says they are missing."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from conftest import ROOT, run_snakemake, write_config

pytestmark = pytest.mark.workflow
CHAPTER = ROOT / "tests" / "data" / "llm-chapter"
TRAINER = ROOT / "tests" / "data" / "hf-trainer"


def per_gpu(name: str) -> float:
    return float(re.findall(r"([\d.]+) Tokens/s/GPU", (CHAPTER / name).read_text())[0])


def test_the_chapters_outputs_are_a_token_study(tmp_path):
    # eager's entries give the tiny Llama's parameters (make_tiny_llama.py prints them),
    # sdpa's do not; the link within a node is given, as a user would
    entries = "".join(
        f"  - {{log: {CHAPTER}/tokens_{ranks}rank_{attn}_b2_fp32.out, model: TinyLlama, "
        f"label: llama {attn}{', gpus: 1' if ranks == 1 else ''}"
        f"{', parameters: 210200' if attn == 'eager' else ''}}}\n"
        for attn in ("eager", "sdpa") for ranks in (1, 2))
    # a Trainer run of its own counting tokens (include_num_input_tokens_seen): the
    # processes and parameters from its banner, nothing given
    entries += "".join(f"  - {{log: {TRAINER}/tokens_{n}proc.out, model: TinyLlama, "
                       "label: llama trainer}\n" for n in (1, 2))
    config = write_config(tmp_path / "c.yaml", "sweep: {models: []}\nanalysis: "
                          "{gpu_hour_price: 2.5, network: {within_node: {latency_us: 10, "
                          f"bus_bandwidth_gbs: 20}}}}}}\nexternal_runs:\n{entries}")
    run_snakemake(tmp_path, "--profile", str(ROOT / "profiles" / "local"),
                  f"--configfile={config}", "all")
    table = pd.read_csv(tmp_path / "results/tables/scaling.csv").set_index(["series", "gpus"])
    for attn in ("eager", "sdpa"):
        one, two = (per_gpu(f"tokens_{r}rank_{attn}_b2_fp32.out") for r in (1, 2))
        row = table.loc[(f"llama {attn}", 2)]
        assert row["unit"] == "tokens" and pd.isna(row["images_per_s"])
        assert row["tokens_per_s_per_gpu"] == pytest.approx(two, rel=1e-5)
        assert row["tokens_per_s"] == pytest.approx(2 * two, rel=1e-5)
        assert row["speedup"] == pytest.approx(2 * two / one, rel=1e-5)
        assert row["efficiency"] == pytest.approx(two / one, rel=1e-5)
        assert row["cost_efficiency"] == pytest.approx(two / one, rel=1e-5)
        price = 2 * 2.5 / (2 * two * 3600) * 1e6  # 2 GPUs at 2.5 an hour
        assert row["price_per_million_tokens"] == pytest.approx(price, rel=1e-5)
        assert pd.isna(row["memory_gib"])  # the log's 0.00 on a CPU is no measurement
        runtime = re.findall(r"\[default0\]:.*'train_runtime': '([\d.]+)'",
                             (CHAPTER / f"tokens_2rank_{attn}_b2_fp32.out").read_text())
        assert row["time_to_solution_s"] == float(runtime[-1])
        assert "no training accuracy" not in str(row["flags"])
    one, two = (pd.read_csv(tmp_path / "results/tables/runs.csv").set_index(
        ["series", "gpus"]).loc[("llama trainer", n)] for n in (1, 2))
    row = table.loc[("llama trainer", 2)]  # the run's own tokens/s, halved per GPU
    assert row["tokens_per_s_per_gpu"] == pytest.approx(two["tokens_per_s"] / 2, rel=1e-6)
    assert row["efficiency"] == pytest.approx(two["tokens_per_s"] / 2 / one["tokens_per_s"],
                                              rel=1e-5)
    [runtime] = re.findall(r"\{'train_runtime': '([\d.]+)'",
                           (TRAINER / "tokens_2proc.out").read_text())
    assert row["time_to_solution_s"] == float(runtime)
    first = (tmp_path / "results/report/first-page.rst").read_text()
    assert "tokens/s per GPU" in first and "memory (GiB)" in first and "unknown" in first
    assert "tokens/s" in (tmp_path / "results/plots/throughput.svg").read_text()
    prediction = pd.read_csv(tmp_path / "results/tables/prediction.csv")
    eager, sdpa = (prediction[prediction["series"] == f"llama {a}"] for a in ("eager", "sdpa"))
    # float32 gradients of 210,200 parameters; the step is the Trainer's
    assert (eager["gradient_bytes"] == 210200 * 4).all()
    steps = re.findall(r"\[default0\]:.*'train_steps_per_second': '([\d.]+)'",
                       (CHAPTER / "tokens_2rank_eager_b2_fp32.out").read_text())
    held = eager[eager["role"] == "held out"].iloc[0]
    assert held["measured_step_s"] == pytest.approx(1 / float(steps[-1]), rel=1e-6)
    assert pd.notna(held["predicted_step_s"]) and len(eager[eager["role"] == "extrapolated"])
    assert sdpa["note"].str.contains("no line of its output states them").all()
    trainer = prediction[prediction["series"] == "llama trainer"]
    assert (trainer["gradient_bytes"] == 210240 * 4).all()  # its banner's parameters
