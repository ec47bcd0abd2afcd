"""Training backends: one per distribution strategy, each owning what differs between them.

A backend knows who this process is (rank, size, local rank), sets up the devices and
the scope models are built in, wraps the optimizer, adds the callbacks it needs, shards
the input, evaluates and reduces metrics over the workers, says whether a killed run can
resume, and adds its facts to run.json. DataParallel is Keras 3 on JAX
(keras.distribution); the others are TensorFlow's, under Keras 2 or (mirrored) Keras 3.
dlscale.train.strategies picks one (PyTorch's is dlscale.train.torchddp).

TensorFlow and Horovod are imported inside the methods, so that importing this module
stays cheap.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
from pathlib import Path

from dlscale.train import keraschoice
from dlscale.train.cluster import lonely_rank, worker_identity, workers_from_slurm
from dlscale.train.training import (
    RunError,
    cuda_visible_devices,
    make_optimizer,
    make_strategy,
    setup_devices,
)


class Backend:
    kind = ""
    distribution = ""   # what spreads the replicas, as run.json names it
    test_note = None    # what the test metrics leave out, when they cannot take it all
    can_resume = True   # whether BackupAndRestore can bring a killed run back
    several_processes = False

    def __init__(self, settings):
        self.settings = settings
        self.rank, self.size, self.local_rank = self.identity()
        if self.settings.gpus % self.size:
            raise RunError(f"{self.settings.gpus} replicas cannot be shared by {self.size} "
                           "workers", 2)
        self.devices: list[str] = []
        self.strategy = None
        self.replicas = 0

    @property
    def chief(self) -> bool:
        return self.rank == 0

    def identity(self) -> tuple[int, int, int]:
        return worker_identity()

    def setup(self) -> None:
        """Make the devices visible, build the strategy, check the replicas are as asked."""
        self.devices = setup_devices(self.settings.device, self.settings.gpus // self.size,
                                     self.several_processes, self.local_rank)
        self.strategy = make_strategy(self.kind, self.devices, self.settings.device,
                                      self.settings.communication)
        self.replicas = self.strategy.num_replicas_in_sync
        if self.replicas != self.settings.gpus:
            raise RunError(
                f"{self.settings.gpus} replicas asked for but TensorFlow uses {self.replicas} "
                f"({self.size} worker(s), devices {self.devices}, "
                f"CUDA_VISIBLE_DEVICES={cuda_visible_devices()})")

    def scope(self):
        return self.strategy.scope()

    def optimizer(self, plan, schedule):
        """The optimizer, its rate following the warm-up schedule."""
        return make_optimizer(self.settings.optimizer, schedule, self.settings.momentum)

    def lr_of(self, schedule):
        """model -> the learning rate of the step it is at (for the records)."""
        return lambda model: schedule(model.optimizer.iterations)

    def callbacks(self, recorder, backup_dir: str, plan) -> list:
        keras = keraschoice.keras()
        # the recorder first, so an epoch is recorded before its backup is saved; the backup
        # outlives fit (RunRecord.write drops it once run.json is written), so a job killed
        # during the evaluation or the record resumes with every epoch done. None needs a
        # step's logs: tf-keras then calls no callback between steps, Keras 3 dispatches
        # steps without waiting for them (its backup says it is async_safe)
        if keraschoice.keras_version() == 3:
            from dlscale.train.keras3 import backup_callback

            return [recorder, backup_callback(backup_dir, write=self.chief)]
        return [recorder, keras.callbacks.BackupAndRestore(backup_dir, delete_checkpoint=False)]

    def datasets(self, train_input, test_input, global_batch: int):
        import tensorflow as tf

        self.test_batch = global_batch  # the test split's batches, as evaluate reads them
        train = self.strategy.distribute_datasets_from_function(train_input)
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.DATA
        return train, test_input(global_batch, 1, 0).with_options(options)

    def evaluate(self, model, test_ds, manifest: dict) -> dict:
        """The test split's loss and accuracy over every worker."""
        return self.reduce_test(model.evaluate(test_ds, verbose=0, return_dict=True), manifest)

    def reduce_test(self, test: dict, manifest: dict) -> dict:
        return test  # the strategy evaluated over every replica already

    saves_on_every_worker = False  # whether saving a model takes every worker

    def save_model(self, model, path: Path) -> None:
        """The chief writes `path`; where saving takes every worker, the others write to
        a folder of their own that is removed at once (TensorFlow's multi-worker recipe)."""
        if self.chief:
            model.save(str(path))
        elif self.saves_on_every_worker:
            with tempfile.TemporaryDirectory(prefix=f"worker{self.rank}-") as scratch:
                model.save(str(Path(scratch) / path.name))

    def agree(self, flag: bool) -> bool:
        """Whether any worker says so: every worker takes the same decision."""
        return bool(flag)

    def facts(self) -> dict:
        return {"strategy": self.kind, "distribution": self.distribution,
                "workers": self.size,
                "devices": list(self.strategy.extended.worker_devices), "cluster": None,
                "communication": None, "horovod": None}


class Mirrored(Backend):
    kind = "mirrored"
    distribution = "tf.distribute.MirroredStrategy"

    def __init__(self, settings):
        super().__init__(settings)
        if self.size > 1:
            raise RunError(f"strategy mirrored runs in one process, but {self.size} workers "
                           "were started: use multiworker", 2)

    def evaluate(self, model, test_ds, manifest: dict) -> dict:
        """The whole test split: the full global batches under the strategy, the last
        partial one on one device. The strategy would split that batch over the replicas,
        and a batch smaller than the replica count leaves a replica none (oneDNN's
        convolution then fails: "input depth must be evenly divisible by filter depth")."""
        images = manifest["splits"]["test"]["count"]
        full, rest = divmod(images, self.test_batch)
        if self.replicas < 2 or not rest:
            return super().evaluate(model, test_ds, manifest)
        parts = []
        if full:
            parts.append((full * self.test_batch,
                          model.evaluate(test_ds.take(full), verbose=0, return_dict=True)))
        parts.append((rest, one_device_metrics(model, test_ds.skip(full))))
        return weighed(parts)


class MultiWorker(Backend):
    kind = "multiworker"
    distribution = "tf.distribute.MultiWorkerMirroredStrategy"
    several_processes = True
    saves_on_every_worker = True

    def identity(self) -> tuple[int, int, int]:
        workers_from_slurm()
        return worker_identity()

    def agree(self, flag: bool) -> bool:
        import tensorflow as tf

        values = self.strategy.run(lambda: tf.constant(float(flag)))
        return bool(self.strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None) > 0)

    def facts(self) -> dict:
        from dlscale.train.training import resolve_communication

        return {**super().facts(),
                "cluster": json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"],
                "communication": resolve_communication(self.settings.communication,
                                                       self.settings.device)}


class Horovod(Backend):
    """One process per GPU started by horovodrun (or the site's MPI launcher); Horovod
    averages the gradients itself, so there is no tf.distribute strategy."""
    kind = "horovod"
    distribution = "horovod.tensorflow.keras"
    can_resume = False  # every rank would have to restore the same epoch (not yet)
    several_processes = True

    def identity(self) -> tuple[int, int, int]:
        try:
            import horovod.tensorflow.keras as hvd
        except ImportError as exc:
            raise RunError(f"strategy horovod needs Horovod: {exc} (make horovod builds "
                           ".venv-horovod; run train.py with its python)", 2) from exc
        if self.settings.breakdown_steps:  # the window records Horovod's timeline
            os.environ.setdefault("HOROVOD_TIMELINE", "DYNAMIC")
        hvd.init()
        if problem := lonely_rank(hvd.size(), dict(os.environ)):
            raise RunError(problem, 3)  # before any rank writes the run's state
        self.hvd = hvd
        return hvd.rank(), hvd.size(), hvd.local_rank()

    def setup(self) -> None:
        import tensorflow as tf

        self.devices = setup_devices(self.settings.device, self.settings.gpus // self.size, True,
                                     self.local_rank)
        self.strategy = tf.distribute.get_strategy()
        self.replicas = self.size
        # where the ranks ran (SLURM's node name: the test cluster's nodes share a host);
        # every rank takes part, rank 0 records it
        import horovod.tensorflow as hvd_tf

        node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
        self.nodes = sorted(set(hvd_tf.allgather_object(node)))

    def optimizer(self, plan, schedule):
        # the course's recipe: lr x size, reached by Horovod's warm-up callback. Horovod
        # 0.28 works with Keras' legacy optimizers (its warm-up callback sets the momentum
        # variable that the newer optimizers no longer have)
        return self.hvd.DistributedOptimizer(
            make_optimizer(self.settings.optimizer, plan.lr, self.settings.momentum, legacy=True))

    def lr_of(self, schedule):
        keras = keraschoice.keras()
        return lambda model: keras.backend.get_value(model.optimizer.learning_rate)

    def callbacks(self, recorder, backup_dir: str, plan) -> list:
        hvd = self.hvd
        # weights broadcast from rank 0; metrics averaged before the recorder writes them
        # (and decides on NaN: every rank sees the same average and stops at the same epoch)
        callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                     hvd.callbacks.MetricAverageCallback(), recorder]
        if plan.warmup_steps > 0:
            callbacks.append(hvd.callbacks.LearningRateWarmupCallback(
                initial_lr=plan.lr, warmup_epochs=self.settings.warmup_epochs,
                steps_per_epoch=plan.steps))
        return callbacks

    def datasets(self, train_input, test_input, global_batch: int):
        import tensorflow as tf

        context = tf.distribute.InputContext(num_input_pipelines=self.size,
                                             input_pipeline_id=self.rank,
                                             num_replicas_in_sync=self.size)
        return (train_input(context),
                test_input(self.settings.batch_per_gpu, self.size, self.rank))

    def reduce_test(self, test: dict, manifest: dict) -> dict:
        """Each rank saw its shard of the test set: weigh its metrics by its records."""
        import tensorflow as tf

        from dlscale.data.tfrecords import shard_records

        seen = float(shard_records(manifest, "test", self.size, self.rank))
        total = self.hvd.allreduce(tf.constant(seen), op=self.hvd.Sum)
        return {k: float(self.hvd.allreduce(tf.constant(v * seen), op=self.hvd.Sum) / total)
                for k, v in test.items()}

    def agree(self, flag: bool) -> bool:
        import tensorflow as tf

        return bool(self.hvd.allreduce(tf.constant(float(flag)), op=self.hvd.Sum) > 0)

    def facts(self) -> dict:
        hvd = self.hvd
        return {"strategy": self.kind, "distribution": self.distribution,
                "workers": self.size, "devices": self.devices,
                "cluster": None, "communication": "horovod",
                "horovod": {"size": hvd.size(), "local_size": hvd.local_size(),
                            "nodes": self.nodes,
                            "controller": "mpi" if hvd.mpi_enabled() else "gloo",
                            "gloo": bool(hvd.gloo_built()), "mpi": bool(hvd.mpi_built())}}


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

    def facts(self) -> dict:
        return {"strategy": self.kind, "distribution": self.distribution,
                "workers": self.size, "devices": self.devices, "cluster": None,
                "communication": None, "horovod": None}


def weighed(parts: list[tuple[int, dict]]) -> dict:
    """[(images, metrics)] -> each metric averaged over all the images."""
    total = sum(n for n, _ in parts)
    return {k: sum(n * float(m[k]) for n, m in parts) / total for k in parts[0][1]
            if all(k in m for _, m in parts)}


def one_device_metrics(model, batches) -> dict:
    """The compiled loss and accuracy over `batches`, the model called directly (in the
    strategy's cross-replica context its variables read as one copy): no replica split."""
    import numpy as np

    keras = keraschoice.keras()
    loss_of = keras.losses.get(model.loss)
    losses, hits = [], []
    for images, labels in batches:
        scores = np.asarray(model(images, training=False), dtype=np.float32)
        labels = np.asarray(labels).reshape(-1)
        losses.append(np.asarray(loss_of(labels, scores), dtype=np.float64).reshape(-1))
        hits.append(scores.argmax(axis=-1) == labels)
    return {"loss": float(np.concatenate(losses).mean()),
            "accuracy": float(np.concatenate(hits).mean())}

