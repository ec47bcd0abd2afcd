"""A user's multi-worker training script that states no GPU count of its own:
MultiWorkerMirroredStrategy with TF_CONFIG from SLURM's variables (the nodes' names from
SLURM_JOB_NODELIST, a port per task), `fit(verbose=2)` on every worker. capture.sh runs it."""

import json
import os
import subprocess

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
rank, size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                       capture_output=True, text=True, check=True).stdout.split()
base = 15000 + int(os.environ["SLURM_JOB_ID"]) % 100 * 20
os.environ["TF_CONFIG"] = json.dumps({
    "cluster": {"worker": [f"{hosts[i % len(hosts)]}:{base + i}" for i in range(size)]},
    "task": {"type": "worker", "index": rank}})
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

strategy = tf.distribute.MultiWorkerMirroredStrategy()
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((512, 8, 8, 3), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 512)
with strategy.scope():
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=32 * size, epochs=2, verbose=2)
