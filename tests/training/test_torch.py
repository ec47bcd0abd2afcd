"""backend torch (strategy ddp) with the real PyTorch, torchvision and Keras 3 of
.venv-torch: ranks on CPUs (gloo), started by launch.py as a user's local run starts them
(TF_CONFIG). The same points through profiles/local: tests/workflow/test_keras3_workflow.py;
across the test cluster's nodes under srun: tests/cluster/test_slurm.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import SCRIPTS, TORCH_PYTHON, needs_torch
from helpers.records import records

pytestmark = needs_torch

OWN_MODULE = '''
import torch


class TinyNet(torch.nn.Module):
    """PyTorch's order: N x C x H x W in, logits out."""

    def __init__(self, classes):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8, classes)

    def forward(self, x):
        assert x.shape[1] == 3, x.shape
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def build(input_shape, num_classes):
    return TinyNet(num_classes)
'''


def flags(data, out, *more):
    return [str(SCRIPTS / "train.py"), "--data-dir", str(data), "--out", str(out),
            "--device", "cpu", "--batch-per-gpu", "8", "--keras", "3", "--backend", "torch",
            *more]


def one(*args, cwd=None):
    return subprocess.run([str(TORCH_PYTHON), *args], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def ranks(*args):
    """Two ranks as launch.py starts a 2-GPU point outside SLURM (TF_CONFIG)."""
    return subprocess.run([sys.executable, str(SCRIPTS / "launch.py"), "--plan",
                           '{"tasks": 2}', "--", str(TORCH_PYTHON), *args],
                          capture_output=True, text=True, timeout=600)


def seen(folder):
    return [(e["epoch"], round(e["loss"], 5), round(e["accuracy"], 5))
            for e in records(folder / "epochs.jsonl")]


@pytest.fixture(scope="module")
def whole(small_data, tmp_path_factory):
    """SimpleCNN on two ranks, 2 epochs uninterrupted (made once)."""
    out = tmp_path_factory.mktemp("torch-whole")
    done = ranks(*flags(small_data, out, "--model", "SimpleCNN", "--gpus", "2", "--epochs",
                        "2", "--warmup-epochs", "1", "--breakdown-steps", "3",
                        "--synthetic-check-steps", "3"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return out


def test_two_ranks_train_under_ddp_with_the_studys_rules_and_only_rank_0_writes(whole):
    """DistributedDataParallel over gloo: 2 replicas of one process each, global batch 16,
    the rate scaled by the GPUs and reached by the warm-up, epochs recorded once, the test
    split over both ranks' shards, the window traced by torch.profiler, the all-reduce
    timed through torch.distributed."""
    run = json.loads((whole / "run.json").read_text())
    assert (run["status"], run["strategy"], run["backend"], run["replicas"], run["workers"]) \
        == ("completed", "ddp", "torch", 2, 2)
    assert run["distribution"] == "torch.nn.parallel.DistributedDataParallel"
    assert (run["communication"], run["devices"], run["global_batch"]) == ("gloo", ["cpu"], 16)
    assert run["lr"] == pytest.approx(0.02) and run["keras"].startswith("3.")
    assert run["versions"]["torch"].startswith("2.") and run["versions"]["tensorflow"] is None
    assert len(run["cluster"]) == 2 and run["train_input"] == "files"
    epochs = records(whole / "epochs.jsonl")
    assert [e["epoch"] for e in epochs] == [1, 2]  # rank 0's only
    assert epochs[0]["lr"] < 0.02 and epochs[-1]["lr"] == pytest.approx(0.02)  # warm-up
    assert epochs[-1]["loss"] < epochs[0]["loss"]
    assert (whole / "train.log").read_text().count("Epoch 1/2") == 1
    assert 0.0 <= run["test_accuracy"] <= 1.0 and run["test_images"] == 100
    assert run["synthetic_images_per_s"] > 0  # the input-bound check's speed, on both ranks
    # the chief's peak memory: on CPUs its process's resident peak, said so (issue 98 item 3)
    assert 0.1 < run["memory_gib"] < 64
    assert run["memory_from"].startswith("the process's peak resident memory (ru_maxrss")
    assert (run["input_workers"], run["torch_compile"]) == (0, None)
    # the window: torch.profiler over 3 steps, gloo's all-reduce in each as communication
    breakdown = json.loads((whole / "breakdown.json").read_text())
    assert breakdown["communication"] == "separable", breakdown["notes"]
    assert [s["step"] for s in breakdown["steps"]] == [2, 3, 4]
    assert all(s["comm_total_s"] > 0 and s["compute_s"] > 0 for s in breakdown["steps"])
    collective = breakdown["collective"]
    assert collective["bytes"][-1] == breakdown["gradient_bytes"] > 0
    assert all(s > 0 for s in collective["seconds"])


def test_a_torch_point_stopped_after_epoch_1_resumes_and_trains_as_the_uninterrupted_one(
        small_data, whole, tmp_path):
    """Stopped by its time limit after epoch 1 and started again, every rank restores the
    chief's backup (weights, momentum, step count): epoch 2's loss is the uninterrupted
    run's, on CPUs the same number."""
    args = flags(small_data, tmp_path, "--model", "SimpleCNN", "--gpus", "2", "--epochs", "2",
                 "--warmup-epochs", "1", "--breakdown-steps", "3")
    stopped = ranks(*args, "--time-limit-min", "0.1")
    assert stopped.returncode == 7, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    assert (tmp_path / "state" / "backup" / "epochs.json").exists()
    again = ranks(*args)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["status"], run["resumed_at_epoch"]) == ("completed", 2)
    assert seen(tmp_path) == seen(whole)
    assert "resuming from the backup" in (tmp_path / "train.log").read_text()


def test_dataloader_workers_read_a_torch_points_batches_in_the_order_it_trains_without(
        small_data, whole, tmp_path):
    """--num-workers 2 (sweep.knobs num_workers): two DataLoader processes on each rank
    gather the rank's batches in turn, and the point trains as the one without them: the
    same batches in the same order, on CPUs the same losses."""
    done = ranks(*flags(small_data, tmp_path, "--model", "SimpleCNN", "--gpus", "2",
                        "--epochs", "2", "--warmup-epochs", "1", "--breakdown-steps", "3",
                        "--num-workers", "2"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["status"], run["input_workers"], run["num_workers"]) == ("completed", 2, 2)
    assert seen(tmp_path) == seen(whole)


def test_a_compiled_torch_point_trains_through_torch_compile(small_data, tmp_path):
    """--compile (sweep.knobs compile): the step runs through torch.compile (inductor, its
    compilation in the first epoch), and the run records it."""
    done = one(*flags(small_data, tmp_path, "--model", "SimpleCNN", "--epochs", "1",
                      "--steps-per-epoch", "3", "--compile"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    run = json.loads((tmp_path / "run.json").read_text())
    assert (run["status"], run["compile"], run["torch_compile"]) == ("completed", True,
                                                                     "inductor")
    assert records(tmp_path / "epochs.jsonl")[0]["loss"] > 0


@pytest.mark.parametrize("model", ["resnet18", "own"])
def test_torchvisions_model_and_your_torch_module_train_as_keras_models(small_data, tmp_path,
                                                                        model):
    """torchvision's resnet18 by its name, and a torch.nn.Module of your own (file.py:function,
    given N x C x H x W as PyTorch models expect, here under mixed_bfloat16): each a layer
    of the Keras model dlscale feeds, trained and evaluated on one rank."""
    if model == "own":
        (tmp_path / "mynet.py").write_text(OWN_MODULE)
        which = ["--model", "TinyNet", "--model-from", "mynet.py:build", "--precision",
                 "mixed_bfloat16"]  # computed under torch's autocast, its weights float32
    else:
        which = ["--model", "resnet18", "--steps-per-epoch", "5"]
    done = one(*flags(small_data, tmp_path / "out", *which, "--gpus", "1", "--epochs", "1"),
               cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    assert (run["status"], run["strategy"], run["replicas"]) == ("completed", "ddp", 1)
    assert run["precision"] == ("mixed_bfloat16" if model == "own" else "float32")
    assert 0.0 <= run["test_accuracy"] <= 1.0
    assert len(records(tmp_path / "out" / "epochs.jsonl")) == 1


def test_the_kept_gradient_sizes_of_torchvisions_models_are_what_torchvision_builds():
    """models.csv's torchvision rows (gradient_bytes, kept by gradients --write) against
    the installed torchvision's models at 10 classes."""
    code = ("import sys, torchvision; sys.path.insert(0, sys.argv[1])\n"
            "from dlscale.core import models\n"
            "for m in models.table().values():\n"
            "    if m.builder == models.TORCHVISION:\n"
            "        net = getattr(torchvision.models, m.name)(num_classes=10)\n"
            "        got = 4 * sum(p.numel() for p in net.parameters() if p.requires_grad)\n"
            "        print(m.name, got, m.gradient_bytes)\n")
    done = one("-c", code, str(SCRIPTS))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines()]
    assert len(rows) >= 4 and all(got == kept for _, got, kept in rows), rows



def test_profile_steps_on_torch_trace_those_steps_into_the_tensorboard_folder(small_data,
                                                                               tmp_path):
    """training.profile_steps on PyTorch was refused (Keras 3 has no profiler there):
    torch.profiler traces steps 2 and 3 (batches 1 and 2 of the first epoch) into the
    TensorBoard folder as a Chrome trace (Perfetto, HTA)."""
    out = tmp_path / "out"
    done = one(*flags(small_data, out, "--model", "SimpleCNN", "--gpus", "1", "--epochs",
                      "1", "--steps-per-epoch", "4", "--profile-steps", "2,3"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    trace = json.loads((out / "tensorboard" / "torch.trace.json").read_text())
    steps = sorted({e["name"] for e in trace["traceEvents"]
                    if str(e.get("name", "")).startswith("ProfilerStep#")})
    assert steps == ["ProfilerStep#1", "ProfilerStep#2"], steps
    run = json.loads((out / "run.json").read_text())
    assert run["profile_steps"] == [2, 3] and run["tensorboard"] == "tensorboard"
    assert not any("profile_steps" in note for note in run["notes"]), run["notes"]
