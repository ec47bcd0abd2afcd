"""PyTorch as a backend (training.backend: torch, strategy ddp): one process per GPU (or
per CPU replica), `torch.distributed` over NCCL on GPUs and gloo on CPUs, the Keras 3
model wrapped in `DistributedDataParallel` by the loop (dlscale.train.frameworks.torch.torchloop).

Ranks are found as SLURM sites start them (`srun`, one task per GPU: rank, world size
and the master address from SLURM's variables, through the TF_CONFIG the other
multi-process backends read) or as launch.py starts local workers (TF_CONFIG): the first
worker's address is the rendezvous (`init_method tcp://`), as torchrun's MASTER_ADDR and
MASTER_PORT are. Each rank reads its own shard of every epoch with dlscale's reader (no
TensorFlow in the process) and evaluates its shard of the test split; the chief writes.
torch is imported inside the methods, after keraschoice chose Keras' backend.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import timedelta

from dlscale.core.vocabulary import THREADS_ENV
from dlscale.train import keraschoice
from dlscale.train.cluster import worker_identity, workers_from_slurm
from dlscale.train.frameworks.backend import Backend
from dlscale.train.frameworks.torch.torchloop import means, on_device, tally
from dlscale.train.training import RunError, cuda_visible_devices

# how long a rank waits for the others at the rendezvous and in a collective
TIMEOUT_S = 600


def local_rank_and_size(workers: list[str], rank: int) -> tuple[int, int]:
    """(this worker's index among the workers of its host, how many that host runs)."""
    hosts = [w.rsplit(":", 1)[0] for w in workers]
    mine = hosts[rank]
    return hosts[:rank].count(mine), hosts.count(mine)


class DDP(Backend):
    kind = "ddp"
    distribution = "torch.nn.parallel.DistributedDataParallel"
    several_processes = True
    loop = None  # the TorchLoop training the point (the synthetic check steps it again)
    input_workers = 0  # the DataLoader's worker processes reading the training batches
    lr = float("nan")  # the loop's rate of the step it is at (the epoch records')

    def identity(self) -> tuple[int, int, int]:
        workers_from_slurm()
        rank, size, _ = worker_identity()
        self.workers = (json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
                        if os.environ.get("TF_CONFIG") else ["localhost:0"])
        local, self.local_size = local_rank_and_size(self.workers, rank)
        return rank, size, local

    @property
    def communication(self) -> str:
        return "nccl" if self.settings.device == "gpu" else "gloo"

    def setup(self) -> None:
        import torch

        if self.settings.device == "gpu":
            if not torch.cuda.is_available():
                raise RunError(f"{self.settings.gpus} GPU(s) asked for but PyTorch sees none "
                               f"(CUDA_VISIBLE_DEVICES={cuda_visible_devices()}); use device: "
                               "cpu to run replicas on CPUs")
            count = torch.cuda.device_count()
            index = self.local_rank if count > 1 else 0
            if index >= count:
                raise RunError(f"worker {self.local_rank} on this node has no GPU: PyTorch sees "
                               f"{count}, CUDA_VISIBLE_DEVICES={cuda_visible_devices()}")
            torch.cuda.set_device(index)
            self.torch_device = f"cuda:{index}"
        else:  # the cores of this task: SLURM's, those Snakemake granted the point shared
            # by its workers (launch.py --threads), or this host's shared by its workers
            given = (os.environ.get("SLURM_CPUS_PER_TASK", ""),
                     os.environ.get(THREADS_ENV, ""))
            cores = next((int(v) for v in given if v.isdigit()),
                         len(os.sched_getaffinity(0)) // self.local_size)
            torch.set_num_threads(max(1, cores))
            self.torch_device = "cpu"
        self.devices = [self.torch_device]
        if self.size > 1:
            import torch.distributed as dist

            dist.init_process_group(self.communication, init_method=f"tcp://{self.workers[0]}",
                                    rank=self.rank, world_size=self.size,
                                    timeout=timedelta(seconds=TIMEOUT_S))
        self.replicas = self.size
        if self.replicas != self.settings.gpus:
            raise RunError(f"{self.settings.gpus} replicas asked for but {self.size} process(es) "
                           "were started: a ddp point runs one process per GPU", 2)

    def scope(self):
        return contextlib.nullcontext()

    def optimizer(self, plan, schedule):
        return "sgd"  # compile's; the loop trains with torch's (torchloop.make_optimizer)

    def lr_of(self, schedule):
        return lambda model: self.lr

    def callbacks(self, recorder, backup_dir: str, plan) -> list:
        return [recorder]  # the loop saves its backup after every epoch itself

    def datasets(self, train_input, test_input, global_batch: int):
        """This rank's own input pipeline (numpy batches of batch_per_gpu) and its shard
        of the test split."""
        from dlscale.data.shardreader import Pipeline, Reader

        context = Pipeline(num_input_pipelines=self.size, input_pipeline_id=self.rank,
                           num_replicas_in_sync=self.size)
        self.test_batch = global_batch // self.size
        train = train_input(context)
        if self.settings.num_workers and isinstance(train, Reader):  # not the synthetic one
            from dlscale.train.frameworks.torch.loader import loader

            train = loader(train, self.settings.num_workers, self.settings.device == "gpu")
            self.input_workers = train.num_workers
        return train, test_input(self.test_batch, self.size, self.rank)

    def all_sum(self, tensor):
        """The sum of `tensor` over the ranks (itself on one)."""
        if self.size > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def evaluate(self, model, test_ds, manifest: dict) -> dict:
        """The test split's loss and accuracy over every rank's shard, weighed by images."""
        import torch

        loss_of = keraschoice.keras().losses.SparseCategoricalCrossentropy()  # compile's
        totals = torch.zeros(3, dtype=torch.float64, device=self.torch_device)
        with torch.no_grad():
            for images, labels in test_ds:
                x, y = on_device(images, labels, self.torch_device)
                probabilities = model(x, training=False)
                totals += tally(loss_of(y, probabilities), probabilities, y)
        return means(self.all_sum(totals))

    def agree(self, flag: bool) -> bool:
        import torch

        return bool(self.all_sum(torch.tensor([float(flag)], device=self.torch_device)) > 0)

    def gpu_peaks(self) -> tuple[list[int], str]:
        import torch

        return ([torch.cuda.max_memory_reserved(self.torch_device)],
                "torch.cuda.max_memory_reserved (PyTorch's caching allocator)")

    def facts(self) -> dict:
        return {"strategy": self.kind, "distribution": self.distribution,
                "workers": self.size, "devices": self.devices,
                "cluster": self.workers if self.size > 1 else None,
                "communication": self.communication, "horovod": None,
                "input_workers": self.input_workers,
                "torch_compile": self.loop.compiled if self.loop else None}
