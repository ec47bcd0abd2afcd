"""Horovod as a backend: horovod.tensorflow.keras, one process per GPU started by
horovodrun or the site's MPI launcher; its window's timeline is read by
dlscale.measure.hvdtimeline. dlscale.train.strategies registers it.

Horovod and TensorFlow are imported inside the methods, so that importing this module
stays cheap.
"""

from __future__ import annotations

import os
import socket

from dlscale.train import keraschoice
from dlscale.train.cluster import lonely_rank
from dlscale.train.frameworks.backend import Backend
from dlscale.train.training import RunError, make_optimizer, setup_devices


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
