"""The profiled window of a point (analysis.breakdown): a few steps of the first epoch,
after its compiling steps, traced with the framework's own profiler (TensorFlow's, JAX's,
torch.profiler through dlscale.measure.torchwindow); then, after the
training, the all-reduce itself timed on the point's devices. Both land in the run
folder's breakdown.json (`contract.BREAKDOWN`), which the analysis turns into
breakdown.csv and prediction.csv (dlscale.reporting.explain). The run opens and closes
the window (dlscale.train.window): it passes in its Keras and whether it trains on JAX,
so nothing here asks which framework the process chose.

Why the first epoch: analysis.skip_epochs leaves it out of every time the study reports,
so the profiler's own cost (starting, stopping, the host tracer) never reaches epoch
times or throughput. Why after the run: converting the trace and timing the collective
happen once training has ended, outside every epoch.

A window that cannot be taken (a profiler already running for training.profile_steps,
no trace written, a trace over MAX_TRACE_BYTES, a reader error) is a note in the record,
never a failed point: `record` says.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from dlscale.core.files import write_json_atomic
from dlscale.measure import hvdtimeline, stepsplit, torchwindow, xprofcheck

WARMUP_STEPS = 2  # the first steps compile (XLA, tf.function): never in the window
MAX_TRACE_BYTES = 512 * 2**20
WINDOW_FILE = "window.json"  # beside the trace: what the window took (kept_window)
METHOD = "own trace (names decide: approximate)"


def window_steps(steps_per_epoch: int, wanted: int) -> tuple[int, int]:
    """(first step, number of steps) of the window in the first epoch: after the
    compiling steps where the epoch has room, else as many as it has."""
    first = min(WARMUP_STEPS, max(steps_per_epoch - 1, 0))
    return first, max(0, min(wanted, steps_per_epoch - first))


def make_callback(keras, logdir: Path, first: int, count: int, marks: bool, on_jax: bool,
                  horovod=None):
    """A Keras callback (of `keras`, on JAX where `on_jax`) that traces steps [first,
    first + count) of the first epoch into logdir, marking each step where the framework
    does not (`marks`: Keras 3 on either backend, the custom loop), and waiting for each
    step's result so that its marker covers its work. `seconds` is what starting and
    stopping the profiler took. With `horovod` (the module), Horovod's timeline is
    recorded beside the trace.

    Outside the window it makes no step wait: on JAX it has no step-end hook (with one,
    Keras 3 reads every step's logs back to the host, a wait for the device per step:
    docs/benchmarks.md, "GPUs"), and under tf-keras it takes the step's logs as tensors
    (`_supports_tf_logs`) and never reads them."""
    class Window(keras.callbacks.Callback):
        seconds = 0.0
        taken = False
        error: str | None = None

        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True  # tf-keras: step logs stay tensors, unread
            self._epoch, self._open, self._marker = 0, False, None
            self.wall: dict[int, int] = {}  # UTC ns at each traced step's begin (Horovod)

        def on_epoch_begin(self, epoch, logs=None):
            self._epoch = epoch
            if epoch == 0 and first == 0 and count:
                self._toggle(True)

        def on_train_batch_begin(self, batch, logs=None):
            if on_jax and self._open:  # the step before ended here: its work done
                self._end_step()
            elif on_jax and not self._epoch and count and batch == first and not self.taken:
                self._wait()  # started between steps, the step before done
                self._toggle(True)
            if self._open and batch == first + count:
                self._toggle(False)
                return
            if self._open:
                self.wall[batch] = time.time_ns()
            if self._open and marks:
                self._marker = marker(batch)
                self._marker.__enter__()

        def on_epoch_end(self, epoch, logs=None):
            if self._open:  # the window reached the epoch's end
                self._end_step()
                self._toggle(False)

        def on_train_end(self, logs=None):
            if self._open:  # stopped early (a deadline, a NaN)
                self._end_step()
                self._toggle(False)

        def _wait(self):
            """JAX: wait for the last step's state (Keras keeps it for callbacks that
            must wait: `_jax_state`); elsewhere the step-end hook reads the loss. Keras
            holds the state in its tracking containers (TrackedDict of TrackedLists),
            which JAX does not know as pytrees: given whole, `block_until_ready` takes
            the dict for one leaf and returns at once, so the arrays are passed."""
            state = getattr(self.model, "_jax_state", None)
            if on_jax and state:
                import jax

                jax.block_until_ready([a for arrays in state.values() for a in arrays])

        def _end_step(self, logs=None):
            if logs and "loss" in logs:
                float(logs["loss"])  # the step's result: its work is done
            else:
                self._wait()
            if self._marker is not None:
                self._marker.__exit__(None, None, None)
                self._marker = None

        def _toggle(self, start: bool):
            t0 = time.perf_counter()
            try:
                if start:
                    profiler_start(logdir, on_jax)
                    if horovod is not None:  # Horovod opens its file in a folder that is
                        logdir.mkdir(parents=True, exist_ok=True)
                        horovod.start_timeline(str(logdir / hvdtimeline.TIMELINE))
                else:
                    if horovod is not None:
                        horovod.stop_timeline()
                    profiler_stop(on_jax)
                    self.taken = True
                self._open = start
            except Exception as exc:  # noqa: BLE001 - a window is never a failed point
                self.error = f"the profiler did not {'start' if start else 'stop'}: {exc}"
                self._open = False
            self.seconds += time.perf_counter() - t0
            if not start:  # kept beside the trace: a resumed attempt reads it from there
                write_json_atomic(logdir / WINDOW_FILE, {
                    "seconds": self.seconds, "error": self.error,
                    "wall": {str(k): v for k, v in self.wall.items()}})

    class StepEndWindow(Window):
        """TensorFlow (tf-keras, Keras 3, the custom loop): each traced step ends at its
        step-end hook, and the window starts at the end of the step before, so that
        tf-keras' own step marker, opened before the step-begin hooks, is traced whole."""

        def on_train_batch_end(self, batch, logs=None):
            if self._open:
                self._end_step(logs)
            elif not self._epoch and count and batch == first - 1 and not self.taken:
                self._toggle(True)

    def marker(step: int):
        if on_jax:
            import jax

            return jax.profiler.StepTraceAnnotation(stepsplit.STEP_MARKER, step_num=step)
        import tensorflow as tf

        return tf.profiler.experimental.Trace(stepsplit.STEP_MARKER, step_num=step, _r=1)

    return Window() if on_jax else StepEndWindow()


def profiler_start(logdir: Path, on_jax: bool) -> None:
    if on_jax:
        import jax

        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = 0  # Python's calls would double the trace's cost
        jax.profiler.start_trace(str(logdir), profiler_options=options)
    else:
        import tensorflow as tf

        tf.profiler.experimental.start(str(logdir), tf.profiler.experimental.ProfilerOptions(
            python_tracer_level=0))


def profiler_stop(on_jax: bool) -> None:
    if on_jax:
        import jax

        jax.profiler.stop_trace()
    else:
        import tensorflow as tf

        tf.profiler.experimental.stop()


def read_trace(path: Path, on_jax: bool) -> list[stepsplit.Event]:
    """The trace's events, read with the framework's own XSpace reader."""
    if on_jax:
        from jax.profiler import ProfileData

        out = []
        for plane in ProfileData.from_file(str(path)).planes:
            for line in plane.lines:
                where = f"{plane.name}|{line.name}"
                for e in line.events:
                    step = (dict(e.stats).get("step_num") if e.name == stepsplit.STEP_MARKER
                            else None)
                    out.append(stepsplit.Event(where, e.name, int(e.start_ns),
                                               int(e.start_ns + e.duration_ns),
                                               None if step is None else int(step)))
        return out
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    out = []
    for plane in space.planes:
        names = {k: m.name for k, m in plane.event_metadata.items()}
        stats = {k: m.name for k, m in plane.stat_metadata.items()}
        for line in plane.lines:
            where = f"{plane.name}|{line.name}"
            for e in line.events:
                name = names.get(e.metadata_id, "")
                start = line.timestamp_ns * 1000 + e.offset_ps  # picoseconds
                step = None
                if name == stepsplit.STEP_MARKER:
                    step = next((s.int64_value or s.uint64_value for s in e.stats
                                 if stats.get(s.metadata_id) == "step_num"), None)
                out.append(stepsplit.Event(where, name, start // 1000,
                                           (start + e.duration_ps) // 1000, step))
    return out


def gradient_bytes(model) -> int:
    """Bytes of one gradient of the model: its trainable weights at their own dtype."""
    import numpy as np

    return int(sum(int(np.prod(w.shape)) * np.dtype(getattr(w.dtype, "name", w.dtype)).itemsize
                   for w in model.trainable_weights))


def record(window, logdir: Path, backend, size: int, keep: bool, on_jax: bool) -> dict:
    """breakdown.json's content: the window's steps and their split, the collective's
    timings and the gradient's bytes, and what could not be taken (`notes`)."""
    notes: list[str] = []
    out = {"method": METHOD, "window_s": round(window.seconds, 4) if window else None,
           "replicas": backend.replicas, "gradient_bytes": size,
           "steps": [], "notes": notes}
    t0 = time.perf_counter()
    torch = backend.kind == "ddp"
    traces = (sorted(logdir.glob(torchwindow.TRACE_FILE if torch else
                                 "plugins/profile/*/*.xplane.pb")) if window else [])
    if window is None:
        pass
    elif window.error:
        notes.append(window.error)
    elif not traces:
        notes.append("the profiler wrote no trace")
    elif (size := traces[-1].stat().st_size) > MAX_TRACE_BYTES:
        notes.append(f"the trace ({size / 2**20:.0f} MiB) is over {MAX_TRACE_BYTES / 2**20:.0f} "
                     "MiB: not read; analysis.breakdown asks fewer steps")
    else:
        try:
            events = (torchwindow.read_trace(traces[-1]) if torch
                      else read_trace(traces[-1], on_jax))
            if (timeline := logdir / hvdtimeline.TIMELINE).is_file():
                events += hvdtimeline.events(timeline, hvdtimeline.shift(events, window.wall))
                out["method"] = METHOD + " and Horovod's timeline"
            out["steps"] = stepsplit.split(events)
            notes += [n for n in [stepsplit.trailing_note(events, out["steps"])] if n]
            if xprofcheck.available() and not torch:
                out["xprof"], found = xprofcheck.compare(out["steps"],
                                                         xprofcheck.steps(traces[-1]))
                notes += found
            out["trace_bytes"] = size
        except Exception as exc:  # noqa: BLE001 - never a failed point
            notes.append(f"the trace could not be read: {type(exc).__name__}: {exc}")
        if not out["steps"] and not notes:
            notes.append("the trace holds no step marker")
    out["convert_s"] = round(time.perf_counter() - t0, 4)
    out["summary"] = stepsplit.summary(out["steps"])
    if out["summary"] and backend.replicas > 1 and not out["summary"]["comm_total_s"]:
        out["communication"] = "not separable"
        notes.append("Horovod's timeline holds no collective in the window"
                     if backend.kind == "horovod" else
                     "no collective operation ran in the window: the replicas' gradients "
                     "are summed by ordinary operations (AddN and copies), which the trace "
                     "cannot tell from compute")
    else:
        out["communication"] = "none (one replica)" if backend.replicas == 1 else "separable"
    if not keep:
        shutil.rmtree(logdir, ignore_errors=True)
    return out


def short_window(steps_per_epoch: int, wanted: int, first: int, count: int) -> str | None:
    """What an epoch too short for the window took instead of what was asked, or None."""
    if count >= wanted and first >= WARMUP_STEPS:
        return None
    compiling = (f"; it holds compiling steps (the first {WARMUP_STEPS} trace and compile "
                 "the step): its compute is over-counted") if first < WARMUP_STEPS else ""
    return (f"the first epoch has {steps_per_epoch} step(s): the window traced {count} of "
            f"the {wanted} asked (analysis.breakdown), from step {first + 1}{compiling}")


def kept_window(logdir: Path):
    """The window an earlier attempt of the point closed (its WINDOW_FILE beside its
    trace), as record() reads a window: seconds, error, wall; None where none was kept."""
    from types import SimpleNamespace

    try:
        kept = json.loads((logdir / WINDOW_FILE).read_text())
    except (OSError, ValueError):
        return None
    return SimpleNamespace(seconds=kept["seconds"], error=kept["error"],
                           wall={int(k): v for k, v in kept["wall"].items()})
