"""One writer per point, and ports no two local points share.

A point's run folder has one lock (contract.LOCK), held by the launcher for as long as
the training runs; its content names the holder: SLURM job, host, pid, since.

- flock where the file system has it (released by the kernel however the holder ends);
- where flock is refused (ENOSYS, EOPNOTSUPP, ENOLCK: Lustre mounted `noflock`, some
  FUSE and NFS set-ups) or where the site asks for it ($DLSCALE_POINT_LOCK=exclusive,
  for file systems whose flock is node-local: Lustre `localflock`, NFS `local_lock=flock`),
  a file created with O_EXCL (contract.LOCK_HELD) holding the same record. A holder that
  is gone (its pid ended on this host, or SLURM no longer runs its job) is stale and is
  removed; one nobody can judge (another host, no job) is waited for, and said so;
- with flock too, a holder named in the file on another host whose SLURM job still runs
  is waited for: node-local flock would otherwise let two nodes train one point.

Any other error is one line naming the file, its file system and what the system said.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from dlscale.core.contract import LOCK, LOCK_HELD
from dlscale.jobs import slurm

# the errors of a file system that has no flock
NO_FLOCK = {errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK}
MODE_ENV = "DLSCALE_POINT_LOCK"  # "exclusive": an O_EXCL file even where flock works
POLL_S = 2.0
# an O_EXCL file still empty after this long: its creator died before writing it
EMPTY_STALE_S = 60.0


class LockError(OSError):
    """The point's lock cannot be taken; the message names the file and its file system."""


def lock_mode(env: dict | None = None) -> str:
    """$DLSCALE_POINT_LOCK: "flock" (unset, empty or flock) or "exclusive"; LockError,
    naming the value, for anything else (a typo meant flock without a word)."""
    value = (os.environ if env is None else env).get(MODE_ENV, "").strip()
    if value.lower() in ("", "flock", "exclusive"):
        return value.lower() or "flock"
    raise LockError(f"{MODE_ENV}={value!r}: expected exclusive (a lock file) or flock (the "
                    "default), or leave it unset")


def holder() -> dict:
    """This process as a lock's holder."""
    return {"slurm_job": os.environ.get("SLURM_JOB_ID"), "host": socket.gethostname(),
            "pid": os.getpid(), "since": datetime.now(UTC).isoformat(timespec="seconds")}


def describe(who: dict) -> str:
    job = f"SLURM job {who['slurm_job']}, " if who.get("slurm_job") else ""
    return (f"{job}host {who.get('host', '?')}, pid {who.get('pid', '?')}, since "
            f"{who.get('since', '?')}")


def file_system(path: Path) -> str:
    """The type of the file system `path` is on (/proc/mounts), e.g. 'lustre'; '?'."""
    best, kind = "", "?"
    try:
        target = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) > 2 and (target == parts[1] or target.startswith(
                    parts[1].rstrip("/") + "/")) and len(parts[1]) >= len(best):
                best, kind = parts[1], parts[2]
    except OSError:
        pass
    return kind


def pid_alive(pid: int, since: str | None = None) -> bool:
    """Whether process `pid` of this host runs and began no later than `since` (ISO), so
    that a reused pid is not taken for the holder."""
    import psutil

    try:
        process = psutil.Process(int(pid))
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        if since:
            began = datetime.fromisoformat(since).timestamp()
            return process.create_time() <= began + 2
        return True
    except (psutil.Error, ValueError, TypeError):
        return False


def holder_state(who: dict, active: dict | None = None) -> str:
    """'live', 'gone' or 'unknown' for a lock's holder record. `active`: slurm.active_jobs()
    when the caller has it already."""
    if not who or not who.get("pid"):
        return "gone"
    if who.get("host") == socket.gethostname():
        return "live" if pid_alive(who["pid"], who.get("since")) else "gone"
    if who.get("slurm_job") and str(who["slurm_job"]) == os.environ.get("SLURM_JOB_ID"):
        # this very job on another host: SLURM requeued it (a failed node) and it starts
        # again elsewhere under the same id; its earlier run is gone, not a rival
        return "gone"
    if who.get("slurm_job"):
        jobs = slurm.active_jobs() if active is None else active
        if jobs is None:
            return "unknown"
        return "live" if str(who["slurm_job"]) in jobs else "gone"
    return "unknown"


def read_holder(path: Path) -> dict:
    try:
        who = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return who if isinstance(who, dict) else {}


def current_holder(folder: Path) -> dict:
    """Who holds (or last held without releasing) the point's lock, from either file."""
    return read_holder(Path(folder) / LOCK_HELD) or read_holder(Path(folder) / LOCK)


def say(text: str) -> None:
    print(f"dlscale launch: {text}", file=sys.stderr, flush=True)


class PointLock:
    """The lock of one run folder. `PointLock(folder).take()` returns whether it had to
    wait for another holder; `release()` (or the process's end) gives it up. As a context
    manager, `with PointLock(folder) as lock:` takes it (`lock.waited` says whether it
    waited) and releases it however the block ends."""

    waited = False

    def __enter__(self) -> PointLock:
        self.waited = self.take()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __init__(self, folder: Path, poll: float = POLL_S):
        self.folder, self.poll = Path(folder), poll
        self.handle = None
        self.held_file: Path | None = None

    def take(self) -> bool:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / LOCK
        if lock_mode() == "exclusive":
            return self._take_exclusive()
        import fcntl

        try:
            self.handle = open(path, "a+")  # noqa: SIM115 (held until release)
            waited = False
            try:
                fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._say_waiting(read_holder(path))
                fcntl.flock(self.handle, fcntl.LOCK_EX)
                waited = True
        except OSError as exc:
            if self.handle is not None:
                self.handle.close()
                self.handle = None
            if exc.errno in NO_FLOCK:
                return self._take_exclusive()
            raise self._error(path, exc) from None
        # flock is ours; a holder on another node that SLURM still runs means flock is
        # node-local here: wait for it as for any other holder
        waited = self._wait_while(lambda: self._other_node_holder(path)) or waited
        self._write(self.handle)
        return waited

    def _other_node_holder(self, path: Path) -> dict | None:
        who = read_holder(path)
        if who and who.get("host") != socket.gethostname() and holder_state(who) == "live":
            return who
        return None

    def _wait_while(self, holding) -> bool:
        said, waited = False, False
        while (who := holding()) is not None:
            if not said:
                self._say_waiting(who)
                said = True
            waited = True
            time.sleep(self.poll)
        return waited

    def _take_exclusive(self) -> bool:
        path = self.folder / LOCK_HELD
        said, waited = False, False
        while True:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                who = read_holder(path)
                if self._stale(path, who):
                    self._break(path, who)
                    continue
                if not said:
                    self._say_waiting(who, "" if holder_state(who) == "live" else
                                      f"; if no such process runs, delete {path}")
                    said = True
                waited = True
                time.sleep(self.poll)
                continue
            except OSError as exc:
                raise self._error(path, exc) from None
            with os.fdopen(fd, "w") as handle:
                self._write(handle)
            self.held_file = path
            return waited

    def _break(self, path: Path, judged: dict) -> None:
        """Remove a lock file judged stale, if it still is: two takers that both judged
        the same holder gone must not both remove a file, or the second removes the lock
        the first has just taken. The breaker first holds a guard file (O_EXCL), then
        reads the holder again and removes the file only if it still names the holder it
        judged and that holder is still gone. A guard left by a breaker that died is
        removed after EMPTY_STALE_S."""
        guard = path.with_name(f"{path.name}.break")
        try:
            os.close(os.open(guard, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - guard.stat().st_mtime > EMPTY_STALE_S:
                    guard.unlink()
            time.sleep(min(self.poll, 0.01))  # another taker is breaking it
            return
        try:
            if read_holder(path) == judged and self._stale(path, judged):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        finally:
            guard.unlink(missing_ok=True)

    def _say_waiting(self, who: dict, extra: str = "") -> None:
        say(f"{self.folder} is being trained by another process ({describe(who)}): "
            f"waiting for it to end{extra}")

    def _stale(self, path: Path, who: dict) -> bool:
        if not who:  # being written, or its writer died before writing
            try:
                return time.time() - path.stat().st_mtime > EMPTY_STALE_S
            except FileNotFoundError:
                return True
        return holder_state(who) == "gone"

    @staticmethod
    def _write(handle) -> None:
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(holder()))
        handle.flush()

    def _error(self, path: Path, exc: OSError) -> LockError:
        return LockError(f"cannot lock {path} (file system {file_system(self.folder)}): "
                         f"{exc.strerror or exc}; set {MODE_ENV}=exclusive to use a lock "
                         "file instead of flock")

    def release(self) -> None:
        """Give the lock up; the file no longer names a holder."""
        if self.held_file is not None:
            if read_holder(self.held_file).get("pid") == os.getpid():
                self.held_file.unlink(missing_ok=True)
            self.held_file = None
        if self.handle is not None:
            with contextlib.suppress(OSError):
                self.handle.seek(0)
                self.handle.truncate()
            self.handle.close()
            self.handle = None


# --- ports -------------------------------------------------------------------------------
# TensorFlow's gRPC servers bind the ports TF_CONFIG names, and refuse a port another
# socket holds (they bind without SO_REUSEPORT), so a port cannot be held for them. It is
# reserved instead among dlscale's launchers on this machine: chosen and written down under
# one lock, and not chosen again while the launcher that wrote it down lives.
def _registry() -> Path:
    return Path(tempfile.gettempdir()) / f"dlscale-ports-{os.getuid()}.json"


def reserve_ports(count: int) -> list[int]:
    """`count` free localhost ports that no other live dlscale launcher here reserved."""
    import fcntl

    path = _registry()
    with open(path.with_suffix(".lock"), "a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        taken = {int(port): pid for port, pid in read_holder(path).items()
                 if pid_alive(pid)}
        chosen: list[int] = []
        probes = []
        try:
            while len(chosen) < count:
                probe = socket.socket()
                probes.append(probe)  # kept bound until all are chosen: all distinct
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
                if port not in taken:
                    chosen.append(port)
        finally:
            for probe in probes:
                probe.close()
        taken.update(dict.fromkeys(chosen, os.getpid()))
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({str(p): pid for p, pid in taken.items()}))
        os.replace(tmp, path)
    return chosen
