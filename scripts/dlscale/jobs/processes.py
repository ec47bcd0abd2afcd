"""One supervisor for every process a point starts: dlscale's training and your command.

A point's processes are started in a process group of their own (`spawn`), so that a
terminal's Ctrl-C or a signal to the job's shell does not reach them behind the
supervisor's back, and the supervisor marks itself the subreaper of what it starts
(`adopt_orphans`, Linux's PR_SET_CHILD_SUBREAPER): a process that its parent left behind
(`tensorboard &`, `(sleep 45 &)`, a daemon that forked twice) becomes the supervisor's
child instead of init's. `end_tree` can then find and end every one of them: SIGTERM to
each and to its process group, then SIGKILL to what is still there after the grace
period. No process of a point outlives it (under SLURM, the job's cgroup does the same
for what escapes even this).

How a process ended is told in one place for every supervisor: `signal_name` and
`killed_reason`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time

# Seconds between SIGTERM and SIGKILL when a supervisor stops what it started.
KILL_GRACE_S = 5.0
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def adopt_orphans() -> bool:
    """Make this process the subreaper of its descendants (Linux); whether it is."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def spawn(command: list[str], **kwargs) -> subprocess.Popen:
    """The command started in a new process group (its pid is the group's id)."""
    return subprocess.Popen(command, process_group=0, **kwargs)


def descendants(exclude: set[int] = frozenset()) -> list:
    """This process's living descendants (psutil.Process), children first."""
    import psutil

    try:
        found = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in found if p.pid not in exclude and alive(p)]


def alive(process) -> bool:
    import psutil

    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def send(pids, signum: int) -> None:
    """`signum` to each process and to each one's process group (not this process's)."""
    own = os.getpgid(0)
    groups = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != own:
                groups.add(group)
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def reap(exclude: set[int] = frozenset()) -> None:
    """Collect the exit status of this process's ended children that nobody waits for
    (orphans it adopted): zombies otherwise. `exclude`: children started with
    subprocess, whose Popen object waits for them (reaped here, it would read status 0)."""
    import psutil

    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error, ChildProcessError):
            if child.pid not in exclude and child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)


def end_tree(popens: list[subprocess.Popen] = (), grace: float = KILL_GRACE_S,
             first: int = signal.SIGTERM) -> int:
    """End every descendant of this process: `first` (SIGTERM) to all of them, with
    SIGCONT for those stopped (as SLURM and systemd send), then SIGKILL to what is left
    after `grace` seconds. The `popens` (the workers) get one second more than the rest:
    a worker that records what its own children did (run_command) sees them end first.
    Returns how many processes there were beside the popens."""
    mine = {p.pid for p in popens}
    others = descendants(exclude=mine)
    running = [p.pid for p in popens if p.poll() is None]
    if not others and not running:
        return 0

    def waiting(busy, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end and busy():
            reap(exclude=mine)
            time.sleep(0.05)

    everyone = running + [p.pid for p in others]
    send(everyone, first)
    # a stopped process (SIGSTOP: a debugger, Ctrl-Z) acts on its signal once continued
    send(everyone, signal.SIGCONT)
    waiting(lambda: descendants(exclude=mine) or any(p.poll() is None for p in popens),
            grace)
    send([p.pid for p in descendants(exclude=mine)], signal.SIGKILL)
    waiting(lambda: any(p.poll() is None for p in popens), 1.0)
    for p in popens:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.kill()
            p.wait()
    # what the popens' own children left at the very end
    send([p.pid for p in descendants(exclude=mine)], signal.SIGKILL)
    waiting(lambda: descendants(exclude=mine), 2.0)
    reap(exclude=mine)
    return len(others)


def signal_name(signum: int) -> str:
    """SIGKILL for 9; `signal 64` for a number Python has no name for."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def killed_reason(signum: int, who: str = "the training process") -> str:
    """The failure text of a process that died of signal `signum`."""
    name = signal_name(signum)
    return (f"{who} was killed by {name}"
            + (" (the kernel's or SLURM's out-of-memory killer sends it)"
               if signum == signal.SIGKILL else ""))


def stopped_reason(signum: int) -> str:
    """The failure text of a point stopped by a signal sent to its supervisor."""
    if signum == signal.SIGINT:
        return "stopped by SIGINT (Ctrl-C, or snakemake stopped)"
    return "stopped by SIGTERM (scancel, or the end of the SLURM job)"
