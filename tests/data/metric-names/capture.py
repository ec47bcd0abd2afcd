"""Capture real Keras console output with other metric names (run on this machine).

  python capture.py keras2 sparse > tfkeras_sparse_metric.log
  python capture.py keras3 regression > keras3_loss_only.log

A tiny model on seeded random data, `fit(verbose=2)` for 3 epochs, then the
`print(f"Test accuracy: ...")` a tutorial ends with; stdout kept byte for byte.
`sparse`: a classifier compiled with metrics=["sparse_categorical_accuracy"] (tf-keras,
Keras 2). `regression`: one output, mean squared error, no metric at all (Keras 3).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if sys.argv[1] == "keras2":
    import tf_keras as keras  # noqa: E402
else:
    import keras  # noqa: E402
import numpy as np  # noqa: E402

kind = sys.argv[2]
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((256, 8, 8, 3), dtype=np.float32)
if kind == "sparse":
    y = np.random.default_rng(1).integers(0, 10, 256)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy",
                  metrics=["sparse_categorical_accuracy"])
else:
    y = np.random.default_rng(1).random(256, dtype=np.float32)
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(1)])
    model.compile("sgd", "mse")
print(f"keras {keras.__version__}", flush=True)
model.fit(x, y, batch_size=32, epochs=3, verbose=2)
result = model.evaluate(x[:64], y[:64], verbose=0)
if kind == "sparse":
    print(f"Test loss: {result[0]:.4f}")
    print(f"Test accuracy: {result[1]:.4f}")
else:
    print(f"Test loss: {result:.4f}")
