"""A training script that knows nothing of the other tasks (capture_copies.sh): every task
of `srun -n 8` trains the same model alone and prints the whole Keras output, as a job
whose script was never made distributed does."""

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import numpy as np  # noqa: E402
import tf_keras as keras  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((512, 8, 8, 3), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 512)
model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                          keras.layers.Dense(10, activation="softmax")])
model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, verbose=2)
model.evaluate(x[:256], y[:256], batch_size=64, verbose=2)
