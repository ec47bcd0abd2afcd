"""The run plan (a pure function) and the backend and optimizer factories."""

from __future__ import annotations

import argparse

import pytest

from dlscale.train.strategies import BACKENDS, make_backend
from dlscale.train.training import RunError, make_optimizer, plan_run

PLAN = dict(batch_per_gpu=256, replicas=4, train_images=50000, steps_per_epoch=None,
            base_lr=0.01, lr_scaling="linear", warmup_epochs=0, xla=False, device="gpu",
            devices_in_process=4)


def test_the_studys_plan_on_four_gpus():
    plan = plan_run(**PLAN)
    assert (plan.global_batch, plan.steps, plan.lr, plan.warmup_steps) == (1024, 48, 0.04, 0)


@pytest.mark.parametrize("changes, expected", [
    ({"lr_scaling": "none"}, {"lr": 0.01}),
    ({"warmup_epochs": 2.5}, {"warmup_steps": 120}),
    ({"steps_per_epoch": 10}, {"steps": 10}),
    ({"xla": True}, {"xla": True, "xla_note": None}),  # GPUs: XLA as asked
    ({"xla": True, "device": "cpu"}, {"xla": False}),  # several logical CPUs: off, noted
    ({"xla": True, "device": "cpu", "devices_in_process": 1}, {"xla": True}),
])
def test_plan_choices(changes, expected):
    plan = plan_run(**{**PLAN, **changes})
    assert {k: getattr(plan, k) for k in expected} == expected
    if changes.get("device") == "cpu" and not plan.xla:
        assert "several logical CPU devices" in plan.xla_note


def test_a_global_batch_beyond_the_images_is_refused():
    with pytest.raises(RunError, match=r"global batch 1024 \(256 x 4\) is larger than the 1000"):
        plan_run(**{**PLAN, "train_images": 1000})


def test_an_unknown_strategy_lists_the_backends():
    with pytest.raises(RunError, match="unknown strategy 'ring': expected one of "
                                       + ", ".join(BACKENDS)):
        make_backend("ring", argparse.Namespace(gpus=1))


def test_optimizers():
    assert type(make_optimizer("sgd", 0.1, 0.9)).__name__ == "SGD"
    assert type(make_optimizer("adam", 0.001)).__name__ == "Adam"
    with pytest.raises(RunError, match="unknown optimizer 'rmsprop': expected sgd or adam"):
        make_optimizer("rmsprop", 0.1)


def test_communication_choice_and_nccl_on_cpus_refused_at_planning():
    import copy

    from dlscale.core.schema import validate
    from dlscale.plan.sweep import SweepError, plan_sweep
    from dlscale.train.training import resolve_communication

    assert [resolve_communication(c, d) for c, d in (("auto", "gpu"), ("auto", "cpu"),
                                                     ("ring", "gpu"), ("nccl", "gpu"))] == [
        "nccl", "ring", "ring", "nccl"]
    config = copy.deepcopy({"sweep": {"models": ["SimpleCNN"], "gpus": [2], "nodes": [2]},
                            "training": {"communication": "nccl", "device": "cpu"}})
    validate(config)
    with pytest.raises(SweepError, match="training.communication nccl needs GPUs, but "
                                         "training.device is cpu"):
        plan_sweep(config)


def test_the_custom_loop_with_horovod_is_refused_at_planning():
    import copy

    from dlscale.core.schema import validate
    from dlscale.plan.sweep import SweepError, plan_sweep

    config = copy.deepcopy({"sweep": {"models": ["SimpleCNN"], "gpus": [2],
                                      "strategy": ["horovod"], "loop": ["fit", "custom"]}})
    validate(config)
    with pytest.raises(SweepError, match="the custom training loop runs mirrored and "
                                         "multiworker points; horovod points train with fit"):
        plan_sweep(config)


def build_keras2_point(tmp_path, *flags: str, train_images: int):
    """train.py's model, recorder and callbacks (driver.build) for a Keras 2 MLP point on
    one logical CPU device, 8x8 images, batch 8, in this process."""
    import time

    from dlscale.train import driver
    from dlscale.train.settings import parse

    settings = parse(["--data-dir", str(tmp_path), "--out", str(tmp_path / "out"),
                      "--model", "MLP", "--device", "cpu", "--gpus", "1", *flags])
    backend = make_backend("mirrored", settings)
    backend.setup()
    plan = plan_run(**{**PLAN, "replicas": 1, "device": "cpu", "devices_in_process": 1,
                       "batch_per_gpu": 8, "train_images": train_images})
    run = driver.Run(settings, backend, plan, {"image_shape": [8, 8, 3], "num_classes": 10},
                     "float32", tmp_path / "state")
    return driver.build(run, deadline=time.time() + 3600)


def test_trains_fit_calls_no_callback_between_steps(tmp_path):
    """train.py's callbacks for fit have no step hooks, so Keras runs an epoch's steps
    without calling into Python between them; NaN is caught by the epoch recorder. Keras'
    TerminateOnNaN read the loss after every step, and with it in the list Keras called
    every callback's step hooks (about 1 ms per step: docs/benchmarks.md, "Training overhead")."""
    from dlscale.train.keraschoice import keras

    model, recorder, callbacks = build_keras2_point(tmp_path, train_images=64)
    assert recorder in callbacks and len(callbacks) >= 3  # recorder, backup, deadline stop
    hooks = keras().callbacks.CallbackList(callbacks, model=model)
    assert not hooks._should_call_train_batch_hooks  # Keras' own test of "any step hook"


@pytest.mark.parametrize(("flags", "env", "expected"), [
    ([], {}, "mirrored"),
    ([], {"SLURM_NTASKS": "2"}, "multiworker"),
    ([], {"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "4"}, "mirrored"),
    ([], {"TF_CONFIG": '{"cluster": {"worker": ["a:1"]}}'}, "multiworker"),
    (["--nodes", "2"], {}, "multiworker"),
    (["--keras", "3", "--backend", "jax"], {"SLURM_NTASKS": "2"}, "dataparallel"),
    (["--strategy", "horovod"], {}, "horovod"),
    (["--keras", "3", "--backend", "torch"], {}, "ddp"),
    (["--keras", "3", "--backend", "torch", "--nodes", "2"], {"SLURM_NTASKS": "2"}, "ddp")])
def test_train_py_without_strategy_takes_the_sweeps_default(tmp_path, monkeypatch, flags,
                                                             env, expected):
    """One decision (keraschoice.default_strategy) at planning and in a train.py run by hand,
    from the workers SLURM or TF_CONFIG gives it."""
    from dlscale.train.driver import resolve_strategy
    from dlscale.train.settings import parse

    for name in ("SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "TF_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = parse(["--data-dir", str(tmp_path), "--out", str(tmp_path / "out"),
                      "--model", "MLP", *flags])
    assert resolve_strategy(settings) == expected


KERAS3_CALLBACKS = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from dlscale.train import keraschoice
keraschoice.use_keras(3, sys.argv[3])
from dlscale.measure import profwindow
from dlscale.train import driver
from dlscale.train.strategies import make_backend
from dlscale.train.settings import parse
from dlscale.train.training import plan_run
tmp = Path(sys.argv[2])
settings = parse(["--data-dir", str(tmp), "--out", str(tmp / "out"), "--model", "MLP",
                  "--device", "cpu", "--gpus", "1", "--keras", "3", "--backend", sys.argv[3]])
backend = make_backend(sys.argv[4], settings)
backend.setup()
plan = plan_run(**json.loads(sys.argv[5]))
run = driver.Run(settings, backend, plan, {"image_shape": [8, 8, 3], "num_classes": 10},
                 "float32", tmp / "state")
window = profwindow.make_callback(keraschoice.keras(), tmp / "trace", 2, 3, marks=True,
                                 on_jax=keraschoice.trains_on_jax())
model, recorder, callbacks = driver.build(run, deadline=time.time() + 3600, window=window)
hooks = keraschoice.keras().callbacks.CallbackList(callbacks, model=model)
print(json.dumps({"callbacks": [type(c).__name__ for c in callbacks],
                  "async_train": hooks._async_train}))
"""


def test_on_jax_a_points_callbacks_leave_steps_dispatched_without_waiting(tmp_path):
    """Keras 3 waits for every step's logs when a callback in the list has a step-end hook
    not marked async_safe; Keras' own BackupAndRestore has one (a no-op when it saves at
    epochs), and with it an H200 trained ResNet50V2 at 22.8 ms a step against 15 ms.
    (On TensorFlow, Keras 3 dispatches no callback asynchronously: its backend is not
    thread-safe.)"""
    import json
    import subprocess
    import sys

    from conftest import SCRIPTS

    plan = {**PLAN, "replicas": 1, "device": "cpu", "devices_in_process": 1,
            "batch_per_gpu": 8, "train_images": 64}
    done = subprocess.run([sys.executable, "-c", KERAS3_CALLBACKS, str(SCRIPTS), str(tmp_path),
                           "jax", "dataparallel", json.dumps(plan)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # what a point has
    assert {"EpochLine", "Backup", "Window", "DeadlineStop"} <= set(seen["callbacks"])
    assert seen["async_train"], seen["callbacks"]


def test_mixed_auto_on_a_cpu_is_bfloat16_only_with_its_instructions():
    """Without AVX-512 BF16, AMX or Arm's BF16, bfloat16 is emulated on a CPU, slower than
    float32: mixed_auto takes float32 there (this VM's /proc/cpuinfo: AVX2 only)."""
    from conftest import ROOT

    from dlscale.train.telemetry import cpu_flags
    from dlscale.train.training import resolve_precision

    flags = cpu_flags((ROOT / "tests/data/cpuinfo/amd-epyc-avx2.txt").read_text())
    assert {"avx2", "fma"} <= flags and not flags & {"avx512_bf16", "amx_bf16"}
    assert resolve_precision("mixed_auto", "cpu", flags) == "float32"
    for native in ({"avx512_bf16"}, {"amx_bf16"}, {"bf16"}):
        assert resolve_precision("mixed_auto", "cpu", flags | native) == "mixed_bfloat16"
    assert cpu_flags("processor\t: 0\nFeatures\t: fp asimd bf16\n") == {"fp", "asimd", "bf16"}
    assert cpu_flags("processor\t: 0\n") == frozenset()
    assert resolve_precision("mixed_bfloat16", "cpu", flags) == "mixed_bfloat16"  # as asked


def test_a_keras2_point_traces_its_training_step_once(tmp_path):
    """tf-keras creates the optimizer's and the metrics' variables in the first training
    step, and a tf.function that creates variables on its first call is traced twice
    (once creating them, once without). train.py creates them after compile, so the step
    is traced once: MobileNetV2 on 4 logical CPU devices took 38 to 40 s in its first epoch
    before, 22 to 27 s after (docs/benchmarks.md, "Training overhead")."""
    import numpy as np
    import tensorflow as tf

    model, _, _ = build_keras2_point(tmp_path, "--optimizer", "sgd", "--momentum", "0.9",
                                     train_images=16)
    images = np.random.default_rng(0).integers(0, 256, (16, 8, 8, 3), dtype=np.uint8)
    labels = np.arange(16, dtype=np.int64) % 10
    history = model.fit(tf.data.Dataset.from_tensor_slices((images, labels)).batch(8),
                        epochs=2, verbose=0)
    assert len(history.history["accuracy"]) == 2  # the compiled metric still counts
    assert model.train_function.experimental_get_tracing_count() == 1
