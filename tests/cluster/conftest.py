"""The SLURM test cluster (scripts/testcluster.sh): used if running, started if possible.

In CI (.ci/run starts it) a missing cluster is a failure, never a skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import IN_CI, ROOT


def _cluster_up() -> bool:
    if not shutil.which("sinfo"):
        return False
    proc = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True)
    return proc.returncode == 0 and any(s in proc.stdout for s in (" idle", " mix", " alloc"))


@pytest.fixture(scope="session")
def slurm():
    started = False
    if not _cluster_up():
        script = ROOT / "scripts" / "testcluster.sh"
        can_start = os.geteuid() == 0 and shutil.which("slurmctld") and shutil.which("munged")
        if can_start:
            proc = subprocess.run([str(script), "start"], capture_output=True, text=True)
            started = proc.returncode == 0 and _cluster_up()
            reason = proc.stderr.strip() or proc.stdout.strip()
        else:
            reason = "needs root and Debian's slurm-wlm and munge (make sysdeps)"
        if not started:
            message = f"no SLURM test cluster: {reason}; start it with scripts/testcluster.sh start"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)
    yield
    if started:
        subprocess.run([str(ROOT / "scripts" / "testcluster.sh"), "stop"], capture_output=True)


def queue(*fields: str) -> list[list[str]]:
    """squeue rows of this user's jobs, e.g. queue("%i", "%k") -> [[id, comment], ...]."""
    proc = subprocess.run(["squeue", "-h", "--me", "-o", " ".join(fields)], capture_output=True,
                          text=True, check=True)
    return [line.split() for line in proc.stdout.splitlines() if line.strip()]
