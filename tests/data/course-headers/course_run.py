"""One run in the style of the course editions that print a header before training:

  Model ResNet50 2 GPUs / Batch_size: 64 / Num_replicas: 2

then `fit(verbose=2)` with tf-keras under MirroredStrategy (here over logical CPU
devices); TensorFlow's INFO logging writes "Using MirroredStrategy with devices (...)"
to stderr, as the course's .err files show. capture.sh runs it three times in one job.
"""

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--n_gpus", type=int, default=1)
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

tf.get_logger().setLevel("INFO")
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * args.n_gpus)
strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(args.n_gpus)])
global_batch = args.batch_size * strategy.num_replicas_in_sync
print(f"Model ResNet50 {args.n_gpus} GPUs")
print(f"Batch_size: {global_batch}")
print(f"Num_replicas: {strategy.num_replicas_in_sync}", flush=True)
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((512, 8, 8, 3), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 512)
with strategy.scope():
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=global_batch, epochs=args.epochs, verbose=2)
