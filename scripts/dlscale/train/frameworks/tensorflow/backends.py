"""TensorFlow's strategies under Keras 2 (tf-keras) or, for mirrored, Keras 3 on
TensorFlow: MirroredStrategy in one process, MultiWorkerMirroredStrategy over several
(TF_CONFIG from SLURM). What they share with the other frameworks is the base
(dlscale.train.frameworks.backend); dlscale.train.strategies picks one.

TensorFlow is imported inside the methods, so that importing this module stays cheap.
"""

from __future__ import annotations

import json
import os

from dlscale.train.cluster import worker_identity, workers_from_slurm
from dlscale.train.frameworks.backend import Backend, one_device_metrics, weighed
from dlscale.train.training import RunError


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
