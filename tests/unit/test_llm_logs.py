"""A language model's output read without a pattern (issue 97): the 2026 edition's
chapter 15 (benchmark.py unchanged under torchrun, tests/data/llm-chapter) as tokens/s per
GPU with its memory, and real step-based outputs (tests/data/llm-logs: torchtitan's per
device tps on 8 GPUs, a nanochat run's tok/sec) as their steady tokens/s. Each expected
figure is read from the capture's own lines here, not written down."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from dlscale.logparse.reader import parse_file_runs

CHAPTER = ROOT / "tests" / "data" / "llm-chapter"
LOGS = ROOT / "tests" / "data" / "llm-logs"
TRAINER = ROOT / "tests" / "data" / "hf-trainer"


def printed(path, pattern: str) -> list[str]:
    """What the capture's whole lines say (text after its last newline may be cut: the
    reader takes no result from it)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return re.findall(pattern, text[:text.rfind("\n") + 1])


@pytest.mark.parametrize("name, gpus", [("tokens_1rank_sdpa_b2_fp32.out", None),
                                        ("tokens_1rank_eager_b2_fp32.out", None),
                                        ("tokens_2rank_sdpa_b2_fp32.out", 2),
                                        ("tokens_2rank_sdpa_b4_fp32.out", 2)])
def test_the_chapters_output_is_tokens_per_gpu_never_images(name, gpus):
    path = CHAPTER / name
    [run] = parse_file_runs(str(path))
    [per_gpu] = printed(path, r"Training throughput:\s+([\d.]+) Tokens/s/GPU")
    assert (run.rate, run.unit, run.per_gpu) == (float(per_gpu), "tokens", True)
    assert run.settings.get("gpus") == gpus  # two ranks' prefixes: 2 GPUs
    # the Trainer's samples/s is kept beside, not as the run's rate
    samples = printed(path, r"\[default0\]:.*'train_samples_per_second': '([\d.]+)'")[-1]
    assert run.facts["samples_per_s"] == float(samples)
    # torch.cuda counted nothing on a CPU: unknown, never 0
    assert "memory_gib" not in run.facts and "no GPU counted it" in run.facts["memory_note"]


def parse_log(log, tmp_path) -> tuple[dict, str]:
    """`dlscale parse-log LOG`: (its table's one row, what it printed)."""
    out = tmp_path / "t.csv"
    proc = subprocess.run([sys.executable, "-m", "dlscale.console", "parse-log", str(log),
                           "-o", str(out)], capture_output=True, text=True, check=True)
    [row] = list(csv.DictReader(out.open()))
    return row, proc.stdout


def test_parse_log_writes_tokens_per_s_of_the_run_and_of_a_gpu(tmp_path):
    row, printed_out = parse_log(CHAPTER / "tokens_2rank_sdpa_b2_fp32.out", tmp_path)
    [per_gpu] = printed(CHAPTER / "tokens_2rank_sdpa_b2_fp32.out",
                        r"([\d.]+) Tokens/s/GPU")
    assert float(row["tokens_per_s_per_gpu"]) == float(per_gpu)
    assert float(row["tokens_per_s"]) == pytest.approx(2 * float(per_gpu))
    assert row["unit"] == "tokens" and "logged_images_per_s" not in row
    assert "tokens/s per GPU" in printed_out and "images" not in printed_out


def test_every_ranks_own_trainer_summary_is_one_run_and_a_difference_is_said():
    # without --use_cpu each rank trained alone and printed its own summary; torchrun's
    # tee joined rank 0's to rank 1's progress bar on one line
    path = CHAPTER / "tokens_2rank_sdpa_b2_fp32_nousecpu.out"
    [run] = parse_file_runs(str(path))
    [per_gpu] = printed(path, r"([\d.]+) Tokens/s/GPU")
    assert (run.rate, run.settings["gpus"]) == (float(per_gpu), 2)
    rank1 = printed(path, r"\[default1\]:\{'train_runtime'.*'train_samples_per_second': "
                          r"'([\d.]+)'")
    assert any(f"({rank1[0]} samples/s) differs" in w for w in run.warnings)


@pytest.mark.parametrize("processes", [1, 2])
def test_a_trainers_tokens_seen_are_the_runs_steady_tokens_per_s_not_an_epoch(processes):
    # transformers' include_num_input_tokens_seen: every logged dict carries the tokens
    # seen so far, gathered over the ranks, and the time since the training began
    path = TRAINER / f"tokens_{processes}proc.out"
    [run] = parse_file_runs(str(path))
    seen = [(int(t), float(s)) for t, s in printed(
        path, r"'num_input_tokens_seen': (\d+), 'train_runtime': '([\d.e+-]+)'")]
    skip = len(seen) // 10  # the first tenth of the intervals, from the start, a warm-up
    (tokens0, time0), (tokens1, time1) = seen[skip - 1], seen[-1]
    assert run.rate == pytest.approx((tokens1 - tokens0) / (time1 - time0), rel=1e-8)
    assert (run.unit, run.per_gpu) == ("tokens", False)
    assert "num_input_tokens_seen" in run.facts["rate_scope"]
    # the banner's total batch over a device's batch and the accumulation: the processes
    [total] = printed(path, r"Total train batch size .* = (\d+)")
    [each] = printed(path, r"Instantaneous batch size per device = (\d+)")
    assert run.settings["gpus"] == int(total) // int(each) == processes
    assert "Total train batch size" in run.facts["gpus_from"]
    # 200 steps are a tenth of one pass over its data: a run of steps, no epoch
    [planned] = printed(path, r"Total optimization steps = (\d+)")
    assert not run.epochs and run.facts["steps_done"] == int(planned)
    assert "epoch_time_from" not in run.facts
    [total_seen] = printed(path, r"'train_loss'.*'num_input_tokens_seen': (\d+)")
    assert run.facts["step_time_s"] == pytest.approx(int(total_seen) / int(planned) / run.rate)
    [samples] = printed(path, r"\{'train_runtime'.*'train_samples_per_second': '([\d.]+)'")
    assert run.facts["samples_per_s"] == float(samples)  # kept beside, never "images"
    [parameters] = printed(path, r"Number of trainable parameters = ([\d,]+)")
    assert run.facts["parameters"] == int(parameters.replace(",", ""))


def test_parse_log_gives_a_trainers_tokens_per_gpu_from_its_global_rate(tmp_path):
    row, printed_out = parse_log(TRAINER / "tokens_2proc.out", tmp_path)
    assert float(row["tokens_per_s_per_gpu"]) == pytest.approx(float(row["tokens_per_s"]) / 2)
    assert row["gpus"] == "2" and row["epoch"] == "" and "logged_images_per_s" not in row
    assert "images" not in printed_out


def steps(path, pattern: str) -> list[tuple[int, float]]:
    return [(int(s), float(r.replace(",", ""))) for s, r in printed(path, pattern)]


def test_torchtitans_per_device_tps_is_one_gpus_rate_of_the_steps_after_the_first():
    path = LOGS / "torchtitan_qwen3-14b_8xB200_run217.log"
    [run] = parse_file_runs(str(path))
    found = steps(path, r"step:\s+(\d+) .* tps: ([\d,]+)")
    assert run.facts["steps_done"] == found[-1][0] and run.facts["steps_skipped"] == 1
    assert run.rate == pytest.approx(sum(r for _s, r in found[1:]) / (len(found) - 1))
    assert (run.unit, run.per_gpu, run.settings["gpus"]) == ("tokens", True, 8)
    assert "torchtitan" in run.facts["rate_scope"]
    mfu = [float(m) for m in printed(path, r"mfu: ([\d.]+)%")][1:]
    assert run.facts["mfu_percent"] == pytest.approx(sum(mfu) / len(mfu), abs=1e-4)
    assert run.facts["memory_gib"] == max(float(m) for m in printed(path, r"memory: ([\d.]+)GiB"))


def test_a_tok_per_sec_step_line_is_the_runs_rate_after_a_tenth_of_its_steps():
    path = LOGS / "nanochat_fork_sft_d2_1xGTX1660.log"
    [run] = parse_file_runs(str(path))
    found = steps(path, r"step (\d+) .*\| tok/sec: ([\d,]+)")
    skip = len(found) // 10
    assert run.facts["steps_skipped"] == skip and run.facts["steps_done"] == found[-1][0]
    assert run.rate == pytest.approx(sum(r for _s, r in found[skip:]) / (len(found) - skip))
    assert (run.unit, run.per_gpu) == ("tokens", False)  # its words say no GPU
    assert not run.epochs  # its `epoch: 1` field is no epoch line


def test_a_global_tps_beside_its_per_gpu_one_is_the_runs_rate_on_8_gpus():
    # a nanoGPT-like trainer (saforem2/wordplay) under mpirun on 8 GPUs, its terminal log
    # in a course's homework file: `step=10 ... tps=1.84693e+06 tps_per_gpu=230866`, the
    # first the run's (its legend: "Tokens per second"), read as "no finished epoch" before
    path = LOGS / "wordplay_ddp_8gpu_sophia.md"
    [run] = parse_file_runs(str(path))
    found = [(int(s), float(g), float(e)) for s, g, e in printed(
        path, r"step=(\d+) .* tps=([\d.e+]+) tps_per_gpu=([\d.e+]+)")]
    skip = len(found) // 10
    assert run.facts["steps_done"] == found[-1][0] and run.facts["steps_skipped"] == skip
    assert run.rate == pytest.approx(sum(g for _s, g, _e in found[skip:]) / (len(found) - skip))
    assert (run.unit, run.per_gpu) == ("tokens", False)
    assert run.settings["gpus"] == 8  # the file's world size: its rate per GPU an eighth
    assert run.rate / 8 == pytest.approx(
        sum(e for _s, _g, e in found[skip:]) / (len(found) - skip), rel=1e-4)
    # nanoGPT's sizes: `number of parameters: 85.00M` (rounded), `num_params=85003776`,
    # then its optimizer's groups (`with 19,200 parameters`): the model's is the exact one
    [exact] = printed(path, r"num_params=(\d+)")
    assert run.facts["parameters"] == int(exact)
