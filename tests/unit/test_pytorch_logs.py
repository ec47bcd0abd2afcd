"""The PyTorch world's logs on real captures: tqdm's epoch bars (dlscale.logparse.formats.tqdm)
as Lightning draws them (tests/data/pytorch), and a Trainer's closing total (hf-trainer)."""

from __future__ import annotations

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


def test_a_trainer_that_prints_only_its_total_is_one_run_of_that_throughput():
    """tests/data/hf-trainer/README.md: Hugging Face's Trainer prints no epoch's time,
    only its closing train_runtime and train_samples_per_second."""
    [run] = parse_file_runs(str(ROOT / "tests" / "data" / "hf-trainer" / "trainer.out"))
    assert run.images_per_s == 1182.0 and not run.epochs
    assert run.facts == {"train_seconds": 0.4332, "train_loss": 2.302,
                         "log_format": "hf-trainer"}
    assert run.settings == {"epochs": 2}
    # transformers 4 printed the numbers as numbers
    [run] = parse_runs("{'train_runtime': 12.5, 'train_samples_per_second': 80.0, "
                       "'epoch': 3.0}\n", "old.out")
    assert (run.images_per_s, run.facts["train_seconds"], run.settings) == (
        80.0, 12.5, {"epochs": 3})


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


def test_lightnings_rich_bar_in_a_file_holds_no_epoch_but_the_last_and_is_refused():
    """tests/data/pytorch/README.md: where rich is installed and the output is a file,
    Lightning prints only the last epoch's bar, wrapped: not read, said in one line."""
    from dlscale.logparse.reader import LogError

    with pytest.raises(LogError, match="torchrun_rich.out: no finished epoch found .*"
                                       "max_epochs=2. reached"):
        parse_file_runs(str(DATA / "torchrun_rich.out"))
