"""dlscale.jobs.processes: the supervisor's end of a point, on real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import SCRIPTS

from dlscale.jobs.processes import killed_reason, stopped_reason

SUPERVISOR = textwrap.dedent("""
    import subprocess, sys, time
    from dlscale.jobs.processes import adopt_orphans, end_tree, spawn
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


def test_a_second_sigterm_during_the_stop_does_not_cut_it_short(tmp_path):
    """The watchdog stops a worker that takes its time to end (it traps SIGTERM); SIGTERM
    to the launcher meanwhile (scancel) must not abandon that wait: the worker ends first,
    then exactly one record is written, and nothing outlives the launcher."""
    worker = (f"trap 'touch {tmp_path}/got; sleep 2; touch {tmp_path}/done; exit 0' TERM; "
              "while true; do sleep 0.1; done")
    # a 0.35 min limit: the watchdog (20 s before the end) stops the worker after 1 s
    launch = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "launch.py"), "--record", str(tmp_path / "run"),
         "--time-limit-min", "0.35", "--", "bash", "-c", worker],
        cwd=SCRIPTS, stderr=subprocess.PIPE, text=True)
    got = tmp_path / "got"
    end = time.monotonic() + 120
    while not got.exists():
        assert launch.poll() is None and time.monotonic() < end, launch.stderr.read()
        time.sleep(0.02)
    launch.send_signal(signal.SIGTERM)
    launch.send_signal(signal.SIGTERM)
    assert launch.wait(60) == 128 + signal.SIGTERM
    assert (tmp_path / "done").exists()  # the worker's own stop was waited for
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "timeout"
    attempts = (tmp_path / "run" / "attempts.jsonl").read_text().splitlines()
    assert len(attempts) == 1
    assert not [p for p in psutil.process_iter(["cmdline"])
                if str(tmp_path / "got") in " ".join(p.info["cmdline"] or [])]


def test_a_stopped_worker_gets_its_sigterm_and_ends_on_it_not_on_sigkill(tmp_path):
    """A worker stopped (SIGSTOP: a debugger, Ctrl-Z, SLURM's suspend) acts on nothing but
    SIGKILL and SIGCONT: end_tree continues it after the SIGTERM, as SLURM and systemd do,
    so that it ends on the SIGTERM it handles, well within the grace."""
    said = tmp_path / "said"
    script = textwrap.dedent(f"""
        import signal, subprocess, sys, time
        from dlscale.jobs.processes import end_tree, spawn
        worker = spawn(["bash", "-c", "trap 'echo TERM > {said}; exit 3' TERM; "
                        "while :; do sleep 0.05; done"])
        time.sleep(0.5)
        worker.send_signal(signal.SIGSTOP)
        started = time.monotonic()
        end_tree([worker], grace=30)
        print(worker.returncode, round(time.monotonic() - started), flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=SCRIPTS)
    assert proc.returncode == 0, proc.stderr
    returncode, seconds = proc.stdout.split()
    assert said.read_text() == "TERM\n" and returncode == "3"
    assert int(seconds) < 30  # it did not wait out the grace for the SIGKILL


# a worker that holds MIB MiB of touched memory (and a child that holds as much), then
# waits; it never ends of itself
HOLDER = textwrap.dedent("""
    import subprocess, sys, time
    mib = int(sys.argv[1])
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(%d * 2**20); "
                              "time.sleep(3146)" % mib])
    held = bytearray(mib * 2 ** 20)
    time.sleep(3146)
""")


def held(tmp_path, ask_mib: int, mib: int, seconds: float = 0):
    """launch.py --record running HOLDER(mib) with the point's ask `ask_mib`, outside
    SLURM; `seconds`: its time limit (0: none)."""
    plan = {"tasks": 1, "mem_mb": ask_mib, "planned": {"model": "M", "gpus_asked": 1,
                                                       "epochs": 1}}
    limit = ["--time-limit-min", str(seconds / 60)] if seconds else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return subprocess.run([sys.executable, str(SCRIPTS / "launch.py"), "--plan",
                           json.dumps(plan), "--record", str(tmp_path / "run"), *limit, "--",
                           sys.executable, "-c", HOLDER, str(mib)],
                          cwd=SCRIPTS, capture_output=True, text=True, timeout=120, env=env)


def test_outside_slurm_a_point_over_its_memory_ask_is_killed_and_recorded_out_of_memory(
        tmp_path):
    """Two processes of 200 MiB each under an ask of 300 MiB (profiles/local, issue 98):
    both killed at once, as a cgroup's out-of-memory kill ends a job, the record says
    out_of_memory with the figures, and nothing outlives the launcher."""
    proc = held(tmp_path, 300, 200)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "out_of_memory"
    assert "over the 300 MiB it asks for (resources.mem_mb_per_gpu x GPUs)" in record["failure"]
    used = int(record["failure"].split("held ")[1].split(" MiB")[0])
    assert 300 < used < 600
    assert not [p for p in psutil.process_iter(["cmdline"])
                if "time.sleep(3146)" in " ".join(p.info["cmdline"] or [])]


def test_a_point_within_its_ask_runs_on(tmp_path):
    """The same processes under an ask of 2000 MiB are not stopped by the hold: its time
    limit ends them (a timeout, not out_of_memory)."""
    proc = held(tmp_path, 2000, 50, seconds=22)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["status"] == "timeout", record["failure"]


def memory_cgroup(name: str, limit_bytes: int):
    """A memory cgroup of its own below this process's (v1, or v2), limited to
    `limit_bytes`: its cgroup.procs, or None where it cannot be made (not root, no memory
    controller)."""
    from dlscale.jobs.memoryhold import oom_kills

    found = oom_kills()
    if found is None:
        return None
    path = found[0]
    for folder, limit, swap in (
            (f"/sys/fs/cgroup/memory{path}", "memory.limit_in_bytes",
             "memory.memsw.limit_in_bytes"),
            (f"/sys/fs/cgroup{path}", "memory.max", "memory.swap.max"),
            (f"/sys/fs/cgroup/unified{path}", "memory.max", "memory.swap.max")):
        child = Path(folder) / name
        try:
            child.mkdir(exist_ok=True)
            (child / limit).write_text(str(limit_bytes))
        except OSError:
            continue
        if (child / swap).exists():  # no swap beyond it: the limit is the memory's
            (child / swap).write_text(str(limit_bytes) if swap.endswith("bytes") else "0")
        return child
    return None


def test_a_point_the_kernel_kills_for_memory_in_its_cgroup_is_out_of_memory(tmp_path):
    """A SLURM site's ConstrainRAMSpace (or any cgroup) holding the point: the kernel's
    out-of-memory killer ends the worker with SIGKILL, and launch.py records the point
    out_of_memory from the cgroup's own count of such kills (issue 98 item 2), where a
    SIGKILL from elsewhere stays `killed`."""
    child = memory_cgroup(f"dlscale-test-{os.getpid()}", 150 * 2 ** 20)
    if child is None:
        pytest.skip("no memory cgroup can be made here (needs root and the memory "
                    "controller, as the test machine has)")
    plan = {"tasks": 1, "planned": {"model": "M", "gpus_asked": 1, "epochs": 1}}
    try:
        # the launcher goes into the limited cgroup, its worker with it (no mem_mb: the
        # launcher's own hold is off, only the cgroup holds the point)
        proc = subprocess.run(
            ["sh", "-c", f'echo $$ > {child}/cgroup.procs && exec "$@"', "sh",
             sys.executable, str(SCRIPTS / "launch.py"), "--plan", json.dumps(plan),
             "--record", str(tmp_path / "run"), "--", sys.executable, "-c",
             "b = bytearray(400 * 2 ** 20)"],
            cwd=SCRIPTS, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        record = json.loads((tmp_path / "run" / "run.json").read_text())
        assert record["status"] == "out_of_memory", record["failure"]
        assert "the kernel's out-of-memory killer ended the training (SIGKILL)" in \
            record["failure"] and f"{child.name} (oom_kill 0 to 1)" in record["failure"]
        # a SIGKILL that is no out-of-memory kill (the cgroup counts none more) is `killed`
        proc = subprocess.run(
            ["sh", "-c", f'echo $$ > {child}/cgroup.procs && exec "$@"', "sh",
             sys.executable, str(SCRIPTS / "launch.py"), "--plan", json.dumps(plan),
             "--record", str(tmp_path / "other"), "--", "sh", "-c", "kill -9 $$"],
            cwd=SCRIPTS, capture_output=True, text=True, timeout=120)
        record = json.loads((tmp_path / "other" / "run.json").read_text())
        assert record["status"] == "killed" and "SIGKILL" in record["failure"]
        # your command (sweep.commands: run_command.py records its ending itself), killed
        # by the kernel in the command's shell (`a && b` execs b) or in a child the shell
        # waits for (it exits 128 + 9): out_of_memory both (`killed` on the SLURM test
        # cluster before, its task/cgroup holding the job)
        allocate = f'{sys.executable} -c "b = bytearray(400 * 2 ** 20)"'
        for name, text, kills in (("exec", f"true && {allocate}", "1 to 2"),
                                  ("waited", f"{allocate}; exit $?", "2 to 3")):
            proc = subprocess.run(
                ["sh", "-c", f'echo $$ > {child}/cgroup.procs && exec "$@"', "sh",
                 sys.executable, str(SCRIPTS / "launch.py"), "--plan",
                 json.dumps({**plan, "command": True}), "--record", str(tmp_path / name),
                 "--", sys.executable, str(SCRIPTS / "run_command.py"), "--command", text,
                 "--model", "M", "--out", str(tmp_path / name), "--lr", "0.1",
                 "--device", "cpu", "--telemetry-interval", "0"],
                cwd=SCRIPTS, capture_output=True, text=True, timeout=120)
            record = json.loads((tmp_path / name / "run.json").read_text())
            assert record["status"] == "out_of_memory", (name, record["failure"])
            assert f"(oom_kill {kills})" in record["failure"]
    finally:
        for _ in range(50):  # empty once its processes have ended
            try:
                child.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def test_the_holds_cheap_bound_is_never_below_its_exact_sum():
    """The hold reads a process's page tables (smaps_rollup) only where the cheap bound
    (status' resident anonymous and shared memory) passes the ask: the bound must never
    be below the exact share, here for a process that shares pages with a fork of it."""
    from dlscale.jobs.memoryhold import process_bytes

    child = subprocess.Popen([sys.executable, "-c",
                              "import os, time; b = bytearray(64 * 2**20); os.fork(); "
                              "time.sleep(30)"])
    try:
        time.sleep(1.5)
        for process in [psutil.Process(child.pid), *psutil.Process(child.pid).children()]:
            exact, bound = process_bytes(process, True), process_bytes(process, False)
            assert 32 * 2 ** 20 <= exact <= bound  # the fork shares the 64 MiB: each half
    finally:
        for process in psutil.Process(child.pid).children():
            process.kill()
        child.kill()
        child.wait()
