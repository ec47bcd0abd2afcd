"""dlscale.processes: the supervisor's end of a point, on real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import psutil
from conftest import SCRIPTS

from dlscale.processes import killed_reason, stopped_reason

SUPERVISOR = textwrap.dedent("""
    import subprocess, sys, time
    from dlscale.processes import adopt_orphans, end_tree, spawn
    adopt_orphans()
    # a daemon that leaves its parent (setsid, double fork) and ignores SIGTERM, and a
    # worker that has already exited
    worker = spawn(["bash", "-c", sys.argv[1]])
    worker.wait()
    time.sleep(0.5)
    print(end_tree([worker], grace=0.5), flush=True)
""")


def test_end_tree_ends_what_a_worker_left_behind_even_in_a_session_of_its_own():
    daemon = "(setsid bash -c \"trap '' TERM; exec sleep 3146\" &) ; exit 0"
    proc = subprocess.run([sys.executable, "-c", SUPERVISOR, daemon], capture_output=True,
                          text=True, timeout=60, cwd=SCRIPTS)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1"  # one process was left: ended
    assert not [p for p in psutil.process_iter(["cmdline"])
                if "sleep 3146" in " ".join(p.info["cmdline"] or [])]


def test_every_signal_is_named_and_sigkill_says_who_sends_it():
    assert killed_reason(signal.SIGKILL, "the command") == (
        "the command was killed by SIGKILL (the kernel's or SLURM's out-of-memory killer "
        "sends it)")
    assert killed_reason(signal.SIGSEGV) == "the training process was killed by SIGSEGV"
    assert killed_reason(64) in ("the training process was killed by SIGRTMAX",
                                 "the training process was killed by signal 64")
    assert stopped_reason(signal.SIGINT).startswith("stopped by SIGINT (Ctrl-C")
