"""A run's input: the training and test input functions the backend distributes, and
where the images come from (the shards, memory, or one synthetic batch)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dlscale.driver import Run


def inputs(r: Run, epochs_done: int = 0):
    """(train input function of an InputContext, test input of (batch, shards, index));
    the training input begins where `epochs_done` epochs of a resumed run left it."""
    from dlscale import training as T
    from dlscale.tfrecords import make_dataset

    settings, manifest, plan = r.settings, r.manifest, r.plan
    def train_input(context):
        batch = context.get_per_replica_batch_size(plan.global_batch)
        seed = settings.seed + context.input_pipeline_id
        # each step takes a batch per replica of this pipeline's worker
        taken = epochs_done * plan.steps * (context.num_replicas_in_sync
                                            // context.num_input_pipelines)
        if settings.synthetic:
            return T.synthetic_dataset(r.image_shape, manifest["num_classes"], batch, seed)
        return make_dataset(settings.data_dir, "train", batch, training=True, seed=seed,
                            shuffle_buffer=settings.shuffle_buffer,
                            num_shards=context.num_input_pipelines,
                            shard_index=context.input_pipeline_id, skip_batches=taken,
                            cache=in_memory(settings, manifest, context.num_input_pipelines,
                                            context.input_pipeline_id))

    def test_input(batch, shards, index):
        return make_dataset(settings.data_dir, "test", batch, training=False, num_shards=shards,
                            shard_index=index)

    return train_input, test_input


def in_memory(settings, manifest: dict, pipelines: int, index: int) -> bool:
    """Whether input pipeline `index` of `pipelines` holds its decoded training images in
    memory (they take at most --cache-mb) instead of reading the shards every epoch."""
    from dlscale.tfrecords import split_bytes

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
              else "memory" if in_memory(settings, manifest, backend.size, backend.rank)
              else "files")
    return {"resize": resize, "image_size": size, "train_input": source}
