"""The window of a torch point (analysis.breakdown): `torch.profiler` over the steps the
other backends' windows trace, each step marked `ProfilerStep#N` (the name torch's own
`profiler.step()` gives its steps) and waited for, its batch's fetch marked as tf.data's
is (`IteratorGetNext`), the trace written as Chrome's JSON and read back into
`stepsplit.Event`s: aten's operations on the host and a GPU's kernels compute, c10d's
collectives (`gloo:all_reduce`, `nccl:all_reduce`, NCCL's kernels) communication, the
batch's copy to a GPU input. DDP launches a bucket's all-reduce during the backward pass;
c10d ends its event when the work is done, so the part under the backward's operations is
hidden communication, the rest exposed, by stepsplit's rules.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from dlscale.core.files import write_json_atomic
from dlscale.measure import stepsplit

TRACE_FILE = "torch.trace.json"
INPUT_MARK = "IteratorGetNext"  # around the loop's fetch of a batch (stepsplit.INPUT)
STEP = re.compile(r"^ProfilerStep#(\d+)$")


def make_callback(keras, logdir: Path, first: int, count: int, window_file: Path):
    """A Keras callback the torch loop drives: traces steps [first, first + count) of the
    first epoch into logdir/TRACE_FILE; `seconds` is what starting and stopping took."""
    import torch

    class TorchWindow(keras.callbacks.Callback):
        seconds = 0.0
        taken = False
        error: str | None = None

        def __init__(self):
            super().__init__()
            self._epoch, self._profile, self._marker = 0, None, None
            self.wall: dict[int, int] = {}

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch

        def on_train_batch_begin(self, batch, logs=None):
            if self._epoch or self.taken or not count:
                return
            if batch == first and self._profile is None:
                self._toggle(True)
            if self._profile is None:
                return
            if batch == first + count:
                self._toggle(False)
                return
            self.wall[batch] = time.time_ns()
            self._marker = torch.profiler.record_function(f"ProfilerStep#{batch}")
            self._marker.__enter__()

        def on_train_batch_end(self, batch, logs=None):
            if self._marker is not None:  # the step's work done before its marker ends
                if torch.cuda.is_available() and torch.cuda.is_initialized():
                    torch.cuda.synchronize()
                self._marker.__exit__(None, None, None)
                self._marker = None

        def on_epoch_end(self, epoch, logs=None):
            if self._profile is not None:
                self._toggle(False)

        on_train_end = on_epoch_end

        def _toggle(self, start: bool):
            t0 = time.perf_counter()
            try:
                if start:
                    activities = [torch.profiler.ProfilerActivity.CPU]
                    if torch.cuda.is_available() and torch.cuda.is_initialized():
                        activities.append(torch.profiler.ProfilerActivity.CUDA)
                    self._profile = torch.profiler.profile(activities=activities)
                    self._profile.__enter__()
                else:
                    profile, self._profile = self._profile, None
                    profile.__exit__(None, None, None)
                    logdir.mkdir(parents=True, exist_ok=True)
                    profile.export_chrome_trace(str(logdir / TRACE_FILE))
                    self.taken = True
            except Exception as exc:  # noqa: BLE001 - a window is never a failed point
                self.error = f"the profiler did not {'start' if start else 'stop'}: {exc}"
                self._profile = None
            self.seconds += time.perf_counter() - t0
            if not start:  # kept beside the trace: a resumed attempt reads it from there
                write_json_atomic(window_file, {
                    "seconds": self.seconds, "error": self.error,
                    "wall": {str(k): v for k, v in self.wall.items()}})

    return TorchWindow()


def read_trace(path: Path) -> list[stepsplit.Event]:
    """A torch.profiler Chrome trace's complete events as stepsplit's: the step markers,
    each on a line named for its category (`torch cpu_op|pid:tid`, `torch kernel|...`),
    times in nanoseconds."""
    out = []
    for e in json.loads(path.read_bytes()).get("traceEvents", []):
        if e.get("ph") != "X" or "ts" not in e:
            continue
        start = round(float(e["ts"]) * 1000)
        end = start + round(float(e.get("dur", 0)) * 1000)
        name = str(e.get("name", ""))
        if step := STEP.match(name):
            out.append(stepsplit.Event("torch steps", stepsplit.STEP_MARKER, start, end,
                                       int(step[1])))
            continue
        line = f"torch {e.get('cat', '')}|{e.get('pid', '')}:{e.get('tid', '')}"
        out.append(stepsplit.Event(line, name, start, end))
    return out
