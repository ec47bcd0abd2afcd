"""A point held to the memory it asks for where no SLURM holds it (profiles/local): what a
site's cgroup (SLURM's ConstrainRAMSpace) does to a job, so that a study gives the same
answer on a laptop as on the cluster: the largest batch that fits in
`resources.mem_mb_per_gpu` x GPUs fits on both.

The launcher samples the memory of every process the point started (its workers, their
DataLoader workers, a command's children) and, once their sum passes the ask, kills them
all at once with SIGKILL, as the kernel's out-of-memory killer ends a cgroup's process:
no chance to write a record, so the launcher writes it, `out_of_memory`, with the figures.
What is summed is the processes' anonymous and shared memory, each page shared by N of
them counted 1/N in each (Linux's Pss_Anon + Pss_Shmem, /proc/PID/smaps_rollup), as a
cgroup charges a page once: what grows with the batch, the same whatever runs beside the
point (a forked DataLoader worker's copy-on-write pages are not counted twice). The
libraries' file pages are left out: a cgroup charges them to whichever job read them
first. That sum walks each process's page tables (about 12 ms for a TensorFlow process,
its memory map held meanwhile), so it is taken only where a cheap bound (status' RssAnon +
RssShmem, 0.02 ms, which counts a shared page in each process) passes the ask: a training
well within its ask is not slowed by the sampling. Where the system gives no such split,
each process's resident size is summed. A peak between two samples (SAMPLE_S apart) can
pass unseen, where a cgroup sees every page:
torch.compile's compiler processes, which live seconds, were caught in some points of a
study and not in others (examples/hpc4ai-chapter11/cpu.yaml).

Where a cgroup does hold the point (a SLURM site's ConstrainRAMSpace, a container, a
systemd slice), the kernel's out-of-memory killer ends its largest process with SIGKILL;
`KernelKills` tells that from any other SIGKILL by the cgroup's own count of such kills
(v1's memory.oom_control, v2's memory.events: `oom_kill N`), read when the point starts
and when it ends. A kill of another process of the same cgroup meanwhile (two points side
by side in one session's cgroup) would be counted too.
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

SAMPLE_S = 0.2  # seconds between two samples of the point's memory (the launcher's poll)


ROLLUP = re.compile(r"^(Pss_Anon|Pss_Shmem):\s+(\d+) kB", re.MULTILINE)
STATUS = re.compile(r"^(RssAnon|RssShmem):\s+(\d+) kB", re.MULTILINE)


def kib_of(path: str, pattern: re.Pattern) -> int | None:
    """The sum of `pattern`'s two kB fields in a /proc file; None where it lacks them."""
    try:
        found = pattern.findall(Path(path).read_text())
    except OSError:
        return None
    return sum(int(kib) for _, kib in found) * 1024 if len(found) == 2 else None


def process_bytes(process, exact: bool) -> int:
    """A process's anonymous and shared memory (Linux). `exact`: its share of the pages
    it shares (smaps_rollup's Pss_Anon + Pss_Shmem: about 12 ms for a TensorFlow
    process, a walk of its page tables), else all it maps resident (status' RssAnon +
    RssShmem: 0.02 ms, never less than the share). Its resident size elsewhere."""
    found = (kib_of(f"/proc/{process.pid}/smaps_rollup", ROLLUP) if exact else
             kib_of(f"/proc/{process.pid}/status", STATUS))
    return process.memory_info().rss if found is None else found


def tree_mib(processes: list, exact: bool) -> float:
    """The memory of `processes` (this process's descendants), in MiB (process_bytes
    each)."""
    import psutil

    total = 0
    for process in processes:
        try:
            total += process_bytes(process, exact)
        except psutil.Error:  # ended meanwhile, or not ours to read
            continue
    return total / 2 ** 20


class MemoryHold:
    """The point's memory ask in MiB, checked at most every SAMPLE_S seconds."""

    def __init__(self, limit_mib: int, sample_s: float = SAMPLE_S):
        self.limit, self.sample_s = limit_mib, sample_s
        self.next_at = 0.0
        self.reason: str | None = None  # why it stopped the point, once it has

    def over(self) -> bool:
        """Whether the point's processes hold more than the ask (sampled now if due)."""
        now = time.monotonic()
        if self.reason is None and now >= self.next_at:
            self.next_at = now + self.sample_s
            from dlscale.jobs.processes import descendants

            processes = descendants()  # found once a sample, for the bound and the sum
            # the cheap bound first: the exact sum's page walks (which hold the training's
            # memory map a moment each) only where the bound passes the ask
            used = tree_mib(processes, exact=False)
            if used > self.limit:
                used = tree_mib(processes, exact=True)
            if used > self.limit:
                self.reason = (
                    f"the point's processes held {used:.0f} MiB, over the "
                    f"{self.limit} MiB it asks for (resources.mem_mb_per_gpu x GPUs), and were "
                    "killed as a SLURM job's cgroup would kill them: raise mem_mb_per_gpu or "
                    "lower the batch")
        return self.reason is not None


def oom_kills(proc_cgroup: str = "/proc/self/cgroup",
              root: str = "/sys/fs/cgroup") -> tuple[str, int] | None:
    """(this process's memory cgroup, the processes of it the kernel's out-of-memory killer
    has killed), from cgroup v1's memory.oom_control or v2's memory.events; None where
    neither can be read."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    places = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):  # v1
            places.append((path, Path(f"{root}/memory{path}/memory.oom_control")))
        elif not controllers:  # v2 (the unified hierarchy, or its mount in a hybrid)
            places += [(path, Path(f"{root}{path}/memory.events")),
                       (path, Path(f"{root}/unified{path}/memory.events"))]
    for path, file in places:
        try:
            found = re.search(r"^oom_kill (\d+)$", file.read_text(), re.MULTILINE)
        except OSError:
            continue
        if found:
            return path, int(found[1])
    return None


class KernelKills:
    """The cgroup's out-of-memory kills when the point started, to tell its SIGKILL."""

    def __init__(self):
        self.before = oom_kills()

    def reason(self, returncode: int) -> str | None:
        """Why a point whose worker ended with `returncode` ran out of memory: the kernel
        killed a process of its cgroup meanwhile; None for any other ending. The worker
        killed, or a shell whose child was (a command's `a && b`: it exits 128 + 9)."""
        if returncode not in (-signal.SIGKILL, 128 + signal.SIGKILL) or self.before is None:
            return None
        after = oom_kills()
        if after is None or after[0] != self.before[0] or after[1] <= self.before[1]:
            return None
        return (f"the kernel's out-of-memory killer ended the training "
                f"(SIGKILL) in its cgroup {after[0]} (oom_kill {self.before[1]} to "
                f"{after[1]}): the point needs more memory than its job allows (raise "
                "resources.mem_mb_per_gpu, or lower the batch)")
