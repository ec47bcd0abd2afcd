"""How a point's workers start: Horovod's ranks (horovodrun on one node, the site's MPI
launcher across nodes), local processes with TF_CONFIG outside SLURM, and what their
environment is told (NCCL's debug lines, the cores granted to each)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
from pathlib import Path

from dlscale.core.vocabulary import THREADS_ENV
from dlscale.jobs import slurm
from dlscale.jobs.locks import reserve_ports
from dlscale.jobs.processes import spawn

MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun")


def nccl_debug_env(out: Path, env: dict) -> dict:
    """NCCL_DEBUG=INFO for NCCL's set-up and network lines, one file per host and process
    in the run folder (dlscale.logparse.nccldebug reads them); {} where the user set
    NCCL_DEBUG: theirs is kept."""
    from dlscale.core.contract import NCCL_DEBUG_FILE

    if "NCCL_DEBUG" in env:
        return {}
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET",
            "NCCL_DEBUG_FILE": str(Path(out).resolve() / NCCL_DEBUG_FILE)}


def threads_env(granted: int | None, tasks: int, env: dict) -> dict:
    """{THREADS_ENV: each worker's share} of the cores Snakemake granted the point
    (launch.py --threads; profiles/local caps a point's `threads` at its cores) outside
    SLURM, whose SLURM_CPUS_PER_TASK says it inside a job; {} where nothing was granted."""
    if not granted or env.get("SLURM_JOB_ID"):
        return {}
    return {THREADS_ENV: str(max(1, granted // tasks))}


def is_mpirun(mpi_launcher: str | None) -> bool:
    """Whether the launcher is MPI's own (mpirun, mpiexec): it is given -np, and OpenMPI's
    needs the SLURM allocation in its environment (mpi_allocation)."""
    return bool(mpi_launcher) and os.path.basename(shlex.split(mpi_launcher)[0]) in MPI_LAUNCHERS


def horovod_command(tasks: int, nodes: int, command: list[str], mpi_launcher: str | None,
                    tasks_per_node: int | None = None) -> list[str]:
    """Horovod's ranks: horovodrun with Gloo on one node; across nodes the site's MPI
    launcher, given the number of ranks (mpirun/mpiexec: -np; srun: --ntasks) unless it
    is another launcher, which is used as written."""
    if nodes > 1:
        if not mpi_launcher:
            raise SystemExit("error: Horovod across nodes needs Horovod built with MPI and "
                             "the site's MPI launcher: set horovod.mpi_launcher, e.g. "
                             "'mpirun' or 'srun --mpi=pmix'")
        launcher = shlex.split(mpi_launcher)
        if is_mpirun(mpi_launcher):
            launcher += ["-np", str(tasks)]
        elif slurm.is_srun(launcher):
            launcher += slurm.srun_task_flags(tasks, tasks_per_node)
        return launcher + command
    horovodrun = os.path.join(os.path.dirname(command[0]), "horovodrun")
    if not os.path.exists(horovodrun):
        raise SystemExit(f"error: {horovodrun} not found: the command's python must be the "
                         "Horovod environment's (make horovod)")
    return [horovodrun, "--gloo", "-np", str(tasks), "-H", f"localhost:{tasks}"] + command


def local_workers(tasks: int, command: list[str]) -> list[subprocess.Popen]:
    """N processes on this machine, TF_CONFIG naming ports reserved for them."""
    workers = [f"localhost:{port}" for port in reserve_ports(tasks)]
    procs = []
    for index in range(tasks):
        tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(tf_config))
        procs.append(spawn(command, env=env))
    return procs


def first_failure(procs: list[subprocess.Popen]) -> int | None:
    """The index of the worker whose end is the point's among those that failed, or None:
    one killed by a signal before one that exited with an error, as a peer's loss fails
    the others' collectives (gloo's "Connection reset by peer") and they exit with that
    error, often within the same poll; SIGABRT counts as an error (NCCL's watchdog aborts
    a rank whose peer is gone). Else the first in rank order."""
    failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
    return min(failed, key=lambda i: not (procs[i].returncode < 0
                                          and procs[i].returncode != -signal.SIGABRT),
               default=None)
