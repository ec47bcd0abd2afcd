"""Keras 3 on JAX as a backend: keras.distribution.DataParallel over one process's devices,
jax.distributed across nodes, the input read without TensorFlow
(dlscale.data.shardreader). dlscale.train.strategies registers it.

JAX is imported inside the methods, so that importing this module stays cheap.
"""

from __future__ import annotations

import json
import os
import sys

from dlscale.train import keraschoice
from dlscale.train.cluster import worker_identity
from dlscale.train.frameworks.backend import Backend, weighed
from dlscale.train.training import RunError, cuda_visible_devices


class DataParallel(Backend):
    """Keras 3 on JAX: one process per node holds its replicas (GPUs, or XLA host devices
    on CPUs, which keraschoice.use_keras asked for), keras.distribution.DataParallel splits every
    global batch over all of them. Several processes (nodes) meet through
    jax.distributed: under srun it reads SLURM's tasks itself; outside SLURM (launch.py's
    local workers) the first worker of TF_CONFIG is the coordinator. Every process reads
    the same global batches and Keras keeps each process's share. tf.data only reads:
    TensorFlow is kept off the GPUs, which JAX owns."""
    kind = "dataparallel"
    distribution = "keras.distribution.DataParallel"

    def identity(self) -> tuple[int, int, int]:
        rank, size, local = worker_identity()
        if size == 1:
            return rank, size, local
        import jax

        if os.environ.get("TF_CONFIG"):
            workers = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
            jax.distributed.initialize(coordinator_address=workers[0], num_processes=size,
                                       process_id=rank)
        else:
            jax.distributed.initialize()
        return jax.process_index(), jax.process_count(), local

    def agree(self, flag: bool) -> bool:
        if self.size == 1:
            return bool(flag)
        import numpy as np
        from jax.experimental import multihost_utils

        return bool(np.sum(multihost_utils.process_allgather(np.array([float(flag)]))) > 0)

    def setup(self) -> None:
        import jax

        if "tensorflow" in sys.modules:  # imported by something of yours (dlscale's
            import tensorflow as tf  # seeding keeps it out): never on the GPUs, JAX's

            tf.config.set_visible_devices([], "GPU")
        keras = keraschoice.keras()
        platform = "gpu" if self.settings.device == "gpu" else "cpu"
        try:
            found = jax.devices(platform)
        except RuntimeError as exc:  # no GPU backend: JAX says which platforms it has
            raise RunError(f"{self.settings.gpus} GPU(s) asked for but JAX has none ({exc}, "
                           f"CUDA_VISIBLE_DEVICES={cuda_visible_devices()}); use device: "
                           "cpu to run replicas on CPUs") from None
        if len(found) < self.settings.gpus:
            raise RunError(f"{self.settings.gpus} replicas asked for but JAX sees "
                           f"{len(found)} {platform} device(s) "
                           f"(CUDA_VISIBLE_DEVICES={cuda_visible_devices()}, XLA_FLAGS="
                           f"{os.environ.get('XLA_FLAGS', '<unset>')})")
        self.jax_devices = found[:self.settings.gpus]
        self.devices = [f"{d.platform}:{d.id}" for d in self.jax_devices]
        if len(self.jax_devices) > 1:
            keras.distribution.set_distribution(keras.distribution.DataParallel(
                devices=self.jax_devices, auto_shard_dataset=False))  # ours: `local`
        else:  # a distribution over one device made JAX compile epoch 2's step again
            self.distribution = "none (one device)"
        self.replicas = len(self.jax_devices)
        if self.size > 1:  # the chief has readied the state (open_state) before any restore
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("dlscale: state ready")

    def scope(self):
        import contextlib

        return contextlib.nullcontext()

    def datasets(self, train_input, test_input, global_batch: int):
        """One input pipeline of global batches, numpy arrays read without TensorFlow
        (shardreader); Keras shards each batch over the devices."""
        from dlscale.data.shardreader import Pipeline

        self.test_batch = global_batch
        return self.local(train_input(Pipeline())), test_input(global_batch, 1, 0)

    def local(self, batches):
        """This process's part of each global batch, as Keras' own sharding of a tf.data
        input cuts it (rebatch into one part per process, then every process its own):
        the same images wherever the processes run."""
        if self.size == 1:
            yield from batches
            return
        for batch in batches:
            part = len(batch[1]) // self.size
            yield tuple(a[self.rank * part:(self.rank + 1) * part] for a in batch)

    def evaluate(self, model, test_ds, manifest: dict) -> dict:
        """The whole test split: the batches that divide over the devices under the
        distribution, the rest (JAX cannot shard it) on one device, weighed by images."""
        import itertools

        import numpy as np

        keras = keraschoice.keras()
        images = manifest["splits"]["test"]["count"]
        batch = self.test_batch
        full = images // batch
        rest = images - full * batch
        if self.size > 1 and rest:  # no process holds the whole model to evaluate them on
            self.test_note = (f"test loss and accuracy over {full * batch} of the {images} "
                              f"test images: the last {rest} do not divide over "
                              f"{self.size} processes")
            rest = 0
        parts = []
        if full:  # whole batches (the test reader's, in order), split over the devices
            whole = self.local(itertools.islice(test_ds, full))  # Keras takes generators
            parts.append((full * batch, model.evaluate(whole, steps=full, verbose=0,
                                                       return_dict=True)))
        if rest:
            last, labels = test_ds.gather(np.arange(full * batch, images))
            distribution = keras.distribution.distribution()
            keras.distribution.set_distribution(None)
            try:
                parts.append((rest, model.evaluate(last, labels, batch_size=rest, verbose=0,
                                                   return_dict=True)))
            finally:
                keras.distribution.set_distribution(distribution)
        return weighed(parts)

    def gpu_peaks(self) -> tuple[list[int], str]:
        return ([d.memory_stats()["peak_bytes_in_use"] for d in self.jax_devices],
                "JAX's peak_bytes_in_use of the device (memory_stats)")

    def facts(self) -> dict:
        return {"strategy": self.kind, "distribution": self.distribution,
                "workers": self.size, "devices": self.devices, "cluster": None,
                "communication": None, "horovod": None}
