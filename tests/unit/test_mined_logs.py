"""A training script's own output read without a pattern (dlscale.logparse.formats.mined):
its epoch line found by template mining, epochs timed by timestamps, copies per node
counted once, runs that never finished kept as such, and a refusal that offers a pattern.
Real captures: tests/data/own-scripts (README.md says how each was made)."""

from __future__ import annotations

import math
import re

import pytest
from conftest import ROOT

from dlscale.logparse.reader import compile_patterns, parse_file_runs, parse_runs
from dlscale.logparse.runs import LogError

DATA = ROOT / "tests" / "data" / "own-scripts"


def test_a_took_line_in_the_scripts_own_words_is_its_epoch():
    text = ("Starting training on 16 GPUs\n"
            "Epoch 1 took: 12.31s loss=2.3012 acc=11.2%\n"
            "some warning 42\n"
            "Epoch 2 took: 10.05s loss=1.9000 acc=31.0%\n"
            "Epoch 3 took: 10.11s loss=1.5000 acc=45.5%\n")
    [run] = parse_runs(text, "took.out")
    assert [(r["epoch"], r["seconds"], r["loss"], r["accuracy"]) for r in run.rows()] == [
        (1, 12.31, 2.3012, 0.112), (2, 10.05, 1.9, 0.31),
        (3, 10.11, 1.5, 0.455)]
    assert run.rows()[0]["seconds_resolution"] == pytest.approx(0.01)
    # which template, from which line: a user can check it
    assert run.facts["epoch_line"].startswith("`Epoch <n> took: <time> loss=<n> acc=<percent>`"
                                              " (line 2: ")


def test_logging_lines_time_each_epoch_by_the_gap_to_the_next_and_read_its_validation():
    text = ("2026-12-02 10:00:00,000 INFO Epoch 0\n"
            "2026-12-02 10:00:30,250 INFO Validation loss: 2.3000 accuracy: 0.1000\n"
            "2026-12-02 10:01:00,500 INFO Epoch 1\n"
            "2026-12-02 10:01:29,000 INFO Validation loss: 2.1000 accuracy: 0.2000\n"
            "2026-12-02 10:01:58,000 INFO Epoch 2\n"
            "2026-12-02 10:02:27,000 INFO Validation loss: 2.0000 accuracy: 0.3000\n")
    [run] = parse_runs(text, "logging.out")
    rows = run.rows()
    assert [r["epoch"] for r in rows] == [1, 2, 3]  # counted from 0 in the log
    # from one epoch's line to the next; the last to the stream's last timestamp
    assert [r["seconds"] for r in rows] == pytest.approx([60.5, 57.5, 29.0])
    assert [(r["val_loss"], r["val_accuracy"]) for r in rows] == [
        (2.3, 0.1), (2.1, 0.2), (2.0, 0.3)]
    assert rows[0]["seconds_resolution"] == pytest.approx(0.001)
    assert "gap between timestamps" in run.facts["epoch_time_from"]


@pytest.mark.parametrize("stamp, seconds", [
    ("2026-12-02T10:00:00Z", 1796205600.0),
    ("2026-12-02T12:00:00+02:00", 1796205600.0),
    ("2026-12-02 10:00:00,250", 1796205600.25),
    ("Wed Dec  2 10:00:00 UTC 2026", 1796205600.0),  # date's echo
    ("10:00:00.5", 36000.5),                          # a time of day alone
])
def test_timestamps_in_the_common_shapes_are_read_as_seconds(stamp, seconds):
    from dlscale.logparse.templates import stamp_seconds

    assert stamp_seconds(stamp) == pytest.approx(seconds)


def test_an_epoch_start_in_words_is_timed_by_the_timestamps_of_the_lines_around_it():
    """DeepSpeed-Chat's words (no time of their own) between DeepSpeed's logger lines."""
    lines = []
    for epoch in (1, 2):
        lines.append(f"Beginning of Epoch {epoch}/3, Total Micro Batches 8")
        for step in (4, 8):
            lines.append(f"[2026-12-02 10:0{epoch}:{step:02d},000] [INFO] [engine.py:1:step] "
                         f"step={step}, skipped=0")
        lines.append(f"***** Evaluating perplexity, Epoch {epoch}/3 *****")
        lines.append(f"ppl: {10 - epoch}.5, loss: {2.5 - epoch / 10}")
    [run] = parse_runs("\n".join(lines) + "\n", "ds.out")
    assert run.epochs_total == 3
    assert run.facts["epoch_line"].startswith("`Beginning of Epoch <n>/<n>, Total Micro")
    rows = run.rows()
    # epoch 1: no timestamp before its line; epoch 2: from the last one before its line
    # (10:01:08) to the stream's last (10:02:08)
    assert [r["seconds"] for r in rows] == [None, 60.0]
    # the evaluation after each epoch (its line follows "Evaluating perplexity")
    assert [r["val_loss"] for r in rows] == [2.4, 2.3] and "loss" not in rows[0]
    assert run.cut and run.facts["unfinished"] == "stopped at epoch 2 of 3"


def test_of_several_epoch_shapes_the_counter_rising_by_one_with_a_time_wins():
    text = "".join(f"Epoch {e} step {s} of 100\nEpoch {e} step {s + 10} of 100\n"
                   f"epoch {e}: time {e + 1.5:.1f} s\n" for e, s in ((1, 10), (2, 10)))
    [run] = parse_runs(text, "two.out")
    assert [(r["epoch"], r["seconds"]) for r in run.rows()] == [(1, 2.5), (2, 3.5)]
    assert "epoch <n>: time <time>" in run.facts["epoch_line"]


def test_the_same_epoch_line_from_every_node_is_one_epoch_and_a_drop_the_next_run():
    once = [f"Epoch {e} took: {e}.00s loss=1.{e}" for e in (1, 2, 3)]
    copies = [line for line in once for _node in range(4)]  # unprefixed, 4 nodes
    copies[5] = copies[5].replace("2.00s", "2.50s")  # one node slower in epoch 2
    runs = parse_runs("\n".join(copies + once[:2]) + "\n", "copies.out")
    assert [[r["epoch"] for r in run.rows()] for run in runs] == [[1, 2, 3], [1, 2]]
    assert [r["seconds"] for r in runs[0].rows()] == [1.0, 2.5, 3.0]  # the slowest copy
    assert runs[0].facts["copies"] == 4


def test_a_run_total_is_shared_over_epochs_read_at_the_streams_end():
    """The FSDP tutorial's lines: no epoch time, a CUDA event total at the end."""
    text = ("Train Epoch: 1 \tLoss: 0.211924\n"
            "Test set: Average loss: 0.0483, Accuracy: 9848/10000 (98.48%)\n\n"
            "Train Epoch: 2 \tLoss: 0.111924\n"
            "Test set: Average loss: 0.0383, Accuracy: 9878/10000 (98.78%)\n\n"
            "CUDA event elapsed time: 7.0sec\n")
    [run] = parse_runs(text, "fsdp.out")
    rows = run.rows()
    assert [(r["epoch"], r["seconds"], r["loss"]) for r in rows] == [
        (1, 3.5, 0.211924), (2, 3.5, 0.111924)]
    assert [(r["val_loss"], r["val_accuracy"]) for r in rows] == [
        (0.0483, 0.9848), (0.0383, 0.9878)]
    assert run.facts["epoch_time_from"] == (
        "the run's total time (7 s, line 7) shared over its 2 epochs")


def test_an_average_time_per_epoch_and_a_total_training_time_are_run_totals():
    epochs = "Epoch 1 done loss=2.0\nEpoch 2 done loss=1.5\n"
    [run] = parse_runs(epochs + "Average time per epoch: 12.5s\n", "avg.out")
    assert [r["seconds"] for r in run.rows()] == [12.5, 12.5]
    [run] = parse_runs(epochs + "Total training time: 0:00:30\n", "total.out")
    assert [r["seconds"] for r in run.rows()] == [15.0, 15.0]


def test_slurms_cancel_line_leaves_the_run_unfinished_with_its_reason():
    text = ("Epoch 1 took: 5.00s loss=2.0\nEpoch 2 took: 5.00s loss=1.9\n"
            "slurmstepd: error: *** JOB 4711 ON node03 CANCELLED AT 2026-12-02T10:00:00 "
            "DUE TO TIME LIMIT ***\n")
    [run] = parse_runs(text, "cancelled.out")
    assert [r["epoch"] for r in run.rows()] == [1, 2] and run.cut and run.cut_epoch == 3
    assert run.facts["unfinished"] == (
        "SLURM cancelled 4711 at 2026-12-02T10:00:00 due to time limit")


def hf_dict(loss: float, epoch: float) -> str:
    return f"{{'loss': '{loss}', 'learning_rate': '2e-05', 'epoch': '{epoch}'}}\n"


def test_a_trainer_stopped_inside_its_first_epoch_has_no_finished_epoch_and_says_why():
    """Cancelled at step 394 of 1000: the dicts reached epoch 0.39, no summary came."""
    text = hf_dict(2.3, 0.1) + hf_dict(2.2, 0.39) + (
        " 39%|███▉      | 394/1000 [10:00<15:23,  1.52s/it]\n")
    with pytest.raises(LogError, match=r"the run never finished \(the Trainer stopped at "
                                       r"epoch 0\.39 and printed no train_runtime; its "
                                       r"progress bar stopped at 394 of 1000\)"):
        parse_runs(text, "cancelled.out")
    finished = hf_dict(2.3, 1.0) + hf_dict(2.2, 1.39)
    [run] = parse_runs(finished, "second.out")
    assert [r["epoch"] for r in run.rows()] == [1] and run.cut and run.cut_epoch == 2
    # its epochs finished, but no summary came: the run never finished
    [run] = parse_runs(hf_dict(2.3, 1.0) + hf_dict(2.2, 2.0), "third.out")
    assert [r["epoch"] for r in run.rows()] == [1, 2] and run.cut and run.cut_epoch == 3
    assert run.facts["unfinished"] == "the Trainer stopped at epoch 2 and printed no train_runtime"


SUMMARY = ("{'train_runtime': '%s', 'train_samples_per_second': '120.5', "
           "'train_steps_per_second': '1.2', 'train_loss': '0.5', 'epoch': '3'}\n")


def test_the_trainers_summary_printed_by_every_node_is_one_run_with_its_hosts_noted():
    runs = parse_runs("".join(f"worker-{i}: " + SUMMARY % "100.0" for i in range(4)), "n.out")
    assert len(runs) == 1 and runs[0].rate == 120.5
    assert runs[0].facts["summary_copies"] == 4
    assert runs[0].facts["summary_hosts"] == "worker-0 worker-1 worker-2 worker-3"
    assert runs[0].warnings == []
    differs = SUMMARY % "100.0" + "worker-1: " + SUMMARY % "101.0"
    [run] = parse_runs(differs, "d.out")
    assert "differs from the first one's" in run.warnings[0]
    assert len(parse_runs(SUMMARY % "100.0" * 8, "u.out")) == 1  # unprefixed copies


def test_a_raw_nan_in_the_summary_is_kept_as_nan_and_dicts_without_epoch_are_said():
    [run] = parse_runs("{'train_runtime': 10.0, 'train_samples_per_second': 5.0, "
                       "'train_steps_per_second': 1.0, 'train_loss': nan, 'epoch': 1.0}\n",
                       "nan.out")
    assert run.rate == 5.0 and math.isnan(run.facts["train_loss"])
    [run] = parse_runs("{'loss': 2.3, 'learning_rate': 1e-05}\n" + SUMMARY % "100.0", "w.out")
    assert "carry no 'epoch'" in run.warnings[0] and "patterns" in run.warnings[0]


def test_a_command_echoed_after_a_tqdm_run_keeps_its_last_epoch():
    """/usr/bin/time -v's lines after a Lightning run (issue 85, item 6)."""
    bar = "Epoch {e}: 100%|██████████| 4/4 [00:01<00:00,  2.00it/s, train_loss=1.{e}]\n"
    text = "".join(bar.format(e=e) for e in range(3)) + (
        '\tCommand being timed: "python train.py --epochs 3"\n\tUser time (seconds): 12.3\n')
    [run] = parse_runs(text, "timed.out")
    assert [r["epoch"] for r in run.rows()] == [1, 2, 3]


def test_nothing_found_names_what_was_looked_for_the_likeliest_line_and_a_pattern(tmp_path):
    text = ("loading\nep 3 of training lasted 2.5 s, loss 0.3\n"
            "ep 4 of training lasted 2.4 s, loss 0.2\n")
    with pytest.raises(LogError) as refused:
        parse_runs(text, "odd.out")
    message = str(refused.value)
    assert "looked for Keras' lines" in message and "names an epoch" in message
    assert "line 2: ep 3 of training lasted 2.5 s, loss 0.3" in message
    example = re.search(r"external_runs\[\]\.patterns: \{epoch_time: '(.*?)'\}", message)[1]
    # the example given reads the line it was built from
    log = tmp_path / "odd.out"
    log.write_text(text)
    [run] = parse_file_runs(str(log), compile_patterns({"epoch_time": example}))
    assert [r["seconds"] for r in run.rows()] == [2.5, 2.4]


def test_each_run_of_a_scripts_own_lines_takes_the_settings_stated_before_it():
    text = "".join(f"python train.py --gpus {gpus} --batch_size 64\n" + "".join(
        f"Epoch {e} took: {e}.0s loss=1.0\n" for e in (1, 2)) for gpus in (1, 2))
    runs = parse_runs(text, "two-runs.out")
    assert [run.settings for run in runs] == [{"gpus": 1, "batch_per_gpu": 64},
                                              {"gpus": 2, "batch_per_gpu": 64}]
    assert [run.line for run in runs] == [1, 5]
    assert "no known format: the epochs are the lines `Epoch <n> took" in runs[0].warnings[0]


def test_a_logging_run_killed_inside_an_epoch_keeps_the_epochs_it_finished():
    """An epoch begun (`INFO Epoch 2`) whose validation never came is not an epoch."""
    text = ("2026-12-02 10:00:00,000 INFO Epoch 0\n"
            "2026-12-02 10:00:30,000 INFO Validation loss: 2.3000 accuracy: 0.1000\n"
            "2026-12-02 10:01:00,000 INFO Epoch 1\n"
            "2026-12-02 10:01:30,000 INFO Validation loss: 2.1000 accuracy: 0.2000\n"
            "2026-12-02 10:02:00,000 INFO Epoch 2\n"
            "2026-12-02 10:02:10,000 INFO step 10\n")
    [run] = parse_runs(text, "killed.out")
    assert [(r["epoch"], r["seconds"]) for r in run.rows()] == [(1, 60.0), (2, 60.0)]
    assert run.cut and run.cut_epoch == 3
    assert run.facts["unfinished"] == "epoch 3 began (line 5) and has no evaluation line"


def stamps(path, word: str) -> list[float]:
    """The timestamps of a capture's lines that hold `word`, in seconds."""
    from dlscale.logparse.templates import stamp_seconds

    return [stamp_seconds(m[1]) for m in re.finditer(
        r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]? \S*\s?(?:INFO )?.*" + word,
        path.read_text())]


@pytest.mark.parametrize("name", ["logging_ddp_tee.out", "logging_ddp.out"])
def test_a_logging_only_ddp_capture_is_timed_by_its_timestamps(name):
    """torchrun --tee's rank prefixes (two streams, the slower counts) and both ranks'
    lines unprefixed (each line twice, interleaved: copies counted once)."""
    path = DATA / name
    [run] = parse_file_runs(str(path))
    rows = run.rows()
    assert [r["epoch"] for r in rows] == [1, 2, 3] and not run.cut
    text = path.read_text()
    losses = [float(v) for v in re.findall(r"Validation loss: ([\d.]+)", text)]
    assert [r["val_loss"] for r in rows] == sorted(set(losses), key=losses.index)
    starts = stamps(path, "Epoch ")
    ends = stamps(path, "Validation")
    assert run.streams == (2 if "tee" in name else 1)
    if "tee" not in name:  # one stream: from the first copy of each epoch's line
        firsts = starts[::2] + [max(ends)]
        assert [r["seconds"] for r in rows] == pytest.approx(
            [b - a for a, b in zip(firsts, firsts[1:])], abs=1e-6)
    assert all(0.3 < r["seconds"] < 10 for r in rows)
    assert "gap between timestamps" in run.facts["epoch_time_from"]


def test_a_took_capture_gives_each_epochs_stated_time_and_metrics():
    path = DATA / "took.out"
    [run] = parse_file_runs(str(path))
    found = re.findall(r"Epoch (\d+) took: ([\d.]+)s loss=([\d.]+) acc=([\d.]+)%",
                       path.read_text())
    assert [(r["epoch"], r["seconds"], r["loss"], r["accuracy"]) for r in run.rows()] == [
        (int(e), float(s), float(loss), round(float(a) / 100, 12)) for e, s, loss, a in found]
    assert run.facts.get("epoch_time_from") is None  # its own times, not the totals


def test_the_fsdp_tutorials_capture_shares_its_cuda_event_total_over_its_epochs():
    path = DATA / "fsdp_tutorial.out"
    [run] = parse_file_runs(str(path))
    text = path.read_text()
    total = float(re.search(r"CUDA event elapsed time: ([\d.]+)sec", text)[1])
    rows = run.rows()
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert [r["seconds"] for r in rows] == pytest.approx([total / 3] * 3)
    assert [r["loss"] for r in rows] == [
        float(v) for v in re.findall(r"Train Epoch: \d+ \tLoss: ([\d.]+)", text)]
    tests = re.findall(r"Average loss: ([\d.]+), Accuracy: (\d+)/(\d+)", text)
    assert [(r["val_loss"], r["val_accuracy"]) for r in rows] == [
        (float(v), int(a) / int(b)) for v, a, b in tests]


def test_the_deepspeed_words_capture_times_each_epoch_start_by_the_lines_around_it():
    path = DATA / "deepspeed_words.out"
    [run] = parse_file_runs(str(path))
    text = path.read_text()
    rows = run.rows()
    assert [r["epoch"] for r in rows] == [1, 2, 3] and run.epochs_total == 3
    assert not run.cut
    assert [r["val_loss"] for r in rows] == [
        float(v) for v in re.findall(r"ppl: [\d.]+, loss: ([\d.]+)", text)]
    # each start's clock: the last timestamped line before it; the last epoch runs to
    # the log's last timestamp
    lines = text.splitlines()
    clocks, clock = [], None
    for line in lines:
        if line.startswith("[20"):
            clock = stamps_of(line)
        elif line.startswith("Beginning of Epoch"):
            clocks.append(clock)
    clocks.append(clock)
    assert [r["seconds"] for r in rows] == pytest.approx(
        [b - a for a, b in zip(clocks, clocks[1:])], abs=1e-6)


def stamps_of(line: str) -> float:
    from dlscale.logparse.templates import stamp_seconds

    return stamp_seconds(line[1:24])


def test_a_capture_killed_inside_an_epoch_keeps_the_epochs_with_their_validation():
    path = DATA / "logging_killed.out"
    [run] = parse_file_runs(str(path))
    text = path.read_text()
    validated = len(set(re.findall(r"Validation loss: ([\d.]+)", text)))
    begun = len(set(re.findall(r"INFO Epoch (\d+)", text)))
    assert begun == validated + 1
    assert [r["epoch"] for r in run.rows()] == list(range(1, validated + 1))
    assert run.cut and run.cut_epoch == validated + 1
    assert run.facts["unfinished"].startswith(f"epoch {validated + 1} began (line ")


def test_json_lines_with_an_epoch_and_a_loss_are_no_unfinished_trainer():
    text = "".join(f'{{"epoch": {e}, "seconds": 1.5, "loss": 0.{e}}}\n' for e in (1, 2))
    [run] = parse_runs(text, "epochs.jsonl")
    assert [r["epoch"] for r in run.rows()] == [1, 2] and not run.cut


@pytest.mark.parametrize("name, seconds, metric", [
    # DPO: `Beginning of Epoch 1/1, Total Micro Batches 4708` (line 515), timed from the
    # last timestamped line before it to the log's last; its evaluation after it
    ("deepspeed_chat_dpo_opt-350M.log", 1701.33, ("val_loss", 0.6650807857513428)),
    # reward model: `Epoch 1/1 with loss 0.5754789632299672` ends the epoch, timed from
    # the log's first timestamp
    ("deepspeed_chat_reward_opt-350m.log", 542.251, ("loss", 0.5754789632299672)),
])
def test_deepspeed_chats_own_logs_are_read_without_a_pattern(name, seconds, metric):
    """DeepSpeedExamples' stored training logs (tests/data/launch/README.md: their source)."""
    [run] = parse_file_runs(str(ROOT / "tests" / "data" / "launch" / name))
    [row] = run.rows()
    assert (row["epoch"], run.epochs_total, row["seconds"]) == (1, 1, seconds)
    assert row[metric[0]] == metric[1] and not run.cut


def test_a_run_whose_progress_bar_stopped_short_says_so():
    """A Trainer cancelled at step 394 of 1000 before it logged a dict: only its bar."""
    text = ("***** Running training *****\n"
            " 39%|███▉      | 393/1000 [10:00<15:23,  1.52s/it]\r"
            " 39%|███▉      | 394/1000 [10:01<15:22,  1.52s/it]\n")
    with pytest.raises(LogError, match=r"the run never finished \(its progress bar stopped "
                                       r"at 394 of 1000\)"):
        parse_runs(text, "bar.out")


@pytest.mark.parametrize("epoch_line, kept", [
    ("2026-12-02 10:0{e}:00,000 INFO Epoch {e}", [1]),  # a start: epoch 2 never ended
    ("Epoch {e} took: 60.0s loss=0.{e}", [1, 2]),       # an end: both ended, the run not
])
def test_a_traceback_after_the_last_epoch_line_leaves_the_run_unfinished(epoch_line, kept):
    text = "\n".join([epoch_line.format(e=e) for e in (1, 2)] + [
        "Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
        "RuntimeError: CUDA error: an illegal memory access was encountered", ""])
    [run] = parse_runs(text, "crash.out")
    assert [r["epoch"] for r in run.rows()] == kept and run.cut
    assert "a traceback follow" in run.facts["unfinished"] and "(line 3)" in run.facts[
        "unfinished"]


def test_a_job_slurm_cancelled_at_its_time_limit_is_unfinished_with_slurms_reason():
    """srun -l's `0: ` lines, both ranks' copies in them; SLURM's cancel lines for the
    step (the task's lines) and the job (the job's own)."""
    path = DATA / "logging_timelimit.out"
    [run] = parse_file_runs(str(path))
    text = path.read_text()
    validated = len(set(re.findall(r"Validation loss: ([\d.]+)", text)))
    assert [r["epoch"] for r in run.rows()] == list(range(1, validated + 1))
    assert run.cut and run.cut_epoch == validated + 1
    job = re.search(r"\*\*\* JOB (\d+) ON \S+ CANCELLED AT (\S+) DUE TO TIME LIMIT", text)
    assert run.facts["unfinished"] == f"SLURM cancelled {job[1]} at {job[2]} due to time limit"
    assert all(r["seconds"] and 3 < r["seconds"] < 15 for r in run.rows()[1:])


def test_a_logging_only_ddp_job_under_srun_label_is_timed_by_its_slower_rank():
    path = DATA / "logging_srun.out"
    [run] = parse_file_runs(str(path))
    assert run.streams == 2 and run.settings["gpus"] == 2  # the two tasks' labels
    per_task = []
    for task in ("0", "1"):
        lines = [line[3:] for line in path.read_text().splitlines()
                 if line.startswith(f"{task}: 20")]
        clocks = [stamps_of("[" + line) for line in lines
                  if "Epoch" in line] + [stamps_of("[" + lines[-1])]
        per_task.append([b - a for a, b in zip(clocks, clocks[1:])])
    assert [r["seconds"] for r in run.rows()] == pytest.approx(
        [max(times) for times in zip(*per_task)], abs=1e-6)


def test_an_epochs_step_lines_are_no_copies_and_their_step_times_no_epochs_time():
    text = "".join(f"Epoch {e} step {s} time 0.5s\n" for e in (1, 2, 3) for s in (1, 2, 3))
    [run] = parse_runs(text, "steps.out")
    assert [(r["epoch"], r["seconds"]) for r in run.rows()] == [(1, None), (2, None),
                                                                (3, None)]
    assert "copies" not in run.facts
