"""What differs when a point trains with Keras 3 (`training.keras: 3`, docs/frameworks.md):
its backup (Keras 3's BackupAndRestore writes a weights file and a JSON of the epoch,
not a TensorFlow checkpoint), where its epoch line is printed, the warm-up schedule
written with `keras.ops` (so it runs on JAX too), the speed on synthetic input timed
through `fit`, and JAX's way of saying that memory ran out.

Keras and JAX are imported inside the functions, after `keraschoice.use_keras` chose them.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from dlscale.train import keraschoice

WEIGHTS = "latest.weights.h5"          # Keras 3 BackupAndRestore's file names
METADATA = "training_metadata.json"


def is_backup(folder: Path) -> bool:
    """Whether `folder` holds a Keras 3 backup (rather than a TensorFlow checkpoint)."""
    return (folder / METADATA).exists() or (folder / WEIGHTS).exists()


def backup_callback(backup_dir: str, write: bool = True):
    """Keras 3's BackupAndRestore, each file written whole: to a temporary name, then
    renamed, the weights before the epoch that names them, so a job killed while saving
    leaves the last backup readable (Keras writes both files in place). Every process
    restores from it and takes part in saving it (on JAX, reading the weights across
    processes is collective); only the one that `write`s (the chief) keeps it, the others
    write to a scratch folder that is removed at once."""
    keras = keraschoice.keras()

    class Backup(keras.callbacks.BackupAndRestore):
        # saved at epochs only, its step-end hook returns at once: safe for Keras to call
        # in a thread of its own. Otherwise Keras 3 takes any callback with a step-end hook
        # for one that needs each step's logs and waits for the device after every step
        # (ResNet50V2 on an H200: 22.8 ms a step against 15 ms; docs/benchmarks.md, "GPUs")
        async_safe = True

        def _save_model(self):
            if not write:
                with tempfile.TemporaryDirectory(prefix="dlscale-backup-") as scratch:
                    self.model.save_weights(str(Path(scratch) / WEIGHTS))
                return
            folder = Path(self.backup_dir)
            folder.mkdir(parents=True, exist_ok=True)
            partial = folder / f".{WEIGHTS}.partial.weights.h5"
            self.model.save_weights(filepath=str(partial), overwrite=True)
            os.replace(partial, self._weights_path)
            meta = folder / f".{METADATA}.partial"
            meta.write_text(json.dumps({"epoch": self._current_epoch,
                                        "batch": self._last_batch_seen}))
            os.replace(meta, self._training_metadata_path)

    return Backup(backup_dir, delete_checkpoint=False)


def epoch_line():
    """Keras 3's ProgbarLogger, to be given right after the epoch recorder. Keras 3 appends
    its own after every callback, so the seconds of an epoch's printed line would hold the
    backup's save and whatever else ends the epoch (tf-keras puts its first): the line then
    disagrees with the records under load (runs.csv's log_check). async_safe as Keras takes
    its own, which it adds after deciding whether steps may run ahead of the callbacks."""
    keras = keraschoice.keras()

    class EpochLine(keras.callbacks.ProgbarLogger):
        async_safe = True

    return EpochLine()


def completed_epochs(folder: Path) -> int:
    """The epochs a Keras 3 backup holds (its metadata's `epoch`, a count), 0 if none."""
    try:
        return max(int(json.loads((folder / METADATA).read_bytes())["epoch"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def backup_problem(folder: Path) -> str | None:
    """Why a Keras 3 backup cannot be restored (its epoch unreadable, or a weight of its
    weights file), or None."""
    import h5py

    name = folder.name  # as the TensorFlow checkpoint check names it: below state/
    try:
        meta = json.loads((folder / METADATA).read_bytes())
        if not isinstance(meta.get("epoch"), int):
            return f"{name}/{METADATA} names no epoch"
    except (OSError, ValueError) as exc:
        return f"{name}/{METADATA} cannot be read ({type(exc).__name__})"
    try:
        with h5py.File(folder / WEIGHTS, "r") as weights:
            weights.visititems(lambda _, item: item[()] if isinstance(item, h5py.Dataset)
                               else None)
    except Exception as exc:  # OSError, KeyError, a truncated file ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"{name}/{WEIGHTS} cannot be read ({first[:160]})"
    return None


def out_of_memory(exc: BaseException) -> bool:
    """Whether JAX (XLA) says the device ran out of memory."""
    return (type(exc).__name__ in ("XlaRuntimeError", "JaxRuntimeError")
            and "RESOURCE_EXHAUSTED" in str(exc))
