"""A bug of the Snakemake SLURM executor plugin, worked around until a release fixes it.

snakemake-executor-plugin-slurm (2.8.0, the newest release on 2026-11-26) polls job
states with `sacct -X --parsable2 --format=JobIdRaw,State ...` where the site keeps job
accounting. For a job cancelled with `scancel` (by its user, an admin, a preemption that
cancels) sacct names the state `CANCELLED by <uid>`. The plugin compares the whole string
with its failed states ("CANCELLED", "FAILED", ...), finds none, and takes the job for
running: the study never ends (seen on the test cluster, docs/slurm.md).
Snakemake-Profiles/slurm had the same bug and took the state's first word (its pull
request 22, 2019); `first_word_states` does that to the plugin's query result.

It is applied by rules/common.smk in the Snakemake process that polls (the login node's).
Guarded: where the plugin is absent, or has no `query_job_status` to wrap, nothing is
changed; where a state already is one word, the result is the plugin's own.
"""

from __future__ import annotations

import functools

WRAPPED = "_dlscale_first_word_states"


def first_word_states(states: dict | None) -> dict | None:
    """{job: state} with each state cut to its first word ("CANCELLED by 0": CANCELLED)."""
    if not states:
        return states
    return {job: (state.split() or [state])[0] for job, state in states.items()}


def mend_cancelled_states() -> bool:
    """Wrap the plugin's status query (`query_job_status`, as its executor module calls
    it) so that `CANCELLED by <uid>` reads CANCELLED; whether it is wrapped now."""
    try:
        import snakemake_executor_plugin_slurm as plugin
    except ImportError:
        return False
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
