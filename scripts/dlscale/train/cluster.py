"""Who this worker is in a multi-worker run: TF_CONFIG from SLURM's variables, and the
worker's index, count and local index from TF_CONFIG or SLURM.
"""

from __future__ import annotations

import json
import os

from dlscale.core.errors import RunError
from dlscale.jobs import slurm


def slurm_tf_config(env: dict[str, str]) -> dict:
    """TF_CONFIG for the task `srun` started: one worker per task, ports distinct per
    task (so that several tasks, or several nodes sharing one address, never collide)."""
    hosts = slurm.hostnames(env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"])
    per_node = slurm.expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE")
                                     or env["SLURM_TASKS_PER_NODE"])
    if len(per_node) != len(hosts):
        raise RunError(f"SLURM lists {len(hosts)} nodes ({', '.join(hosts)}) but tasks "
                       f"per node for {len(per_node)}")
    base = int(env.get("DLSCALE_PORT_BASE") or 12000 + int(env.get("SLURM_JOB_ID", 0)) % 1000 * 50)
    workers, rank = [], 0
    for host, count in zip(hosts, per_node):
        for _ in range(count):
            workers.append(f"{host}:{base + rank}")
            rank += 1
    return {"cluster": {"worker": workers},
            "task": {"type": "worker", "index": int(env["SLURM_PROCID"])}}


def workers_from_slurm() -> None:
    """Under srun with no TF_CONFIG of its own: TF_CONFIG from SLURM's variables, which
    the multi-process backends (MultiWorkerMirroredStrategy, PyTorch's DDP) then read."""
    if not os.environ.get("TF_CONFIG") and "SLURM_PROCID" in os.environ:
        os.environ["TF_CONFIG"] = json.dumps(slurm_tf_config(dict(os.environ)))


def worker_identity() -> tuple[int, int, int]:
    """(task index, number of workers, local index on the node) from TF_CONFIG or SLURM."""
    if os.environ.get("TF_CONFIG"):
        config = json.loads(os.environ["TF_CONFIG"])
        index = int(config["task"]["index"])
        return index, len(config["cluster"]["worker"]), int(os.environ.get("SLURM_LOCALID", 0))
    if "SLURM_PROCID" in os.environ and "SLURM_STEP_ID" in os.environ:
        return (int(os.environ["SLURM_PROCID"]), int(os.environ.get("SLURM_NTASKS", 1)),
                int(os.environ.get("SLURM_LOCALID", 0)))
    return 0, 1, 0


# what MPI launchers tell each rank of the world they started (OpenMPI, MPICH/PMI, MVAPICH)
LAUNCHED_SIZE = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


def lonely_rank(size: int, env: dict[str, str]) -> str | None:
    """Why a rank that sees `size` ranks was started as one of more, or None: a Horovod
    built without MPI (Gloo only) under mpirun trains each rank alone, and every rank would
    take itself for the chief and write the run's state."""
    for name in LAUNCHED_SIZE:
        if env.get(name, "").isdigit() and int(env[name]) > size:
            return (f"the launcher started {env[name]} ranks ({name}) but Horovod sees {size}: "
                    "each would train alone. Horovod built without MPI (Gloo only) does this "
                    "under mpirun; build it with MPI (make horovod, where mpicc is installed)")
    return None
