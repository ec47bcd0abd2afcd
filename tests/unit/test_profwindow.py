"""The profiled window's callback (dlscale.measure.profwindow.make_callback) never makes a step
wait outside the window: with a step-end hook in the list, Keras 3 on JAX reads every
step's logs back to the host (a wait for the device per step; on an H200 the GPU check ran
19 to 24 % below its earlier run without the window), and tf-keras converts every step's
logs to numbers unless each step hook takes tensors. Each case runs in a process of its own,
since the Keras in use is chosen once per process."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import SCRIPTS

KERAS3_JAX = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from dlscale.measure import profwindow, stepsplit
from dlscale.train import keraschoice
keraschoice.use_keras(3, "jax")
import keras, numpy as np
out = Path(sys.argv[2])
window = profwindow.make_callback(keraschoice.keras(), out, 2, 3, marks=True, on_jax=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
hooks = keras.callbacks.CallbackList([window], model=model)
x = np.zeros((64, 4), "float32"); y = np.zeros((64,), "int64")
model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[window])
trace = sorted(out.glob("plugins/profile/*/*.xplane.pb"))[-1]
steps = stepsplit.split(profwindow.read_trace(trace, on_jax=True))
print(json.dumps({"async_train": hooks._async_train, "taken": window.taken,
                  "error": window.error, "steps": [s["step"] for s in steps],
                  "walls": [s["wall_s"] for s in steps]}))
"""

# a step long enough (two 2048-wide layers at batch 512) that its result is not ready when
# the host reaches the next step, JAX dispatching asynchronously on CPUs as on GPUs
KERAS3_JAX_WAITS = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from dlscale.measure import profwindow
from dlscale.train import keraschoice
keraschoice.use_keras(3, "jax")
import keras, numpy as np
window = profwindow.make_callback(keraschoice.keras(), Path(sys.argv[2]), 2, 3, marks=True,
                                 on_jax=True)
ready = {}
class Probe(keras.callbacks.Callback):  # after the window: is the step before finished?
    def on_train_batch_begin(self, batch, logs=None):
        state = getattr(self.model, "_jax_state", None)
        if state:
            ready[batch] = all(a.is_ready() for arrays in state.values() for a in arrays)
model = keras.Sequential([keras.Input((1024,)), keras.layers.Dense(2048, activation="relu"),
                          keras.layers.Dense(2048, activation="relu"), keras.layers.Dense(10)])
model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
x = np.zeros((512 * 7, 1024), "float32"); y = np.zeros((512 * 7,), "int64")
model.fit(x, y, batch_size=512, epochs=1, verbose=0, callbacks=[window, Probe()])
print(json.dumps({"ready": ready, "taken": window.taken, "error": window.error}))
"""

TF_KERAS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from dlscale.measure import profwindow
from dlscale.train import keraschoice
keraschoice.use_keras(2)
keras = keraschoice.keras()
window = profwindow.make_callback(keras, __import__("pathlib").Path(sys.argv[2]), 2, 3,
                                 marks=False, on_jax=False)
hooks = keras.callbacks.CallbackList([window])
print(json.dumps({"calls_step_hooks": hooks._should_call_train_batch_hooks,
                  "tensors": hooks._batch_hooks_support_tf_logs}))
"""


def run(code: str, tmp_path) -> dict:
    done = subprocess.run([sys.executable, "-c", code, str(SCRIPTS), str(tmp_path / "trace")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_on_jax_the_window_leaves_keras_dispatching_steps_without_waiting(tmp_path):
    seen = run(KERAS3_JAX, tmp_path)
    assert seen["async_train"], "a step-end hook: Keras 3 waits for every step's logs"
    # and the window still traces its three steps, each marked and timed
    assert (seen["taken"], seen["error"], seen["steps"]) == (True, None, [2, 3, 4])
    assert all(wall > 0 for wall in seen["walls"])


def test_under_tf_keras_the_window_takes_step_logs_as_tensors(tmp_path):
    seen = run(TF_KERAS, tmp_path)
    assert seen == {"calls_step_hooks": True, "tensors": True}


def test_on_jax_each_traced_step_ends_when_its_work_is_done(tmp_path):
    """The window waits for each traced step's result before it closes the step's marker
    (the step before the window's first one too): Keras holds the state in its tracking
    containers, which `jax.block_until_ready` took for one leaf and did not wait on, so on
    an H200 SimpleCNN's marked steps were 1.9 ms of dispatch where the GPU took 7.4 ms."""
    seen = run(KERAS3_JAX_WAITS, tmp_path)
    assert (seen["taken"], seen["error"]) == (True, None)
    # steps 2, 3 and 4 are traced: at the begin of 2 to 5 the step before has finished
    assert {b: seen["ready"][str(b)] for b in (2, 3, 4, 5)} == {2: True, 3: True, 4: True,
                                                               5: True}


def test_the_all_reduce_is_timed_as_nccl_tests_times_it(monkeypatch):
    """Per buffer size: a group of BENCH_ITERS awaited first (compiling, warm-up: the
    graph the timed groups run), then groups of BENCH_ITERS issued back to back and
    awaited once, each group's time per call, the median kept. Before, each timing was
    one call from Python with every replica's result copied to the host, and the warm-up
    was not awaited."""
    from dlscale.measure import allreduce as window

    calls, clock = [], [0.0]
    per_call = iter([9e-3, 3e-3, 1e-3, 2e-3, 9e-3, 1e-3, 1e-3, 5e-3])  # warm-up first

    def prepare(n):
        def go(iters):
            calls.append((n, iters))
            clock[0] += iters * next(per_call)
        return go

    monkeypatch.setattr(window, "allreduce_runner", lambda backend: prepare)
    monkeypatch.setattr(window.time, "perf_counter", lambda: clock[0])
    seconds = window.time_allreduce(object(), [4096, 8192])
    group = [window.BENCH_ITERS] * (1 + window.BENCH_REPEATS)
    assert calls == [(1024, i) for i in group] + [(2048, i) for i in group]
    assert seconds == [0.002, 0.001]  # the median group, per call; the warm-up not counted


def test_the_gpu_checks_window_is_read_into_an_output_folder_with_a_dot(tmp_path):
    """bench/gpu_check.py --out out.v1/gpu.json without --keep-trace took the folder's
    "suffix" (.v1) for a file to keep the trace in: IsADirectoryError (issue 78, 19). The
    H200 SimpleCNN window stored in tests/data/traces stands for a check's own."""
    import importlib.util
    import shutil
    from types import SimpleNamespace

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    logdir = tmp_path / "out.v1" / "trace-SimpleCNN-float32"
    profile = logdir / "plugins" / "profile" / "1"
    profile.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "data" / "traces" / "keras3-jax-simplecnn-h200.xplane.pb",
                profile / "h200.xplane.pb")
    out = check.split_window(logdir, SimpleNamespace(seconds=0.5, error=None), None)
    assert out["summary"]["steps"] > 0 and not logdir.exists()
    assert [p.name for p in (tmp_path / "out.v1").iterdir()] == []  # nothing kept
