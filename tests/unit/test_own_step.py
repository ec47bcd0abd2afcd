"""The job step of its own a point's launcher runs as under proctrack/cgroup
(dlscale.jobs.slurm.own_step_command, dlscale.launch.launcher.as_own_step): when, and with what."""

import json
from pathlib import Path

import pytest

from dlscale.jobs import slurm

CGROUPS = Path(__file__).parents[1] / "data" / "cgroup"


@pytest.mark.parametrize("name, tracked", [
    ("batch-step.txt", True), ("step-0.txt", True), ("outside-slurm.txt", False)])
def test_a_job_steps_cgroup_is_recognised_from_procs_own_text(name, tracked):
    assert slurm.tracked_by_cgroup((CGROUPS / name).read_text()) is tracked


def test_a_job_under_cgroup_tracking_runs_the_launcher_as_a_step_of_its_own(monkeypatch):
    monkeypatch.setattr(slurm, "tracked_by_cgroup", lambda: True)
    env = {"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "6", "PATH": "/bin"}
    command, step_env = slurm.own_step_command(["python", "launch.py", "--record", "r"],
                                               env, "dlscale-launch-1")
    assert command == ["srun", "--ntasks=1", "--nodes=1", "--overlap", "--export=ALL",
                       "--job-name=dlscale-launch-1", "--cpus-per-task=6",
                       "python", "launch.py", "--record", "r"]
    assert json.loads(step_env[slurm.OWN_STEP_ENV]) == env
    # inside the step: the environment it was started from, srun's additions gone
    inside = dict(step_env, SLURM_STEP_ID="3", SLURM_NTASKS="1", SLURM_CPUS_PER_TASK="6")
    assert slurm.from_own_step(inside) == dict(env, DLSCALE_JOB_STEP="3")
    # ... and it does not start a step again
    assert slurm.own_step_command(["python"], inside, "x") is None


def test_no_step_of_its_own_outside_slurm_or_under_linuxproc(monkeypatch):
    monkeypatch.setattr(slurm, "tracked_by_cgroup", lambda: False)
    assert slurm.own_step_command(["python"], {"SLURM_JOB_ID": "7"}, "x") is None
    monkeypatch.setattr(slurm, "tracked_by_cgroup", lambda: True)
    assert slurm.own_step_command(["python"], {"PATH": "/bin"}, "x") is None
