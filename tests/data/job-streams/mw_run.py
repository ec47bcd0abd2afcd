"""A user's multi-worker training script, as people write them for a cluster:
MultiWorkerMirroredStrategy with TF_CONFIG built from the launcher's variables (srun's
SLURM_PROCID/SLURM_NTASKS or OpenMPI's OMPI_COMM_WORLD_RANK/SIZE), `fit(verbose=2)` on
every worker (no `if rank == 0`), then `evaluate(verbose=2)`. capture.sh runs it in one
SLURM job on the test cluster's two nodes. The nodes share one address here, so each
worker gets its own port (base + rank)."""

import argparse
import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
rank = int(os.environ.get("SLURM_PROCID", os.environ.get("OMPI_COMM_WORLD_RANK", 0)))
size = int(os.environ.get("SLURM_NTASKS", os.environ.get("OMPI_COMM_WORLD_SIZE", 1)))
base = 15000 + int(os.environ.get("SLURM_JOB_ID", 0)) % 100 * 20
os.environ["TF_CONFIG"] = json.dumps({
    "cluster": {"worker": [f"localhost:{base + i}" for i in range(size)]},
    "task": {"type": "worker", "index": rank}})
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}", flush=True)
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((512, 8, 8, 3), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 512)
with strategy.scope():
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
model.fit(x, y, batch_size=args.batch_size * size, epochs=args.epochs, verbose=2)
model.evaluate(x[:256], y[:256], batch_size=64, verbose=2)
