"""A run (`Run`: what every step of it reads) and its input: the training and test input
functions the backend distributes, where the images come from (the shards, memory, or
one synthetic batch), and the model's speed without the input pipeline (the input-bound
check)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dlscale.train import keraschoice

if TYPE_CHECKING:
    from dlscale.train.frameworks.backend import Backend
    from dlscale.train.settings import Settings
    from dlscale.train.training import RunPlan


@dataclass
class Run:
    """What every step of a run reads, made once in `run`: the settings, the backend
    (strategy, devices, rank), the run's plan (global batch, steps, learning rate), the
    data's manifest, the precision policy and the state folder."""

    settings: Settings
    backend: Backend
    plan: RunPlan
    manifest: dict
    precision: str
    state: Path

    @property
    def backup(self) -> Path:
        return backup_dir(self.settings, self.state)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.manifest["image_shape"])


def backup_dir(settings, state: Path) -> Path:
    """What a rerun resumes from: Keras' BackupAndRestore folder, or the custom loop's
    checkpoints."""
    return state / ("ckpt" if settings.loop == "custom" else "backup")


def inputs(r: Run, epochs_done: int = 0):
    """(train input function of an InputContext, test input of (batch, shards, index));
    the training input begins where `epochs_done` epochs of a resumed run left it. On
    JAX both read with dlscale's own reader (numpy batches, no TensorFlow), in the
    order TensorFlow's reader gives with the images held in memory."""
    from dlscale.data.shardreader import Reader
    from dlscale.data.tfrecords import make_dataset
    from dlscale.train import training

    settings, manifest, plan = r.settings, r.manifest, r.plan
    on_jax = keraschoice.without_tensorflow()  # JAX or PyTorch

    def train_input(context):
        batch = context.get_per_replica_batch_size(plan.global_batch)
        seed = settings.seed + context.input_pipeline_id
        # each step takes a batch per replica of this pipeline's worker
        taken = epochs_done * plan.steps * (context.num_replicas_in_sync
                                            // context.num_input_pipelines)
        if settings.synthetic:
            return training.synthetic_dataset(r.image_shape, manifest["num_classes"], batch, seed,
                                              numpy=on_jax)
        if on_jax:
            return Reader(settings.data_dir, "train", batch, training=True, seed=seed,
                          num_shards=context.num_input_pipelines,
                          shard_index=context.input_pipeline_id, skip_batches=taken)
        return make_dataset(settings.data_dir, "train", batch, training=True, seed=seed,
                            shuffle_buffer=settings.shuffle_buffer,
                            num_shards=context.num_input_pipelines,
                            shard_index=context.input_pipeline_id, skip_batches=taken,
                            cache=in_memory(settings, manifest, context.num_input_pipelines,
                                            context.input_pipeline_id))

    def test_input(batch, shards, index):
        if on_jax:
            return Reader(settings.data_dir, "test", batch, training=False,
                          num_shards=shards, shard_index=index)
        return make_dataset(settings.data_dir, "test", batch, training=False, num_shards=shards,
                            shard_index=index)

    return train_input, test_input


def in_memory(settings, manifest: dict, pipelines: int, index: int) -> bool:
    """Whether input pipeline `index` of `pipelines` holds its decoded training images in
    memory (they take at most --cache-mb) instead of reading the shards every epoch."""
    from dlscale.data.tfrecords import split_bytes

    return split_bytes(manifest, "train", pipelines, index) <= settings.cache_mb * 2**20


def input_facts(settings, backend, manifest: dict) -> dict:
    """Where the images were brought to the model's size: prepare (shards at that size),
    on_device (the model's first layer), or none (the dataset's own size); and where
    this process's training input came from after the first epoch: memory, files (the
    shards) or synthetic (one repeated batch)."""
    size, shards = settings.model_size(manifest), manifest["image_shape"]
    native = manifest.get("native_shape", shards)
    resize = ("on_device" if shards[:2] != [size, size]
              else "prepare" if native[:2] != shards[:2] else "none")
    source = ("synthetic" if settings.synthetic
              else "files" if keraschoice.without_tensorflow()  # gathered from the mapped shards
              else "memory" if in_memory(settings, manifest, backend.size, backend.rank)
              else "files")
    return {"resize": resize, "image_size": size, "train_input": source}


def synthetic_speed(r: Run, model, test_ds) -> float:
    """Images/s of the trained model on synthetic input (one repeated random batch per
    replica, no reading or decoding): timed over --synthetic-check-steps steps after as
    many untimed ones, through the same strategy. Real / this < 1 means the input
    pipeline holds training back. `test_ds`: the run's test input, handed back to the
    backend unread (a new one would open the test split again)."""
    from dlscale.train import training

    plan = r.plan

    def synthetic_input(context):
        return training.synthetic_dataset(r.image_shape, r.manifest["num_classes"],
                                          context.get_per_replica_batch_size(plan.global_batch),
                                          r.settings.seed,
                                          numpy=keraschoice.without_tensorflow())

    train_ds, _ = r.backend.datasets(synthetic_input, lambda *_: test_ds, plan.global_batch)
    steps = r.settings.synthetic_check_steps
    if r.backend.kind == "ddp":  # the loop that trained the point, its DDP wrapper
        return round(steps * plan.global_batch / r.backend.loop.timed_steps(
            iter(train_ds), steps), 2)
    if keraschoice.keras_version() == 3:  # one untimed epoch of fit (compiling), one timed
        keras, seconds = keraschoice.keras(), []

        class Timer(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.start = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                seconds.append(time.perf_counter() - self.start)

        model.fit(train_ds, epochs=2, steps_per_epoch=steps, verbose=0, callbacks=[Timer()])
        return round(steps * plan.global_batch / seconds[-1], 2)
    step = model.make_train_function()  # Keras' own step under the strategy, without fit
    batches = iter(train_ds)
    for _ in range(steps):  # untimed: tracing and warm-up
        logs = step(batches)
    float(logs["loss"])  # waits for the device to finish
    start = time.perf_counter()
    for _ in range(steps):
        logs = step(batches)
    float(logs["loss"])
    return round(steps * plan.global_batch / (time.perf_counter() - start), 2)
