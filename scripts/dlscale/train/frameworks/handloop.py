"""A hand-written loop's epochs, Keras' callbacks driven as `fit` drives them, and the
Keras verbose=2 line it prints per epoch: shared by TensorFlow's custom loop
(tensorflow/customloop) and PyTorch's loop (torch/torchloop), so that the analysis reads
their logs and records like any run's.
"""

from __future__ import annotations

import time

from dlscale.train import keraschoice


def keras_line(steps: int, seconds: float, logs: dict) -> str:
    """tf-keras' verbose=2 epoch line: `4/4 - 1s - loss: 2.3112 - accuracy: 0.1133 -
    878ms/epoch - 219ms/step`."""
    metrics = " - ".join(f"{k}: {v:.4f}" for k, v in logs.items())
    return (f"{steps}/{steps} - {round(seconds)}s - {metrics} - {round(seconds * 1000)}ms/epoch"
            f" - {round(seconds * 1000 / steps)}ms/step")


def drive(model, callbacks: list, start: int, epochs: int, steps: int, verbose: bool,
          one_epoch, save, save_first: bool = False) -> None:
    """A hand-written loop's epochs `start` to `epochs`, Keras' callbacks driven as `fit`
    drives them: `one_epoch(hooks)` trains one and returns its logs, `save(done)` writes
    the backup of `done` epochs (before the epoch's callbacks with `save_first`: the
    custom loop's checkpoint, after them otherwise: an epoch recorded before its backup, as
    fit's callbacks order them); a Keras verbose=2 line per epoch from the chief."""
    keras = keraschoice.keras()
    hooks = keras.callbacks.CallbackList(callbacks, model=model, epochs=epochs, steps=steps)
    hooks.on_train_begin()
    for epoch in range(start, epochs):
        if verbose:
            print(f"Epoch {epoch + 1}/{epochs}", flush=True)
        hooks.on_epoch_begin(epoch)
        began = time.perf_counter()
        logs = one_epoch(hooks)
        if save_first:
            save(epoch + 1)
        if verbose:  # the epoch's seconds up to its records' (the recorder's on_epoch_end):
            # a checkpoint left out of the line's had it 0.7 s short in a loaded CI
            print(keras_line(steps, time.perf_counter() - began, logs), flush=True)
        hooks.on_epoch_end(epoch, logs)
        if not save_first:
            save(epoch + 1)
        if model.stop_training:
            break  # the recorder saw a NaN or infinite loss: the run ends as failed
    hooks.on_train_end()
