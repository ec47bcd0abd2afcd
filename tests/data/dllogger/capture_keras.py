"""How dllogger_keras_stdout.txt and dllogger_keras.json were made: a real Keras training
(tf.keras, 2 epochs of 1,024 real Fashion-MNIST images from Debian's dataset-fashion-mnist)
logged with NVIDIA's DLLogger 1.1.0 (github.com/NVIDIA/dllogger at 0478734) the way
DeepLearningExamples' scripts log: PARAMETER first, an entry per 8 training steps
(epoch, step), one per epoch (epoch,), and the Summary (). StdOutBackend with its default
formats prints to stdout; JSONStreamBackend writes the JSON file.

    PYTHONPATH=<dllogger checkout> python capture_keras.py dllogger_keras.json \
        > dllogger_keras_stdout.txt
"""

import gzip
import sys
import time

import dllogger
import numpy as np
import tensorflow as tf

FOLDER = "/usr/share/datasets/fashion-mnist"
IMAGES, BATCH, EPOCHS, EVERY = 1024, 32, 2, 8


def read(kind: str, count: int):
    with gzip.open(f"{FOLDER}/{kind}-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)[:count]
    with gzip.open(f"{FOLDER}/{kind}-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:count]
    return x.astype("float32") / 255, y


class DLLoggerCallback(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.start, self.mark = epoch, time.time(), time.time()

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % EVERY == 0:
            now = time.time()
            dllogger.log(step=(self.epoch, batch + 1), data={
                "train.loss": float(logs["loss"]),
                "train.total_ips": EVERY * BATCH / (now - self.mark)})
            self.mark = now

    def on_epoch_end(self, epoch, logs=None):
        dllogger.log(step=(epoch,), data={
            "train.loss": float(logs["loss"]), "train.top1": 100 * float(logs["accuracy"]),
            "val.loss": float(logs["val_loss"]), "val.top1": 100 * float(logs["val_accuracy"]),
            "train.total_ips": IMAGES / (time.time() - self.start)})


dllogger.init(backends=[dllogger.StdOutBackend(dllogger.Verbosity.DEFAULT),
                        dllogger.JSONStreamBackend(dllogger.Verbosity.VERBOSE, sys.argv[1])])
dllogger.metadata("train.total_ips", {"unit": "images/s"})
dllogger.metadata("train.top1", {"unit": "%"})
dllogger.metadata("val.top1", {"unit": "%"})
dllogger.log(step="PARAMETER", data={"batch_size": BATCH, "epochs": EPOCHS, "world_size": 1,
                                     "amp": False, "data": FOLDER})
(x, y), (vx, vy) = read("train", IMAGES), read("t10k", 256)
tf.keras.utils.set_random_seed(1)
model = tf.keras.Sequential([tf.keras.Input((28, 28, 1)),
                             tf.keras.layers.Conv2D(16, 3, activation="relu"),
                             tf.keras.layers.MaxPooling2D(), tf.keras.layers.Flatten(),
                             tf.keras.layers.Dense(10)])
model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
              metrics=["accuracy"])
began = time.time()
model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, validation_data=(vx, vy), verbose=0,
          callbacks=[DLLoggerCallback()])
dllogger.log(step=(), data={"train.total_ips": EPOCHS * IMAGES / (time.time() - began)})
dllogger.flush()
