"""The PyTorch world's logs on real captures: tqdm's epoch bars (dlscale.logparse.formats.tqdm)
as Lightning draws them (tests/data/pytorch), and a Trainer's closing total (hf-trainer)."""

from __future__ import annotations

import re

import pytest
from conftest import ROOT

from dlscale.logparse.formats.tqdm import bar_state, metrics
from dlscale.logparse.reader import parse_file_runs, parse_runs

DATA = ROOT / "tests" / "data" / "pytorch"


@pytest.mark.parametrize("name, rates", [
    ("lightning_ddp.out", [62.09, 112.40, 105.31]),  # carriage returns, one process's
    ("torchrun_lightning.out", [119.04, 159.81]),    # torchrun --tee: [default0]: lines
    ("torchrun_rank_prefix.out", [162.90, 140.88]),  # [rank0]: lines
])
def test_a_lightning_bars_last_state_at_100_percent_is_its_epoch(name, rates):
    [run] = parse_file_runs(str(DATA / name))
    rows = run.rows()
    assert [r["epoch"] for r in rows] == list(range(1, len(rates) + 1))  # from Epoch 0
    assert [r["seconds"] for r in rows] == pytest.approx([8 / rate for rate in rates])
    assert {(r["steps"], r["loss"], r["val_loss"], r["val_accuracy"]) for r in rows} == {
        (8, 2.32, 2.3, 0.125)}
    assert run.settings["gpus"] == 2  # "Starting with 2 processes"
    assert run.streams == 1 and not run.cut and run.warnings == []


def test_a_bar_state_before_100_percent_or_without_a_rate_is_no_result():
    assert bar_state("Epoch 0:  50%|█████     | 4/8 [00:00<00:00, 126.09it/s, "
                     "train_loss_step=2.340]") == (1, None, None)
    assert bar_state("Epoch 3: 100%|██████████| 8/8 [00:00<?]")[2] is None
    assert bar_state("Validation DataLoader 0: 100%|█| 2/2 [00:00<00:00, 544.15it/s]") is None


def test_a_bar_named_epoch_k_of_n_counts_from_1_and_a_slow_one_is_read_in_seconds_per_step():
    epoch, total, record = bar_state(
        "Epoch 2/10: 100%|██████████| 391/391 [01:10<00:00,  1.80s/it, loss=0.512, acc=0.81]")
    assert (epoch, total) == (2, 10)
    assert record["seconds"] == pytest.approx(391 * 1.80)
    assert (record["loss"], record["accuracy"], record["steps"]) == (0.512, 0.81, 391)


def test_the_postfix_prefers_a_plain_name_then_the_epochs_mean_then_the_last_step():
    assert metrics("train_loss_step=2.3, train_loss_epoch=2.1, v_num=0") == {"loss": 2.1}
    assert metrics("loss=1.5, train_loss_epoch=2.1, val_acc=0.5") == {
        "loss": 1.5, "val_accuracy": 0.5}
    assert metrics("train_loss_step=nan?, note=x") == {}


def test_bars_of_two_trainings_in_one_output_are_two_runs():
    bar = ("Epoch {e}: 100%|██████████| 4/4 [00:01<00:00,  2.00it/s, train_loss={loss}]"
           "\rEpoch {n}:   0%|          | 0/4 [00:00<?, ?it/s]\n")
    text = (bar.format(e=0, n=1, loss=2.0) + bar.format(e=1, n=1, loss=1.0)
            + bar.format(e=0, n=1, loss=2.5))
    runs = parse_runs(text, "two.out")
    assert [[(r["epoch"], r["loss"]) for r in run.rows()] for run in runs] == [
        [(1, 2.0), (2, 1.0)], [(1, 2.5)]]
    assert runs[0].rows()[0]["seconds"] == pytest.approx(2.0)


def test_a_trainers_logged_dicts_are_its_epochs_timed_by_its_train_runtime():
    """tests/data/hf-trainer/README.md: per epoch a dict of the loss and one of the
    evaluation (`'epoch': '1'`), and the closing train_runtime and samples/s, the only
    time the Trainer prints: the runtime shared over the 2 epochs, the samples/s the run's
    logged throughput. Before, the dicts were not read and the run had no epoch."""
    path = ROOT / "tests" / "data" / "hf-trainer" / "trainer.out"
    text = path.read_text(encoding="utf-8")
    [run] = parse_file_runs(str(path))
    losses = [float(v) for v in re.findall(r"\{'loss': '([\d.]+)'", text)]
    evals = [float(v) for v in re.findall(r"\{'eval_loss': '([\d.]+)'", text)]
    seconds = float(re.search(r"'train_runtime': '([\d.]+)'", text)[1])
    rows = run.rows()
    assert [r["epoch"] for r in rows] == [1, 2]
    assert [r["loss"] for r in rows] == losses and [r["val_loss"] for r in rows] == evals
    assert [r["seconds"] for r in rows] == pytest.approx([seconds / 2] * 2)
    assert run.rate == 1182.0 and run.settings == {"epochs": 2}
    assert {k: run.facts[k] for k in ("train_seconds", "train_loss", "log_format")} == {
        "train_seconds": seconds, "train_loss": 2.302, "log_format": "hf-trainer"}
    assert run.facts["epoch_time_from"] == (
        f"the Trainer's train_runtime ({seconds:g} s, line 13) shared over its 2 epochs")


def test_a_trainer_that_logs_every_few_steps_gives_each_epoch_its_last_loss():
    [run] = parse_runs("{'loss': 2.5, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
                       "{'loss': 2.25, 'learning_rate': 1e-05, 'epoch': 1.0}\n"
                       "{'loss': 2.0, 'learning_rate': 1e-05, 'epoch': 1.5}\n"
                       "{'eval_loss': 1.9, 'eval_accuracy': 0.4, 'epoch': 2.0}\n"
                       "{'train_runtime': 10.0, 'train_samples_per_second': 80.0, "
                       "'epoch': 2.0}\n", "steps.out")
    assert [(r["epoch"], r["loss"], r["seconds"]) for r in run.rows()] == [
        (1, 2.25, 5.0), (2, 2.0, 5.0)]
    assert (run.rows()[1]["val_loss"], run.rows()[1]["val_accuracy"]) == (1.9, 0.4)


def test_a_trainer_that_prints_only_its_total_is_one_run_of_that_throughput():
    """transformers 4 printed the numbers as numbers; without logged epochs the summary
    is one run of its throughput, as a benchmark's total is."""
    [run] = parse_runs("{'train_runtime': 12.5, 'train_samples_per_second': 80.0, "
                       "'epoch': 3.0}\n", "old.out")
    assert (run.rate, run.facts["train_seconds"], run.settings) == (
        80.0, 12.5, {"epochs": 3})
    assert not run.epochs and "train_seconds_resolution" not in run.facts


def test_a_line_another_process_prints_into_a_bar_leaves_its_epochs_as_they_were():
    """Another process's line (unprefixed, as srun without --label leaves it) lands in the
    middle of rank 0's bar, which has no newline until the epoch ends."""
    raw = (DATA / "lightning_ddp.out").read_bytes()
    final = raw.index(b"62.09it/s")  # inside epoch 0's last state
    spliced = raw.index(b"| 4/8 ")   # inside a state at 50 %
    end = raw.index(b"]", final) + 1
    text = (raw[:spliced] + b"SLURM_PROCID=1 ready\n" + raw[spliced:end]
            + b"SLURM_PROCID=1 epoch 0 done\n" + raw[end:]).decode()
    [run] = parse_runs(text, "spliced.out")
    [before] = parse_file_runs(str(DATA / "lightning_ddp.out"))
    assert run.rows() == before.rows() and run.warnings == []


def test_lightnings_rich_bar_in_a_file_is_its_last_epoch_read_alone_with_a_warning():
    """tests/data/pytorch/README.md: where rich is installed and the output is a file,
    Lightning prints only the last epoch's bar (`Epoch 1/1`, counted from 0: the second
    of 2), its metrics wrapped over the lines below, each behind torchrun's `[rank0]:`
    (a line `[rank0]:   2.351 val_loss:` went to no rank's stream before: its colon and
    space read as srun's label). That epoch is read, its time 8 steps over the rate, and
    a warning says no epoch before it is in the file. It was refused before."""
    [run] = parse_file_runs(str(DATA / "torchrun_rich.out"))
    [row] = run.rows()
    assert (row["epoch"], run.epochs_total, row["steps"]) == (2, 2, 8)
    assert row["seconds"] == pytest.approx(8 / 214.54)
    assert (row["loss"], row["val_loss"], row["val_accuracy"]) == (2.318, 2.302, 0.125)
    assert run.settings["gpus"] == 2 and run.streams == 1
    [warning] = run.warnings
    assert "Rich progress bar leaves only its last state in a file: epoch 2 of 2" in warning


LIGHTNING_SLURM = ROOT / "tests" / "data" / "lightning-slurm"


def finished_states(path, epoch: int) -> list[str]:
    """The file's `Epoch k: 100%` states of one epoch, in order, read with a split of its
    own (carriage returns and newlines), not the parser's."""
    text = path.read_text(encoding="utf-8")
    return [s for s in re.split(r"[\r\n]", text) if s.startswith(f"Epoch {epoch}: 100%")]


@pytest.mark.parametrize("name, epochs, steps", [
    ("lit1-1.out", 6, 132),   # validation each epoch, its bars drawn below the epoch's
    ("lit1-2.out", 10, 128),  # a callback's print after each epoch's state, on its line
    ("lit1-3.out", 10, 128),  # no print at all: the whole training on one 318 KB line
])
def test_a_lightning_1x_slurm_job_reads_each_epoch_from_its_last_finished_state(
        name, epochs, steps):
    """tests/data/lightning-slurm/README.md: Lightning 1.9.5 under sbatch, two nodes, one
    task each. Each epoch's time is its steps over the rate of its last 100% state (read
    here from the file by a split of its own); the GPU count is the job's (Starting with 2
    processes, and MEMBER: 2/2 agrees). lit1-3.out was read as its last epoch alone: a
    line that long was compacted to its first and last states."""
    path = LIGHTNING_SLURM / name
    [run] = parse_file_runs(str(path))
    rows = run.rows()
    assert [r["epoch"] for r in rows] == list(range(1, epochs + 1))
    rates = [float(re.search(r"(\d+\.\d+)it/s", finished_states(path, e)[-1])[1])
             for e in range(epochs)]
    assert [r["seconds"] for r in rows] == pytest.approx([steps / rate for rate in rates])
    assert all(r["steps"] == steps and r["loss"] is not None for r in rows)
    assert "v_num" not in rows[0]
    assert run.settings["gpus"] == 2 and run.warnings == [] and not run.cut


def test_a_lightning_epoch_keeps_each_metric_from_its_earlier_finished_states():
    """Lightning 1.x ends an epoch with several 100% states (lit1-2.out: the first without
    train_loss_epoch, the last with it); an epoch's last finished state gives its time,
    each metric its last value in any of its states, and a state a print cut short (no
    closing bracket) is still a state."""
    states = finished_states(LIGHTNING_SLURM / "lit1-2.out", 0)
    assert "train_loss_epoch" not in states[0] and "train_loss_epoch" in states[-1]
    [run] = parse_runs(
        "Epoch 0: 100%|██████████| 132/132 [00:00<00:00, 159.60it/s, loss=2.3, v_num=0, "
        "val_loss=2.300, val_acc=0.113]\r"
        "Epoch 0: 100%|██████████| 132/132 [00:00<00:00, 158.10it/s, loss=2.25, v_nu\n")
    [row] = run.rows()
    assert (row["loss"], row["val_loss"], row["val_accuracy"]) == (2.25, 2.3, 0.113)
    assert row["seconds"] == pytest.approx(132 / 158.10)
    # a first state without a loss leaves none unknown once a later one gives it
    [run] = parse_runs("Epoch 0: 100%|██████████| 8/8 [00:00<00:00, 80.00it/s, v_num=0]\r"
                       "Epoch 0: 100%|██████████| 8/8 [00:00<00:00, 79.00it/s, loss=2.3]\n")
    [row] = run.rows()
    assert row["loss"] == 2.3 and "loss_unknown" not in row


EXAMPLES = ROOT / "tests" / "data" / "pytorch-examples"


@pytest.mark.parametrize("name", ["ddp_1rank.out", "ddp_2ranks.out"])
def test_pytorch_examples_output_is_epochs_timed_by_the_runs_total(name):
    """tests/data/pytorch-examples/README.md: `Train Epoch:` lines, a `Test set:` line a
    epoch, `Total time: 1.65s`, then the model's repr. Each `Test set:` line ends its
    epoch (its accuracy the epoch's validation), the last training loss is the epoch's,
    and the total time, shared over the 3 epochs, is each one's, the run saying so."""
    path = EXAMPLES / name
    text = path.read_text()
    [run] = parse_file_runs(str(path))
    rows = run.rows()
    tests = re.findall(r"Test set: Average loss: ([\d.]+), Accuracy: (\d+)/512", text)
    losses = [re.findall(r"Loss: ([\d.]+)", block)[-1]
              for block in text.split("Test set:")[:-1]]
    seconds = float(re.search(r"Total time: ([\d.]+)s", text)[1])
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert [r["val_accuracy"] for r in rows] == [int(k) / 512 for _, k in tests]
    assert [r["val_loss"] for r in rows] == [float(v) for v, _ in tests]
    assert [r["loss"] for r in rows] == [float(v) for v in losses]
    assert [r["seconds"] for r in rows] == pytest.approx([seconds / 3] * 3)
    assert run.facts["epoch_time_from"].startswith(f"the run's total time ({seconds:g} s, line")
    assert {r["samples"] for r in rows} == {2048} and run.warnings == []


def test_a_total_time_line_leaves_epochs_that_have_times_alone():
    [run] = parse_runs("Epoch 1/1\n8/8 - 2s - loss: 2.0 - accuracy: 0.2\nTotal time: 9.5s\n")
    assert run.rows()[0]["seconds"] == 2.0 and "epoch_time_from" not in run.facts


@pytest.mark.parametrize("line, seconds", [
    ("Total time: 1.65s", 1.65),
    ("elapsed time: 95.2sec", 95.2),
    ("Training time 0:05:12", 312.0),   # timm's and DeiT's `str(timedelta)`
    ("Total training time: 2.5 min", 150.0),
    ("total time = 12 seconds", 12.0),
])
def test_a_runs_total_time_line_of_each_common_form_times_its_epochs(line, seconds):
    [run] = parse_runs("Train Epoch: 1 [0/64 (0%)]\tLoss: 2.3\n"
                       "Train Epoch: 2 [0/64 (0%)]\tLoss: 2.1\n" + line + "\n")
    assert [r["seconds"] for r in run.rows()] == pytest.approx([seconds / 2] * 2)
    assert run.facts["epoch_time_from"].startswith(f"the run's total time ({seconds:g} s, line 3)")
