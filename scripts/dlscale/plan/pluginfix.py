"""Two bugs of Snakemake's SLURM execution (the SLURM executor plugin, and the executor
interface it builds on), worked around until releases fix them.

snakemake-executor-plugin-slurm (2.8.0, the newest release on 2026-11-26) polls job
states with `sacct -X --parsable2 --format=JobIdRaw,State ...` where the site keeps job
accounting. For a job cancelled with `scancel` (by its user, an admin, a preemption that
cancels) sacct names the state `CANCELLED by <uid>`. The plugin compares the whole string
with its failed states ("CANCELLED", "FAILED", ...), finds none, and takes the job for
running: the study never ends (seen on the test cluster, docs/slurm.md).
Snakemake-Profiles/slurm had the same bug and took the state's first word (its pull
request 22, 2019); `first_word_states` does that to the plugin's query result.

Ctrl-C (a SIGINT to Snakemake) cancels the jobs the executor holds as active
(`RemoteExecutor.cancel`, snakemake-interface-executor-plugins 9.4.0). Its status
loop takes every active job out of that list while it asks SLURM about them, and puts
back those still running when the answer comes: an interrupt that lands while the status
query runs cancels nothing, and the jobs run on, no longer watched (seen on the test
cluster: both jobs of an interrupted rerun trained to their end).
`mend_cancel_during_status_check` remembers the jobs of the query in flight and cancels
them too (`scancel` of a job that has just ended is a no-op).

Both are applied by rules/common.smk in the Snakemake process that polls (the login
node's). Guarded: where the plugin is absent, or has no `query_job_status` or
`check_active_jobs` to wrap, nothing is changed; where a state already is one word, the
result is the plugin's own; an interrupt between status queries cancels what the plugin's
own `cancel` would.
"""

from __future__ import annotations

import functools

WRAPPED = "_dlscale_first_word_states"  # marks a function dlscale has wrapped
CHECKING = "_dlscale_jobs_under_check"  # the executor's jobs of the status query in flight


def mend() -> None:
    """Both workarounds, in the Snakemake process that polls SLURM."""
    mend_cancelled_states()
    mend_cancel_during_status_check()


def first_word_states(states: dict | None) -> dict | None:
    """{job: state} with each state cut to its first word ("CANCELLED by 0": CANCELLED)."""
    if not states:
        return states
    return {job: (state.split() or [state])[0] for job, state in states.items()}


def installed_plugin():
    """The SLURM executor plugin's module, or None where it is not installed."""
    try:
        import snakemake_executor_plugin_slurm as plugin
    except ImportError:
        return None
    return plugin


def mend_cancelled_states() -> bool:
    """Wrap the plugin's status query (`query_job_status`, as its executor module calls
    it) so that `CANCELLED by <uid>` reads CANCELLED; whether it is wrapped now."""
    plugin = installed_plugin()
    query = getattr(plugin, "query_job_status", None)
    if query is None:
        return False
    if getattr(query, WRAPPED, False):
        return True

    @functools.wraps(query)
    async def query_job_status(command, logger):
        states, seconds = await query(command, logger)
        return first_word_states(states), seconds

    setattr(query_job_status, WRAPPED, True)
    plugin.query_job_status = query_job_status
    return True


def mend_cancel_during_status_check() -> bool:
    """Make the plugin's executor cancel, on an interrupt, the jobs its status loop has
    out of the active list while it queries SLURM; whether it is mended now."""
    Executor = getattr(installed_plugin(), "Executor", None)  # noqa: N806 (the class)
    check = getattr(Executor, "check_active_jobs", None)
    if check is None:
        return False
    cancel = Executor.cancel
    if getattr(cancel, WRAPPED, False):
        return True

    @functools.wraps(check)
    async def check_active_jobs(self, active_jobs):
        setattr(self, CHECKING, list(active_jobs))  # kept until the next query's
        async for job_info in check(self, active_jobs):
            yield job_info

    @functools.wraps(cancel)
    def cancel_with_jobs_under_check(self):
        with self.lock:
            held = {id(job_info) for job_info in self.active_jobs}
            self.active_jobs.extend(job_info for job_info in getattr(self, CHECKING, [])
                                    if id(job_info) not in held)
        cancel(self)

    setattr(cancel_with_jobs_under_check, WRAPPED, True)
    Executor.check_active_jobs = check_active_jobs
    Executor.cancel = cancel_with_jobs_under_check
    return True
