"""A custom training loop, as the IDRIS course teaches it for tf.distribute strategies.

A `tf.function` step run on every replica with `strategy.run`; the per-example loss is
summed and divided by the GLOBAL batch (`tf.nn.compute_average_loss`), the replicas'
losses added with `strategy.reduce(SUM)`; the input is the same seeded, shuffled,
drop-remainder pipeline `fit` reads. It writes what `fit` writes: a Keras verbose=2 line
per epoch (so the analysis reads it like any run) and, through the same callbacks, the
epoch records and the time-limit stop. A killed run resumes from its last epoch through
`tf.train.CheckpointManager` (the chief's checkpoint; other workers write to folders of
their own that are removed, as TensorFlow's multi-worker guide does).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from dlscale.train import keraschoice
from dlscale.train.frameworks.handloop import drive


class CustomLoop:
    """train(...) for a model compiled in the strategy's scope (compile gives it its
    optimizer, wrapped for loss scaling under mixed_float16; the loop does the rest)."""

    def __init__(self, backend, model, plan, checkpoint_dir: Path):
        import tensorflow as tf

        keras = keraschoice.keras()
        self.backend, self.model, self.plan = backend, model, plan
        self.optimizer = model.optimizer
        with backend.strategy.scope():
            self.accuracy = keras.metrics.SparseCategoricalAccuracy()
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.loss = keras.losses.SparseCategoricalCrossentropy(
            reduction=keras.losses.Reduction.NONE)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=self.optimizer, epoch=self.epoch)
        self.read_dir = checkpoint_dir
        self.write_dir = checkpoint_dir if backend.chief else \
            checkpoint_dir.parent / f"{checkpoint_dir.name}-worker{backend.rank}"
        self.manager = tf.train.CheckpointManager(checkpoint, str(self.write_dir), max_to_keep=1)
        self.checkpoint = checkpoint
        self._step = tf.function(self._distributed_step)

    def _replica_step(self, images, labels):
        import tensorflow as tf

        scaled = hasattr(self.optimizer, "get_scaled_loss")
        with tf.GradientTape() as tape:
            probabilities = self.model(images, training=True)
            loss = tf.nn.compute_average_loss(self.loss(labels, probabilities),
                                              global_batch_size=self.plan.global_batch)
            target = self.optimizer.get_scaled_loss(loss) if scaled else loss
        gradients = tape.gradient(target, self.model.trainable_variables)
        if scaled:
            gradients = self.optimizer.get_unscaled_gradients(gradients)
        self.optimizer.apply_gradients(zip(gradients, self.model.trainable_variables))
        self.accuracy.update_state(labels, probabilities)
        return loss

    def _distributed_step(self, images, labels):
        import tensorflow as tf

        per_replica = self.backend.strategy.run(self._replica_step, args=(images, labels))
        return self.backend.strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    def _epoch(self, iterator, hooks) -> dict:
        import tensorflow as tf

        total = tf.constant(0.0)
        for step in range(self.plan.steps):
            hooks.on_train_batch_begin(step)
            total += self._step(*next(iterator))  # stays on the device until the end
            hooks.on_train_batch_end(step)
        logs = {"loss": float(total) / self.plan.steps,
                "accuracy": float(self.accuracy.result())}
        self.accuracy.reset_states()
        return logs

    def _save(self, done: int) -> None:
        self.epoch.assign(done)
        self.manager.save()

    def restore(self) -> int:
        """The epochs a previous attempt finished (0: start from the beginning)."""
        import tensorflow as tf

        latest = (self.manager.latest_checkpoint if self.backend.chief
                  else tf.train.latest_checkpoint(str(self.read_dir)))
        if latest:
            self.checkpoint.restore(latest)
        return int(self.epoch.numpy())

    def train(self, dataset, epochs: int, callbacks: list, verbose: bool) -> int:
        """Train from the restored epoch on; return the epoch it resumed at (0: none)."""
        start = self.restore()
        iterator = iter(dataset)
        try:
            drive(self.model, callbacks, start, epochs, self.plan.steps, verbose,
                  lambda hooks: self._epoch(iterator, hooks), self._save, save_first=True)
        finally:  # also when the time limit stops it: other workers leave nothing behind
            if not self.backend.chief:
                shutil.rmtree(self.write_dir, ignore_errors=True)
        return start
