"""Every word dlscale says to SLURM, and how it reads the answers.

dlscale does not submit jobs (the Snakemake SLURM plugin runs sbatch); inside and around
them it asks the controller (squeue, scontrol), the accounting (sacct) and starts job
steps (srun). Those calls and their parsing live here only, so that a site's SLURM
version or time format is dealt with once:

- every call has a timeout and fails as `SlurmError` (an OSError) in one line naming
  the command, or answers None/{} where "SLURM cannot say" is an answer;
- times are asked for as epoch seconds (SLURM_TIME_FORMAT=%s), so no time zone or
  site format is guessed;
- Snakemake's job step drops the SLURM_* variables of the job; `allocation_env` puts
  back what launchers (OpenMPI's mpirun, a user's srun) read from them;
- under proctrack/cgroup a point's launcher runs as a job step of its own
  (`own_step_command`), since only the tasks of steps get a job's SIGTERM there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from dlscale.core.columns import ACCOUNTED_COLUMNS as ACCOUNTED
from dlscale.core.errors import RunError

# how long a query waits for the controller: one that does not answer (a login node
# during maintenance, a configuration left behind) must not hold anything up for long
TIMEOUT_S = 10.0
# squeue/sacct print times as epoch seconds with this (strftime's %s): no time zone
EPOCH_TIME_FORMAT = "%s"
# job states that still hold or will hold an allocation (squeue's long names)
ACTIVE_STATES = frozenset({
    "PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
    "REQUEUE_FED", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
    "RESV_DEL_HOLD", "SPECIAL_EXIT"})
# SLURM's client with no cluster configured: not an error, there is no SLURM here
NO_CONFIGURATION = "Could not establish a configuration source"


class SlurmError(OSError):
    """A SLURM command could not be run or did not answer; the message names it."""


def available(command: str = "squeue") -> bool:
    return shutil.which(command) is not None


def query(args: list[str], timeout: float = TIMEOUT_S, label: str | None = None) -> str:
    """The standard output of a SLURM client command; SlurmError naming the command (or
    `label`) and SLURM's last line of complaint when it cannot be run, times out or fails."""
    env = dict(os.environ, SLURM_TIME_FORMAT=EPOCH_TIME_FORMAT)
    shown = label or " ".join(args)
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"{shown} did not answer within {timeout:g} s (is the SLURM "
                         "controller reachable?)") from None
    except OSError as exc:
        raise SlurmError(f"{shown} could not be run ({exc.strerror or exc})") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise SlurmError(f"{shown} exited {proc.returncode}: {why}")
    return proc.stdout


# --- hostlists and tasks per node (SLURM's own grammar) ----------------------------------
def hostnames(hostlist: str) -> list[str]:
    """'gpu[01-02,05],login1' -> ['gpu01', 'gpu02', 'gpu05', 'login1'] (as `scontrol show
    hostnames`, which is used when available)."""
    try:
        if names := query(["scontrol", "show", "hostnames", hostlist]).split():
            return names
    except SlurmError:
        pass
    return parse_hostlist(hostlist)


def parse_hostlist(hostlist: str) -> list[str]:
    """SLURM's hostlist grammar without scontrol: comma-separated names, each with any
    number of [ranges] anywhere in it ('n[1-2]-ib', 'r[1-2]n[01-02]')."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(hostlist + ","):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            if hostlist[start:i]:
                items.append(hostlist[start:i])
            start = i + 1
    if depth:
        raise RunError(f"cannot read the hostlist '{hostlist}': unbalanced brackets")
    return [host for item in items for host in _expand_item(item)]


def _expand_item(item: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", item)
    if match is None:
        return [item]
    head, tail = item[:match.start()], _expand_item(item[match.end():])
    hosts = []
    for part in match.group(1).split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise RunError(f"cannot read the range '{part}' in the hostlist item '{item}'")
        for number in range(int(lo), int(hi or lo) + 1):
            hosts += [f"{head}{number:0{len(lo)}d}{rest}" for rest in tail]
    return hosts


def expand_tasks_per_node(spec: str) -> list[int]:
    """SLURM_STEP_TASKS_PER_NODE '2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise ValueError(f"cannot read tasks per node '{spec}'")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def parse_duration(text: str) -> float | None:
    """squeue's and sacct's durations ([days-][hours:]minutes:seconds[.fraction]) in
    seconds; None for UNLIMITED, NOT_SET and anything else."""
    match = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)", text.strip())
    if not match:
        return None
    days, hours, minutes, seconds = (float(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


# --- one job -----------------------------------------------------------------------------
def _job_field(job: str, field: str) -> str:
    """squeue's `field` (e.g. %L) for job `job`; SlurmError when it does not say."""
    out = query(["squeue", "-h", "-j", str(job), "-o", field]).strip()
    if not out:
        raise SlurmError(f"squeue -j {job} knows no such job")
    return out.splitlines()[0]


def time_left(job: str) -> float | None:
    """Seconds until SLURM ends the job (squeue's %L); None for no limit. SlurmError when
    squeue cannot say."""
    return parse_duration(_job_field(job, "%L"))


def job_start(job: str) -> float | None:
    """When the job started (squeue's %S, epoch seconds), or None when squeue cannot say."""
    try:
        return float(_job_field(job, "%S"))
    except (SlurmError, ValueError):
        return None


def job_submitted(job: str) -> float | None:
    """When the job was submitted (squeue's %V, epoch seconds), or None."""
    try:
        return float(_job_field(job, "%V"))
    except (SlurmError, ValueError):
        return None


def job_nodes(job: str) -> str:
    """The job's nodes as a hostlist (squeue's %N)."""
    return _job_field(job, "%N")


def restarts(job: str) -> int:
    """How many times SLURM has requeued job `job` ($SLURM_RESTART_COUNT, which the
    Snakemake SLURM plugin's job step drops, else scontrol's Restarts=); 0 when neither
    can tell."""
    count = os.environ.get("SLURM_RESTART_COUNT", "").strip()
    if count.isdigit():
        return int(count)
    try:
        shown = query(["scontrol", "show", "job", "-o", str(job)])
    except SlurmError:
        return 0
    match = re.search(r"\bRestarts=(\d+)", shown)
    return int(match.group(1)) if match else 0


def job_state(job: str) -> str | None:
    """Job `job`'s state's first word (CANCELLED, TIMEOUT, NODE_FAIL, ...): the
    controller's (it keeps an ended job for MinJobAge, 300 s by default, and a job's node
    reaches it), else the accounting's (which a node may not reach); None where neither
    knows the job."""
    try:
        match = re.search(r"\bJobState=(\S+)", query(["scontrol", "show", "job", "-o", job]))
        if match:
            return match.group(1)
    except SlurmError:
        pass
    return accounting(job)[0].get("sacct_state")


# --- this user's jobs --------------------------------------------------------------------
def my_jobs(timeout: float = TIMEOUT_S) -> list[dict]:
    """This user's queued and running jobs: job, state, reason, workdir and comment each.
    [] where SLURM's client has no cluster configured; SlurmError when squeue fails."""
    try:
        out = query(["squeue", "-h", "--me", "-o", "%i|%T|%r|%Z|%k"], timeout, "squeue")
    except SlurmError as exc:
        if NO_CONFIGURATION in str(exc):
            return []
        raise
    jobs = []
    for line in out.splitlines():
        parts = line.split("|", 4)
        if len(parts) == 5:
            jobs.append(dict(zip(("job", "state", "reason", "workdir", "comment"), parts)))
    return jobs


def active_jobs(timeout: float = TIMEOUT_S) -> dict[str, str] | None:
    """{job id: state} of this user's jobs that hold or wait for an allocation; None when
    squeue cannot say (no SLURM here, or no answer)."""
    if not available():
        return None
    try:
        return {j["job"]: j["state"] for j in my_jobs(timeout) if j["state"] in ACTIVE_STATES}
    except SlurmError:
        return None


# --- job steps and the allocation --------------------------------------------------------
def is_srun(launcher: list[str]) -> bool:
    """Whether a launcher's words (e.g. the site's MPI launcher) start SLURM's srun."""
    return bool(launcher) and os.path.basename(launcher[0]) == "srun"


def srun_task_flags(tasks: int, tasks_per_node: int | None) -> list[str]:
    """srun's flags for `tasks` tasks, the step ended whole when one task fails."""
    return [f"--ntasks={tasks}", "--kill-on-bad-exit=1"] + (
        [f"--ntasks-per-node={tasks_per_node}"] if tasks_per_node else [])


def srun_command(tasks: int, tasks_per_node: int | None, command: list[str]) -> list[str]:
    """One job step of `tasks` tasks running `command` with the job's environment."""
    return ["srun", *srun_task_flags(tasks, tasks_per_node), "--export=ALL", *command]


# Set in the environment of a process that runs as the one task of a job step of its
# own (own_step_command): the JSON of the environment it was started from, to put back.
OWN_STEP_ENV = "DLSCALE_OWN_STEP_FROM"
# a job step's cgroup under proctrack/cgroup (/proc/<pid>/cgroup): .../job_<id>/step_<id>
STEP_CGROUP = re.compile(r"/job_\d+/step_")


def own_step_command(command: list[str], env: dict, name: str) -> tuple[list[str], dict] | None:
    """`command` as the one task of a job step of its own named `name`, sharing the CPUs,
    memory and GPUs of the step it is started from (`srun --overlap`): (command,
    environment); None outside a SLURM job or when `env` is already such a step's.

    Why: a job's end (scancel, requeue, preemption, the time limit) sends SIGTERM, before
    the SIGKILL `KillWait` seconds later, to each step's tasks only under
    proctrack/cgroup; a process further down (the Snakemake plugin's job step runs
    Snakemake as the task, and Snakemake the rule's command) gets the SIGKILL only, and
    cannot say how it ended (docs/slurm.md)."""
    if not env.get("SLURM_JOB_ID") or OWN_STEP_ENV in env or not tracked_by_cgroup():
        return None
    cpus = env.get("SLURM_CPUS_PER_TASK") or env.get("SLURM_CPUS_ON_NODE") or ""
    flags = ["--ntasks=1", "--nodes=1", "--overlap", "--export=ALL", f"--job-name={name}"]
    flags += [f"--cpus-per-task={cpus}"] if cpus.isdigit() else []
    return ["srun", *flags, *command], dict(env, **{OWN_STEP_ENV: json.dumps(env)})


def tracked_by_cgroup(text: str | None = None) -> bool:
    """Whether this process (or the `text` of a /proc/<pid>/cgroup) is in a SLURM job
    step's cgroup, where proctrack/cgroup puts it: .../job_<id>/step_<id> in the freezer
    hierarchy (cgroup v1) or the unified one (v2). Under proctrack/linuxproc every process
    of a step gets the SIGTERM, and an srun among them would answer it by killing its
    step at once: no step of its own there."""
    if text is None:
        try:
            text = Path("/proc/self/cgroup").read_text()
        except OSError:
            return False
    for line in text.splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if (controllers == "" or "freezer" in controllers.split(",")) and STEP_CGROUP.search(path):
            return True
    return False


def from_own_step(env: dict) -> dict:
    """The environment a process started by own_step_command was started from, with the
    job step it runs as in DLSCALE_JOB_STEP; `env` itself if it was not started so."""
    if OWN_STEP_ENV not in env:
        return env
    return dict(json.loads(env[OWN_STEP_ENV]), DLSCALE_JOB_STEP=env.get("SLURM_STEP_ID", ""))


def signal_step(job: str, name: str, signum: int) -> bool:
    """Send `signum` to the tasks of job `job`'s steps named `name` (srun itself would
    answer a SIGTERM by killing its step's tasks); whether one was found and signalled."""
    try:
        steps = query(["squeue", "--steps", "--noheader", f"--jobs={job}", "--format=%i %j"])
        ids = [row[0] for row in (line.split() for line in steps.splitlines())
               if row[1:] == [name]]
        for step in ids:
            query(["scancel", "--quiet", f"--signal={signum}", step])
    except SlurmError:
        return False
    return bool(ids)


def allocation_env(env: dict, nodes: int, tasks_per_node: int | None,
                   task_count: bool = False) -> dict:
    """`env` with the job's nodes, node count and (given) tasks per node put back, and
    with `task_count` the number of tasks (srun's default -n); `env` itself outside a
    SLURM job or when they are there. SystemExit naming the job when squeue cannot say."""
    job = env.get("SLURM_JOB_ID")
    if not job or env.get("SLURM_NODELIST"):
        return env
    try:
        nodelist = job_nodes(job)
    except SlurmError as exc:
        raise SystemExit(f"error: cannot read the nodes of SLURM job {job} ({exc})") from exc
    env = dict(env, SLURM_NODELIST=nodelist, SLURM_JOB_NODELIST=nodelist,
               SLURM_NNODES=str(nodes), SLURM_JOB_NUM_NODES=str(nodes))
    if tasks_per_node:
        env["SLURM_TASKS_PER_NODE"] = f"{tasks_per_node}(x{nodes})"
        if task_count:
            env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(tasks_per_node * nodes)
    return env


# --- accounting (sacct) ------------------------------------------------------------------
# What SLURM accounted for a point's job, read after the job ended by the rule that
# tabulates the run (on the login node): the job's state and elapsed time, its CPU time,
# the largest resident memory of any of its steps (MaxRSS is per step: the steps' maximum,
# never a sum), the energy the site measured for the allocation (ConsumedEnergyRaw of the
# job's own line, never summed over steps; 0 or empty means the site does not measure it:
# left empty) and the allocation's TRES.
SACCT_FIELDS = "JobID,State,ElapsedRaw,TotalCPU,MaxRSS,ConsumedEnergyRaw,AllocTRES"
MEMORY = {"": 1 / 1024 ** 2,  # sacct's unit letters (powers of 1024) -> MiB
           "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 ** 2}


def mebibytes(text: str) -> float | None:
    """sacct's MaxRSS (1234K, 56M, 1.5G; bytes without a unit) in MiB."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT]?)", text.strip())
    return None if m is None else float(m.group(1)) * MEMORY[m.group(2)]


def parse_accounting(job: str, text: str) -> dict:
    """The ACCOUNTED columns from `sacct -j JOB -n -P -o SACCT_FIELDS`' output."""
    found = dict.fromkeys(ACCOUNTED)
    rss = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 7:
            continue
        job_id, state, elapsed, total_cpu, max_rss, energy, tres = parts
        if max_rss and (value := mebibytes(max_rss)) is not None:
            rss.append(value)
        if job_id != job:
            continue  # a step's line: only its memory counts
        found["sacct_state"] = state.split()[0] if state else None  # "CANCELLED by 0"
        found["sacct_elapsed_s"] = float(elapsed) if elapsed.isdigit() else None
        found["sacct_cpu_s"] = parse_duration(total_cpu) if total_cpu else None
        joules = float(energy) if re.fullmatch(r"\d+(?:\.\d+)?", energy or "") else 0.0
        found["sacct_energy_j"] = joules or None  # 0: not measured by the site
        found["sacct_alloc_tres"] = tres or None
    found["sacct_max_rss_mb"] = max(rss) if rss else None
    return found


def accounting(job: str | None) -> tuple[dict, str | None]:
    """(the ACCOUNTED columns, a note when they are empty) for SLURM job `job`; empty
    without a note outside SLURM."""
    empty = dict.fromkeys(ACCOUNTED)
    if not job:
        return empty, None
    try:
        out = query(["sacct", "-j", str(job), "-n", "-P", "-o", SACCT_FIELDS], timeout=60)
    except SlurmError as exc:
        return empty, f"no job accounting for job {job}: {exc}"
    if not out.strip():
        return empty, f"no job accounting for job {job}: sacct knows no such job"
    return parse_accounting(str(job), out), None
