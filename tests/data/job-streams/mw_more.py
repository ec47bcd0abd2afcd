"""mw_run.py's training as other job scripts run it (capture_more.sh): the worker's index
from WORKER when each worker is its own `srun -n 1` (both then labelled `0:`), no
`Number of devices` line unless --devices, and --die-in-epoch K to end the process
abruptly inside epoch K (SIGKILL, as the out-of-memory killer or a node's loss does),
after which the job script starts it again and BackupAndRestore resumes epoch K."""

import argparse
import json
import os
import signal

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
rank = int(os.environ.get("WORKER", os.environ.get("SLURM_PROCID", 0)))
size = int(os.environ.get("WORKERS", os.environ.get("SLURM_NTASKS", 1)))
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
parser.add_argument("--devices", action="store_true")
parser.add_argument("--backup")
parser.add_argument("--die-in-epoch", type=int)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
if args.devices:
    print(f"Number of devices: {strategy.num_replicas_in_sync}", flush=True)
keras.utils.set_random_seed(0)
x = np.random.default_rng(0).random((512, 8, 8, 3), dtype=np.float32)
y = np.random.default_rng(1).integers(0, 10, 512)
with strategy.scope():
    model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])


class Die(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == args.die_in_epoch and batch == 2:
            os.kill(os.getpid(), signal.SIGKILL)


callbacks = []
if args.backup:
    callbacks.append(keras.callbacks.BackupAndRestore(args.backup))
if args.die_in_epoch:
    callbacks.append(Die())
model.fit(x, y, batch_size=args.batch_size * size, epochs=args.epochs, verbose=2,
          callbacks=callbacks)
model.evaluate(x[:256], y[:256], batch_size=64, verbose=2)
