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


# TensorFlow's coordination service takes a worker for failed once its heartbeats stop for
# 10 s (its default): a healthy point was lost that way when its host stalled under load
# (CI: "Unexpected heartbeat request from an already-in-error task", its telemetry showing
# a 7 s gap). JAX's distributed runtime waits 100 s; so do dlscale's workers.
HEARTBEAT_TIMEOUT_S = 100


def patient_coordination() -> None:
    """Before MultiWorkerMirroredStrategy is made: the coordination service it would set up
    (standalone, led by the chief or worker 0, over the chief and worker jobs of
    TF_CONFIG), with HEARTBEAT_TIMEOUT_S. Left alone where the process configured one, or
    where this task is neither chief nor worker (then the strategy sets none either)."""
    import tensorflow as tf
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.eager import context

    ctx = context.context()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    jobs = [job for job in ("chief", "worker") if job in spec.jobs]
    if ctx.coordination_service is not None or resolver.task_type not in jobs:
        return
    ctx.configure_coordination_service(
        service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=[context.coordination_config_pb2.CoordinatedJob(
            name=job, num_tasks=spec.num_tasks(job)) for job in jobs],
        heartbeat_timeout_in_ms=HEARTBEAT_TIMEOUT_S * 1000)
