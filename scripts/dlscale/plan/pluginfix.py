"""Two bugs of Snakemake's SLURM execution, worked around until releases fix them
(docs/slurm.md says what was seen, in which versions, and where each is tested):

- the SLURM plugin takes sacct's `CANCELLED by <uid>` for a running job, so a study with a
  cancelled point never ends: `first_word_states` gives the plugin each state's first word;
- Ctrl-C during a status query cancels nothing (the executor holds its jobs out of its
  active list while it asks): `mend_cancel_during_status_check` cancels those too.

Both are applied by rules/common.smk in the process that polls; where the plugin or the
functions they wrap are absent, nothing is changed.
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
