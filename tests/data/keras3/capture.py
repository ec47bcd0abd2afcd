"""Capture real Keras 3 console output for the log-parser tests (run on this machine).

  TF_USE_LEGACY_KERAS=0 python capture.py 1 > fit_verbose1.log
  TF_USE_LEGACY_KERAS=0 python capture.py 2 > fit_verbose2.log

A tiny model on seeded random data, `fit(verbose=...)` for 3 epochs, its stdout kept
byte for byte (Keras 3 writes ANSI escape codes in verbose=1 bars even into a file).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import numpy as np  # noqa: E402

verbose = int(sys.argv[1])
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((256, 8, 8, 3), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 256)
model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                          keras.layers.Dense(10, activation="softmax")])
model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
print(f"keras {keras.__version__}", flush=True)
model.fit(x, y, batch_size=32, epochs=3, verbose=verbose)
