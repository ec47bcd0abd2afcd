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


