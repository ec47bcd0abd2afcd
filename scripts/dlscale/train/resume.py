"""A point's resume state (state/ in its run folder): what an earlier attempt finished,
whether its backup and records can be used, and setting them aside when they cannot
or when the settings changed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from dlscale.core.contract import EPOCHS, SETTINGS, read_epochs
from dlscale.core.errors import RunError
from dlscale.core.files import jsonl_problem, write_json_atomic


def describe_change(old: dict, new: dict) -> str:
    changed = [k for k in new if old.get(k) != new.get(k)]
    return ", ".join(f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in changed)


def completed_epochs(backup: Path) -> int:
    """The epochs an earlier attempt finished, as its backup holds them (0: none): Keras'
    BackupAndRestore saves the last finished epoch's index (ckpt_saved_epoch, -1 unused),
    the custom loop the count (epoch), Keras 3's BackupAndRestore and a torch point the
    count in a JSON."""
    from dlscale.train.frameworks.keras3 import keras3
    from dlscale.train.frameworks.torch import torchloop

    if keras3.is_backup(backup):
        return keras3.completed_epochs(backup)
    if torchloop.is_backup(backup):
        return torchloop.completed_epochs(backup)
    import tensorflow as tf

    folder = backup / "chief" if (backup / "chief").is_dir() else backup
    latest = tf.train.latest_checkpoint(str(folder)) if folder.is_dir() else None
    if latest is None:
        return 0
    reader = tf.train.load_checkpoint(latest)
    for name, done in (("ckpt_saved_epoch", lambda v: v + 1), ("epoch", lambda v: v)):
        key = f"{name}/.ATTRIBUTES/VARIABLE_VALUE"
        if reader.has_tensor(key):
            return max(int(done(reader.get_tensor(key))), 0)
    return 0


def checkpoint_problem(backup: Path) -> str | None:
    """Why the newest checkpoint in a backup folder cannot be restored (every tensor is
    read once), or None; an empty or missing folder has none."""
    if not backup.is_dir() or not any(p.is_file() for p in backup.rglob("*")):
        return None
    from dlscale.train.frameworks.keras3 import keras3
    from dlscale.train.frameworks.torch import torchloop

    if keras3.is_backup(backup):
        return keras3.backup_problem(backup)
    if torchloop.is_backup(backup):
        return torchloop.backup_problem(backup)
    import tensorflow as tf

    folders = sorted({p.parent for p in backup.rglob("checkpoint")}) or [backup]
    for folder in folders:
        try:
            latest = tf.train.latest_checkpoint(str(folder))
            if latest is None:
                return f"{folder} names no checkpoint"
            reader = tf.train.load_checkpoint(latest)
            for name in reader.get_variable_to_shape_map():
                reader.get_tensor(name)
        except Exception as exc:  # DataLossError, NotFoundError, a parse error ...
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return f"checkpoint {folder.relative_to(backup.parent)} cannot be read ({first[:160]})"
    return None


def state_problem(state: Path, backup: Path) -> str | None:
    """What makes a saved state unusable, or None: settings that cannot be read, records
    with a cut or damaged line or a gap, a checkpoint that cannot be restored."""
    settings = state / SETTINGS
    if settings.exists():
        try:
            json.loads(settings.read_bytes())
        except (OSError, ValueError) as exc:
            return f"{SETTINGS} cannot be read ({type(exc).__name__})"
    if problem := jsonl_problem(state / EPOCHS):
        return problem
    numbers = [r.get("epoch") for r in read_epochs(state / EPOCHS)]
    if numbers != list(range(1, len(numbers) + 1)):
        return f"{EPOCHS} holds epochs {numbers}, not 1 to {len(numbers)}"
    return checkpoint_problem(backup)


def move_aside(state: Path, prefix: str) -> Path:
    aside = state.parent / f"{prefix}-{time.strftime('%Y%m%dT%H%M%S')}"
    state.rename(aside)
    return aside


def prepare_state(state: Path, settings: dict, epochs: int, backup: Path | None = None
                  ) -> str | None:
    """Make `state` ready for a run with `settings`; return a note for train.log.

    A state that cannot be used (`state_problem`: unreadable settings, damaged records,
    a checkpoint that does not restore) is moved aside to state.corrupt-<time>/ and the
    run starts over: a crash loop on every rerun helps no one.
    Same settings: the backup is kept (the run resumes), unless it already holds more
    finished epochs than `epochs` asks for (RunError: that would silently drop them).
    Other settings: the old state is moved aside to superseded-<time>/ and the run
    starts over."""
    saved_path = state / SETTINGS
    note = None
    if state.is_dir() and (problem := state_problem(state, backup or state / "backup")):
        aside = move_aside(state, f"{state.name}.corrupt")
        note = f"the saved state cannot be used ({problem}): starting over; it is in {aside}"
    if state.is_dir() and any(state.iterdir()):
        try:
            saved = json.loads(saved_path.read_bytes())
        except (OSError, ValueError):  # missing, not UTF-8, not JSON: not resumable
            saved = {}
        if {k: saved.get(k) for k in settings} != settings:
            aside = move_aside(state, "superseded")
            what = describe_change(saved, settings) if saved else "no settings recorded"
            note = (f"the saved state was made with other settings ({what}): starting over; "
                    f"the old state is in {aside}")
        else:
            finished = len(read_epochs(state / EPOCHS))
            if finished > epochs:
                raise RunError(f"{finished} epochs of this run are already finished in {state} "
                               f"but --epochs is {epochs}: ask for at least {finished}, or move "
                               f"{state} away to start over", 2)
    state.mkdir(parents=True, exist_ok=True)
    write_json_atomic(saved_path, settings)  # a kill while writing keeps the old settings
    return note
