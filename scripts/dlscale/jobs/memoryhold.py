"""A point held to the memory it asks for where no SLURM holds it (profiles/local): what a
site's cgroup (SLURM's ConstrainRAMSpace) does to a job, so that a study gives the same
answer on a laptop as on the cluster: the largest batch that fits in
`resources.mem_mb_per_gpu` x GPUs fits on both.

The launcher samples the memory of every process the point started (its workers, their
DataLoader workers, a command's children) and, once their sum passes the ask, kills them
all at once with SIGKILL, as the kernel's out-of-memory killer ends a cgroup's process:
no chance to write a record, so the launcher writes it, `out_of_memory`, with the figures.
The sum is of proportional set sizes (PSS: a page shared by N processes counts 1/N in
each, as a cgroup charges a page once), each process's resident size where the system
gives no PSS. A peak between two samples (SAMPLE_S apart) can pass unseen; the cgroup
sees every page.
"""

from __future__ import annotations

import time

SAMPLE_S = 0.5  # seconds between two samples of the point's memory


def tree_mib() -> float:
    """The memory of this process's descendants, in MiB (PSS where the system has it)."""
    import psutil

    from dlscale.jobs.processes import descendants

    total = 0
    for process in descendants():
        try:
            info = process.memory_full_info()
            total += getattr(info, "pss", info.rss)
        except psutil.Error:  # ended meanwhile, or not ours to read
            continue
    return total / 2 ** 20


class MemoryHold:
    """The point's memory ask in MiB, checked at most every SAMPLE_S seconds."""

    def __init__(self, limit_mib: int, sample_s: float = SAMPLE_S):
        self.limit, self.sample_s = limit_mib, sample_s
        self.next_at, self.peak = 0.0, 0.0
        self.reason: str | None = None  # why it stopped the point, once it has

    def over(self) -> bool:
        """Whether the point's processes hold more than the ask (sampled now if due)."""
        now = time.monotonic()
        if self.reason is None and now >= self.next_at:
            self.next_at = now + self.sample_s
            used = tree_mib()
            self.peak = max(self.peak, used)
            if used > self.limit:
                self.reason = (
                    f"out of memory: the point's processes held {used:.0f} MiB, over the "
                    f"{self.limit} MiB it asks for (resources.mem_mb_per_gpu x GPUs), and were "
                    "killed as a SLURM job's cgroup would kill them: raise mem_mb_per_gpu or "
                    "lower the batch")
        return self.reason is not None
