"""A user's Horovod training script, as Horovod's Keras examples write it: rank 0 shows
Keras' progress bar (`verbose=1`), the other ranks print nothing while training, and every
rank runs `evaluate(verbose=2)` at the end. capture.sh runs it on 2 ranks."""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

hvd.init()
print(f"Horovod size: {hvd.size()}", flush=True)
tf.keras.utils.set_random_seed(hvd.rank())
x = np.random.default_rng(0).random((4096, 16, 16, 3), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 4096)
model = tf.keras.Sequential([tf.keras.Input((16, 16, 3)),
                             tf.keras.layers.Conv2D(16, 3, activation="relu"),
                             tf.keras.layers.Flatten(),
                             tf.keras.layers.Dense(10, activation="softmax")])
model.compile(hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size())),
              "sparse_categorical_crossentropy", metrics=["accuracy"])
shard = slice(hvd.rank(), None, hvd.size())
model.fit(x[shard], y[shard], batch_size=args.batch_size, epochs=args.epochs,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                     hvd.callbacks.MetricAverageCallback()],
          verbose=1 if hvd.rank() == 0 else 0)
model.evaluate(x[:1024], y[:1024], batch_size=64, verbose=2)
