"""The SLURM allocation as a job's batch script sees it.

Snakemake's SLURM job-step executor removes the SLURM_* variables from the job's
environment before it runs a rule (it keeps SLURM_JOB_ID). Launchers started inside the
rule then see no allocation: OpenMPI's mpirun reads it from SLURM_NODELIST and
SLURM_TASKS_PER_NODE, and a user's `srun` without -n starts one task instead of the
job's. `slurm_allocation` puts back what they read, the nodes from squeue.
"""

from __future__ import annotations

import subprocess


def slurm_allocation(env: dict, nodes: int, tasks_per_node: int | None,
                     task_count: bool = False) -> dict:
    """`env` with the job's nodes, node count and (given) tasks per node put back, and
    with `task_count` the number of tasks (srun's default -n); `env` itself outside a
    SLURM job or when they are there."""
    job = env.get("SLURM_JOB_ID")
    if not job or env.get("SLURM_NODELIST"):
        return env
    try:
        nodelist = subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"], capture_output=True,
                                  text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise SystemExit(f"error: cannot read the nodes of SLURM job {job} "
                         f"(squeue: {exc})") from exc
    env = dict(env, SLURM_NODELIST=nodelist, SLURM_JOB_NODELIST=nodelist,
               SLURM_NNODES=str(nodes), SLURM_JOB_NUM_NODES=str(nodes))
    if tasks_per_node:
        env["SLURM_TASKS_PER_NODE"] = f"{tasks_per_node}(x{nodes})"
        if task_count:
            env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(tasks_per_node * nodes)
    return env
