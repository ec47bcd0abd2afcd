"""dlscale.jobs.locks on real processes: one writer per point with flock or with an O_EXCL file,
stale holders, the file system named on errors, and ports no two launchers share.

No file system on this machine lacks flock (ext4 and tmpfs, checked): the ENOSYS case is
the one place where the system's answer is put in by the test."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import SCRIPTS

from dlscale.core.contract import LOCK, LOCK_HELD
from dlscale.jobs import locks

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from dlscale.jobs.locks import PointLock
    folder = Path(sys.argv[1])
    lock = PointLock(folder, poll=0.1)
    waited = lock.take()
    (folder / f"tmp-{sys.argv[2]}").write_text(str(waited))  # renamed whole: never seen empty
    (folder / f"tmp-{sys.argv[2]}").rename(folder / f"taken-{sys.argv[2]}")
    while not (folder / f"release-{sys.argv[2]}").exists():
        time.sleep(0.05)
    lock.release()
""")


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def no_process_left():
    """The holders a test started end with it, whether it passed or not."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait(60)


def holder(folder, name, mode):
    env = {k: v for k, v in os.environ.items() if k != locks.MODE_ENV}
    if mode:
        env[locks.MODE_ENV] = mode
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), name], cwd=SCRIPTS,
                            env=env, stderr=subprocess.PIPE, text=True)
    STARTED.append(proc)
    return proc


def wait_for(path, proc, timeout=60):
    end = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.monotonic() < end, f"{path} did not appear"
        time.sleep(0.05)
    return path.read_text()


@pytest.mark.parametrize("mode", [None, "exclusive"])
def test_a_second_taker_waits_for_the_holder_and_is_told_who(tmp_path, mode):
    first = holder(tmp_path, "a", mode)
    assert wait_for(tmp_path / "taken-a", first) == "False"
    held = tmp_path / (LOCK_HELD if mode else LOCK)
    assert json.loads(held.read_text())["pid"] == first.pid
    second = holder(tmp_path, "b", mode)
    said = second.stderr.readline()  # blocks until the second says it waits
    assert f"pid {first.pid}" in said and said.rstrip().endswith("waiting for it to end")
    assert not (tmp_path / "taken-b").exists()
    (tmp_path / "release-a").touch()
    assert first.wait(60) == 0
    assert wait_for(tmp_path / "taken-b", second) == "True"
    assert json.loads(held.read_text())["pid"] == second.pid
    (tmp_path / "release-b").touch()
    assert second.wait(60) == 0
    # released: the file names nobody (flock's is emptied, the O_EXCL file is gone)
    assert not held.exists() or held.read_text() == ""


@pytest.mark.parametrize("mode", [None, "exclusive"])
def test_a_holder_killed_by_sigkill_does_not_hold_the_point(tmp_path, mode):
    first = holder(tmp_path, "a", mode)
    wait_for(tmp_path / "taken-a", first)
    first.send_signal(signal.SIGKILL)
    first.wait(60)
    if mode:  # its file is left behind, naming a process that is gone
        assert json.loads((tmp_path / LOCK_HELD).read_text())["pid"] == first.pid
    second = holder(tmp_path, "b", mode)
    assert wait_for(tmp_path / "taken-b", second) == "False"  # stale: taken at once
    (tmp_path / "release-b").touch()
    assert second.wait(60) == 0


def test_a_file_system_without_flock_gets_the_lock_file(tmp_path, monkeypatch):
    def no_flock(handle, operation):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(fcntl, "flock", no_flock)
    lock = locks.PointLock(tmp_path)
    assert lock.take() is False
    assert json.loads((tmp_path / LOCK_HELD).read_text())["pid"] == os.getpid()
    lock.release()
    assert not (tmp_path / LOCK_HELD).exists()


def test_another_lock_error_names_the_file_and_its_file_system(tmp_path, monkeypatch):
    def broken(handle, operation):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(fcntl, "flock", broken)
    with pytest.raises(locks.LockError) as caught:
        locks.PointLock(tmp_path).take()
    message = str(caught.value)
    assert message == (f"cannot lock {tmp_path / LOCK} (file system "
                       f"{locks.file_system(tmp_path)}): Input/output error; set "
                       "DLSCALE_POINT_LOCK=exclusive to use a lock file instead of flock")
    assert locks.file_system(tmp_path) != "?"


def test_a_holder_on_another_host_without_a_job_cannot_be_judged_and_is_named(tmp_path):
    (tmp_path / LOCK_HELD).write_text(json.dumps(
        {"host": "elsewhere-node", "pid": 4242, "slurm_job": None, "since": "x"}))
    proc = holder(tmp_path, "a", "exclusive")
    said = proc.stderr.readline()
    assert "host elsewhere-node, pid 4242" in said
    assert said.rstrip().endswith(f"if no such process runs, delete {tmp_path / LOCK_HELD}")
    (tmp_path / LOCK_HELD).unlink()  # the user does as told
    assert wait_for(tmp_path / "taken-a", proc) == "True"
    (tmp_path / "release-a").touch()
    assert proc.wait(60) == 0


RESERVE = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from dlscale.jobs.locks import reserve_ports
    Path(sys.argv[1] + ".tmp").write_text(json.dumps(reserve_ports(int(sys.argv[2]))))
    Path(sys.argv[1] + ".tmp").rename(sys.argv[1])  # whole, or not there
    while not Path(sys.argv[1] + ".done").exists():
        time.sleep(0.05)
""")


def test_ports_reserved_by_live_launchers_are_never_handed_out_twice(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", RESERVE, str(tmp_path / f"p{i}"), "8"],
                              cwd=SCRIPTS, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    STARTED.extend(procs)
    chosen = [json.loads(wait_for(tmp_path / f"p{i}", p)) for i, p in enumerate(procs)]
    ports = [port for ports in chosen for port in ports]
    assert len(ports) == 32 and len(set(ports)) == 32
    registry = json.loads(locks._registry().read_text())
    assert {int(p) for p, pid in registry.items() if pid in {q.pid for q in procs}} == set(ports)
    for i, proc in enumerate(procs):
        (tmp_path / f"p{i}.done").touch()
        assert proc.wait(60) == 0
    # the launchers are gone: their ports are free again, and dropped at the next choice
    locks.reserve_ports(1)
    registry = json.loads(locks._registry().read_text())
    assert not set(registry.values()) & {proc.pid for proc in procs}


def test_two_writers_of_one_file_write_temporary_files_of_their_own(tmp_path):
    """files.atomic: a second writer of the same file while the first writes (two Snakemake
    starts recording a folder's listing) never shares its temporary file."""
    from dlscale.core.files import atomic

    target = tmp_path / "listing.json"
    with atomic(target) as first, atomic(target) as second:
        assert first != second and first.parent == second.parent == tmp_path
        assert first.name == ".listing.tmp.json" and second.name.endswith(".tmp.json")
        first.write_text("first")
        second.write_text("second, and longer")
    assert target.read_text() == "first"  # the last to finish replaced the file whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["listing.json"]


def test_a_requeued_job_on_another_node_does_not_wait_for_itself(tmp_path, monkeypatch):
    """SLURM requeues a job after a node failure under the same id; on its new node it
    finds the point's lock naming its own job on the dead one. That holder is gone: the
    job is running, but it is this one."""
    from dlscale.jobs import locks

    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    dead = {"host": "node-that-failed", "pid": 123, "slurm_job": "4242"}
    assert locks.holder_state(dead, active={"4242": "RUNNING"}) == "gone"
    other = {"host": "node-that-failed", "pid": 123, "slurm_job": "4243"}
    assert locks.holder_state(other, active={"4242": "RUNNING", "4243": "RUNNING"}) == "live"


def test_a_record_linked_into_its_temporary_file_is_one_copy_on_disk(tmp_path):
    """RunRecord.write stores epochs.jsonl once: a hard link through files.atomic, though
    the temporary file was claimed (created) first."""
    from dlscale.core.files import atomic, link_or_copy

    source = tmp_path / "state.jsonl"
    source.write_text('{"epoch": 1}\n')
    with atomic(tmp_path / "epochs.jsonl") as tmp:
        link_or_copy(source, tmp)
    assert (tmp_path / "epochs.jsonl").stat().st_ino == source.stat().st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epochs.jsonl", "state.jsonl"]


RACE_ROUNDS = 300  # the code before the guard overlapped from the second round
# the rounds, in a small Python of their own: forking the test worker (TensorFlow and all
# in its memory) twice a round cost CI 90 s
RACE = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    import psutil  # imported once here, not by every forked taker
    from dlscale.jobs import locks
    from dlscale.core.contract import LOCK_HELD
    folder, log, dead, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    for round_ in range(rounds):
        folder.mkdir(exist_ok=True)
        (folder / LOCK_HELD).write_text(json.dumps({**locks.holder(), "pid": dead}))
        children = []
        for name in ("a", "b"):
            pid = os.fork()
            if pid == 0:  # the child: take, note the hold, release
                code = 1
                try:
                    lock = locks.PointLock(folder, poll=0.001)
                    lock.take()
                    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                    os.write(fd, f"in {round_}{name}\\n".encode())
                    time.sleep(0.002)
                    os.write(fd, f"out {round_}{name}\\n".encode())
                    lock.release()
                    code = 0
                finally:
                    os._exit(code)
            children.append(pid)
        for pid in children:
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
""")


def test_two_takers_that_judge_one_holder_gone_never_both_hold_the_point(tmp_path):
    """Exclusive-file mode, RACE_ROUNDS rounds: a lock left by a dead process, two takers
    forked at once. Both judge the holder gone; before the guard, the second one's removal
    could delete the lock the first had just taken, and both trained the point. Each
    holder writes `in` and `out` around its hold: no two holds may overlap."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    log = tmp_path / "holds.log"
    env = {**os.environ, locks.MODE_ENV: "exclusive"}
    subprocess.run([sys.executable, "-c", RACE, str(tmp_path / "point"), str(log),
                    str(dead.pid), str(RACE_ROUNDS)], cwd=SCRIPTS, env=env, check=True,
                   timeout=900)
    lines = log.read_text().splitlines()
    assert len(lines) == 4 * RACE_ROUNDS
    overlapping = [(lines[i], lines[i + 1]) for i in range(0, len(lines), 2)
                   if lines[i + 1] != lines[i].replace("in ", "out ")]
    assert overlapping == []


@pytest.mark.parametrize("mode", [None, "exclusive"])
def test_the_lock_is_released_however_the_block_that_holds_it_ends(tmp_path, monkeypatch,
                                                                   mode):
    """launch.py holds the lock in a `with` block: an exception between taking and
    releasing leaves no lock for the next taker to judge stale."""
    if mode:
        monkeypatch.setenv(locks.MODE_ENV, mode)
    else:
        monkeypatch.delenv(locks.MODE_ENV, raising=False)
    with pytest.raises(RuntimeError), locks.PointLock(tmp_path) as lock:
        assert lock.waited is False and locks.current_holder(tmp_path)["pid"] == os.getpid()
        raise RuntimeError("the training could not start")
    assert not (tmp_path / LOCK_HELD).exists()
    proc = holder(tmp_path, "next", mode)  # another process takes it at once
    assert wait_for(tmp_path / "taken-next", proc) == "False"
    (tmp_path / "release-next").touch()
    assert proc.wait(60) == 0


def test_an_atomic_write_syncs_the_file_and_then_its_folder(tmp_path, monkeypatch):
    """The new bytes, then the rename that gives them the record's name, reach the disk:
    fsync of the temporary file before the rename and of the folder after it."""
    from dlscale.core import files

    synced, real = [], os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with files.atomic(tmp_path / "run.json") as tmp:
        tmp.write_text("{}")
    assert synced == [str(tmp_path / ".run.tmp.json"), str(tmp_path)]
    assert (tmp_path / "run.json").read_text() == "{}"


def test_a_lock_mode_that_is_neither_is_refused_at_planning_and_at_the_job(tmp_path, monkeypatch):
    """DLSCALE_POINT_LOCK=exlusive (a typo) meant flock without a word (issue 78, 18)."""
    from helpers.studies import study

    from dlscale.core.errors import PlanError
    from dlscale.jobs.locks import MODE_ENV, LockError, PointLock, lock_mode

    assert lock_mode({}) == "flock" and lock_mode({MODE_ENV: " Exclusive"}) == "exclusive"
    monkeypatch.setenv(MODE_ENV, "exlusive")
    with pytest.raises(PlanError, match="DLSCALE_POINT_LOCK='exlusive': expected exclusive"):
        study(tmp_path, sweep={"models": ["SimpleCNN"], "gpus": [1]})
    with pytest.raises(LockError, match="'exlusive'"):
        PointLock(tmp_path / "run").take()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_launcher_stopped_while_it_waits_for_the_lock_says_so_in_one_line(tmp_path, stop):
    """Ctrl-C (or scancel) while a point's job waits for another holder's lock printed a
    double traceback (the launcher's handlers came after the lock; issue 78, 9): one line
    now, nothing recorded, the holder's lock untouched."""
    first = holder(tmp_path, "a", None)
    wait_for(tmp_path / "taken-a", first)
    launcher = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "launch.py"), "--record", str(tmp_path), "--",
         sys.executable, "-c", "pass"], stderr=subprocess.PIPE, text=True,
        env={**os.environ, "SLURM_JOB_ID": ""})
    STARTED.append(launcher)
    said = launcher.stderr.readline()  # blocks until it says it waits
    assert "waiting for it to end" in said
    launcher.send_signal(stop)
    rest = launcher.stderr.read()
    assert launcher.wait(60) == 128 + stop
    assert rest.strip() == (f"dlscale launch: stopped by {stop.name} while waiting for "
                            f"{tmp_path}'s lock: nothing was trained or recorded here")
    assert not (tmp_path / "run.json").exists()
    assert json.loads((tmp_path / LOCK).read_text())["pid"] == first.pid
    (tmp_path / "release-a").touch()
    assert first.wait(60) == 0
