"""The profiled window's callback (dlscale.train.profwindow.make_callback) never makes a step
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
from dlscale.train import keraschoice, profwindow, stepsplit
keraschoice.use_keras(3, "jax")
import keras, numpy as np
out = Path(sys.argv[2])
window = profwindow.make_callback(out, 2, 3, marks=True)
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

TF_KERAS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from dlscale.train import keraschoice, profwindow
keraschoice.use_keras(2)
keras = keraschoice.keras()
window = profwindow.make_callback(__import__("pathlib").Path(sys.argv[2]), 2, 3, marks=False)
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
