"""The run's side of the profiled window (analysis.breakdown): whether a point opens it
(the chief, from its first epoch, unless training.profile_steps holds the profiler),
which framework's it is (torch.profiler's for PyTorch, TensorFlow's or JAX's otherwise,
Horovod's timeline beside it), training.profile_steps' own window on JAX and PyTorch, and
its closing after a completed training: the all-reduce timed on every worker, the
chief's breakdown.json written. What the window measures and how it is read is
dlscale.measure's (profwindow, torchwindow, hvdtimeline, allreduce).
"""

from __future__ import annotations

import shutil

from dlscale.core.contract import BREAKDOWN, TENSORBOARD, TRACE
from dlscale.core.files import write_json_atomic
from dlscale.measure import torchwindow
from dlscale.measure.allreduce import measure_collective
from dlscale.measure.profwindow import (
    WINDOW_FILE,
    gradient_bytes,
    kept_window,
    make_callback,
    record,
    short_window,
    window_steps,
)
from dlscale.train import keraschoice


def open_window(settings, backend, steps_per_epoch: int, resumed_at: int = 0):
    """The chief's window callback (analysis.breakdown), or None. A training from its
    first epoch removes an earlier attempt's breakdown.json and trace first, so the folder
    never holds another run's; a resumed one (`resumed_at`: the epochs its backup holds)
    has run the window's epoch already: it keeps that attempt's trace and traces
    nothing, and close_window reads the kept trace."""
    if resumed_at:
        return None
    if backend.chief:
        (settings.out / BREAKDOWN).unlink(missing_ok=True)
        shutil.rmtree(settings.out / TRACE, ignore_errors=True)
    if not backend.chief or not settings.breakdown_steps or settings.profile_steps:
        return None  # training.profile_steps holds the profiler: one session at a time
    first, count = window_steps(steps_per_epoch, settings.breakdown_steps)
    if backend.kind == "ddp":
        window = torchwindow.make_callback(keraschoice.keras(), settings.out / TRACE, first,
                                           count, settings.out / TRACE / WINDOW_FILE)
    else:
        window = make_callback(keraschoice.keras(), settings.out / TRACE, first, count,
                               marks=settings.keras == 3 or settings.loop == "custom",
                               on_jax=keraschoice.trains_on_jax(),
                               horovod=backend.hvd if backend.kind == "horovod" else None)
    window.short = short_window(steps_per_epoch, settings.breakdown_steps, first, count)
    return window


def profile_window(settings, steps_per_epoch: int):
    """training.profile_steps [a, b] on Keras 3 over JAX or PyTorch (Keras profiles JAX from
    Python 3.12 only, PyTorch not at all): steps a to b of the first epoch traced into the
    TensorBoard folder, JAX's as plugins/profile/<run>/<host>.xplane.pb (TensorBoard's
    profile plugin, xprof), PyTorch's as torchwindow.TRACE_FILE (Perfetto, HTA)."""
    a, b = settings.profile_steps
    first, count = a - 1, max(0, min(b, steps_per_epoch) - a + 1)
    logdir = settings.out / TENSORBOARD
    if keraschoice.trains_on_torch():
        return torchwindow.make_callback(keraschoice.keras(), logdir, first, count,
                                         logdir / WINDOW_FILE)
    return make_callback(keraschoice.keras(), logdir, first, count, marks=True,
                         on_jax=keraschoice.trains_on_jax())


def profile_note(settings, steps_per_epoch: int) -> str | None:
    """run.json's note where training.profile_steps reach past the first epoch on JAX or
    PyTorch, whose trace stays in it."""
    if not settings.profile_steps or not keraschoice.without_tensorflow():
        return None
    a, b = settings.profile_steps
    if b <= steps_per_epoch:
        return None
    return (f"training.profile_steps [{a}, {b}]: on JAX and PyTorch the trace stays in the "
            f"first epoch ({steps_per_epoch} steps): "
            + (f"steps {a} to {steps_per_epoch} traced" if a <= steps_per_epoch
               else "nothing traced"))


def close_window(settings, backend, window, model, completed: bool) -> dict | None:
    """After a completed training: every worker times the all-reduce, the chief reads the
    window's trace and writes breakdown.json; run.json's `breakdown` names it and its
    notes."""
    if not settings.breakdown_steps or not completed:
        return None
    size = gradient_bytes(model)  # what the all-reduce times up to, and the record says
    collective = measure_collective(backend, size)
    if not backend.chief:
        return None
    resumed = window is None and not settings.profile_steps
    if resumed:  # the window's epoch ran in an earlier attempt: its trace, if it kept one
        window = kept_window(settings.out / TRACE)
    out = record(window, settings.out / TRACE, backend, size, settings.keep_trace,
                 keraschoice.trains_on_jax())
    if getattr(window, "short", None):
        out["notes"].insert(0, window.short)
    if settings.profile_steps:
        out["notes"].append("no window: training.profile_steps holds the profiler")
    elif resumed and window is None:
        out["notes"].append("the window's epoch (the first) ran in an earlier attempt, "
                            "which ended before its window closed: no trace to read")
    out["collective"] = collective
    write_json_atomic(settings.out / BREAKDOWN, out)
    return {"file": BREAKDOWN, "notes": out["notes"]}
