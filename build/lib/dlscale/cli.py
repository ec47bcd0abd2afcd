"""Small helpers every CLI script shares."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import NoReturn


def quiet_tensorflow() -> None:
    """Keep TensorFlow's C++ start-up chatter out of logs unless the user asked for it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Keras 2 everywhere (docs/keras.md): tf-keras with TensorFlow 2.21; TensorFlow 2.15
    # (the Horovod environment) has Keras 2 built in and fails if asked for tf_keras.
    if importlib.util.find_spec("tf_keras") is not None:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    else:
        os.environ.pop("TF_USE_LEGACY_KERAS", None)


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def keras():
    """Keras 2 in either environment: tf-keras with TensorFlow 2.21 (the main one), or
    TensorFlow 2.15's own tf.keras, which is Keras 2 (the Horovod environment, where
    horovod.tensorflow.keras works on tf.keras and a second Keras copy would not mix)."""
    quiet_tensorflow()
    try:
        import tf_keras
    except ImportError:
        from tensorflow import keras as tf_keras
    return tf_keras


def parse_meta(items: list[str], flag: str = "--meta") -> dict:
    """KEY=VALUE flags as a dict; ValueError naming the flag for one without '='."""
    meta = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE, got '{item}'")
        meta[key] = value
    return meta
