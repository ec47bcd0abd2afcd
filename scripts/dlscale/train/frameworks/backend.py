"""Training backends: one per distribution strategy, each owning what differs between them;
here the base every framework's backend starts from, and the metrics' helpers they share.

A backend knows who this process is (rank, size, local rank), sets up the devices and
the scope models are built in, wraps the optimizer, adds the callbacks it needs, shards
the input, evaluates and reduces metrics over the workers, says whether a killed run can
resume, and adds its facts to run.json. The base is TensorFlow's way (a tf.distribute
strategy); each framework's own, in its folder beside this module, overrides what differs:
tensorflow (mirrored, multiworker), keras3 (Keras 3 on JAX: dataparallel), torch (ddp),
horovod. dlscale.train.strategies picks one.

TensorFlow is imported inside the methods, so that importing this module stays cheap.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from dlscale.train import keraschoice
from dlscale.train.cluster import worker_identity
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
        # steps without waiting for them (its backup says it is async_safe). Keras 3's epoch
        # line follows the recorder, so it says the seconds recorded (tf-keras' comes first)
        if keraschoice.keras_version() == 3:
            from dlscale.train.frameworks.keras3.keras3 import backup_callback, epoch_line

            return [recorder, epoch_line(), backup_callback(backup_dir, write=self.chief)]
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

    def gpu_peaks(self) -> tuple[list[int], str]:
        """(the peak bytes of each of this process's GPUs, what counted them)."""
        import tensorflow as tf

        return ([tf.config.experimental.get_memory_info(d.replace("/device:", ""))["peak"]
                 for d in self.devices],
                "TensorFlow's peak of the GPU (tf.config.experimental.get_memory_info)")

    def peak_memory(self) -> dict:
        """run.json's memory_gib and memory_from: the peak memory of this process's GPUs as
        its framework counts it (the largest GPU's), or on CPUs the process's peak resident
        memory; a memory_note instead where it cannot be read (the run's result stands)."""
        try:
            if self.settings.device != "gpu":
                return process_peak(len(self.devices))
            peaks, source = self.gpu_peaks()
            return {"memory_gib": round(max(peaks) / 2 ** 30, 3), "memory_from": source}
        except Exception as exc:  # a framework without the counter, a device gone ...
            return {"memory_note": f"the peak memory could not be read ({type(exc).__name__}: "
                                   f"{str(exc).strip()[:200]})"}


def process_peak(replicas: int) -> dict:
    """This process's peak resident memory (getrusage's ru_maxrss, KiB on Linux) as
    memory_gib: a CPU point's, whose replicas hold no memory of their own."""
    import resource

    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"memory_gib": round(kib / 2 ** 20, 3),
            "memory_from": f"the process's peak resident memory (ru_maxrss; a CPU point, "
                           f"{max(replicas, 1)} replica(s) in the process)"}


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
