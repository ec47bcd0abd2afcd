"""dlscale.plan.pluginfix: the SLURM plugin reads a cancelled job's sacct state as cancelled,
and an interrupt during a status query cancels the jobs under query."""

import asyncio
import inspect
import logging
import shlex
import threading
from pathlib import Path

import snakemake_executor_plugin_slurm as plugin
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

from dlscale.plan.pluginfix import (
    first_word_states,
    mend_cancel_during_status_check,
    mend_cancelled_states,
)

SACCT = Path(__file__).parents[1] / "data" / "sacct" / "job9.txt"  # real: CANCELLED by 0


def test_the_plugins_status_query_reads_cancelled_by_a_uid_as_cancelled(monkeypatch):
    command = shlex.join(["cat", str(SACCT)])  # sacct's answer, as the plugin parses it
    logger = logging.getLogger("test")
    unmended = asyncio.run(plugin.query_job_status(command, logger))[0]
    # the plugin's own reading (2.8.0): the whole string, which it takes for running;
    # once a release reads the first word itself, this workaround can go
    assert unmended["9"] == "CANCELLED by 0"
    monkeypatch.setattr(plugin, "query_job_status", plugin.query_job_status)
    assert mend_cancelled_states() and mend_cancelled_states()  # once, and idempotent
    states = asyncio.run(plugin.query_job_status(command, logger))[0]
    assert states == {**unmended, "9": "CANCELLED"}


def test_states_of_one_word_and_no_answer_are_left_as_they_are():
    assert first_word_states({"5": "RUNNING", "6": "PENDING"}) == {"5": "RUNNING",
                                                                   "6": "PENDING"}
    assert first_word_states(None) is None and first_word_states({}) == {}


def names_in(code) -> set[str]:
    """The global names a function's code (and the code nested in it) looks up."""
    found = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            found |= names_in(const)
    return found


def test_the_plugins_status_loop_still_calls_the_patched_name():
    """The workaround replaces the plugin module's `query_job_status`; it works only while
    the executor's status loop looks that name up in the module at each call. A release
    that imports the function into another module, or calls it through another name,
    would silently undo it: this fails first."""
    callers = [f for f in vars(plugin.Executor).values()
               if callable(f) and "query_job_status" in names_in(f.__code__)]
    assert callers, "no method of the plugin's Executor calls query_job_status"
    assert all(f.__globals__ is vars(plugin) for f in callers)


def test_snakemake_reads_a_resource_evaluators_parameters_where_they_are_kept():
    """rulefunctions.resources_signature_once keeps Resource.evaluate's parameters under
    Snakemake's FUNC_OVERWRITE_PARAMS_ATTR: it saves time only while Snakemake passes the
    bound `evaluate` to apply_input_function, which reads parameters through
    get_function_params. A Snakemake that changes either fails here."""
    import inspect

    from snakemake import rules
    from snakemake.common import get_function_params, get_input_function_aux_params
    from snakemake.resources import Resource

    from dlscale.plan.rulefunctions import PARAMS_ATTR, resources_signature_once

    assert PARAMS_ATTR is not None
    assert "val.evaluate," in inspect.getsource(rules.Rule.expand_resources)
    assert "get_input_function_aux_params" in names_in(rules.Rule.apply_input_function.__code__)
    assert "get_function_params" in names_in(get_input_function_aux_params.__code__)
    resources_signature_once()
    evaluate = Resource("mem_mb", lambda wildcards: 1000).evaluate
    kept = get_function_params(evaluate)
    assert kept is getattr(Resource.evaluate, PARAMS_ATTR)
    assert list(kept) == list(inspect.signature(evaluate).parameters)


def test_an_interrupt_during_a_status_query_cancels_the_jobs_under_query(monkeypatch):
    """The executor's status loop (RemoteExecutor._wait_for_jobs) empties its active list
    while the plugin's `check_active_jobs` asks SLURM; an interrupt then reaches `cancel`.
    Here the query is interrupted halfway, and SLURM's answer and scancel are recorded
    instead of sent (the SLURM test of an interrupted rerun sends them)."""
    jobs, cancelled = ["job 5", "job 6"], []

    async def query_interrupted(self, active_jobs):
        self.cancel()  # Ctrl-C while the query runs
        for job_info in active_jobs:
            yield job_info

    monkeypatch.setattr(plugin.Executor, "check_active_jobs", query_interrupted)
    monkeypatch.setattr(plugin.Executor, "cancel", RemoteExecutor.cancel)
    monkeypatch.setattr(plugin.Executor, "cancel_jobs", lambda self, a: cancelled.extend(a))
    monkeypatch.setattr(plugin.Executor, "shutdown", lambda self: None)
    executor = object.__new__(plugin.Executor)
    executor.lock, executor.active_jobs = threading.Lock(), []  # as the loop left them

    async def status_loop_once():
        return [job async for job in executor.check_active_jobs(list(jobs))]

    assert asyncio.run(status_loop_once()) == jobs and cancelled == []  # the plugin's own
    assert mend_cancel_during_status_check() and mend_cancel_during_status_check()
    assert asyncio.run(status_loop_once()) == jobs and cancelled == jobs
    executor.active_jobs, cancelled[:] = ["job 7"], []  # between queries: the held ones
    executor.cancel()
    assert cancelled == ["job 7", "job 5", "job 6"]


def test_the_executor_still_empties_its_active_list_while_it_queries():
    """What the mend relies on, read from the installed code: the status loop takes the
    active jobs out of the list and hands them to check_active_jobs; `cancel` cancels the
    list; the plugin's executor inherits `cancel`. A release that changes any of it fails
    here (and may have fixed the bug: then the mend can go)."""
    loop = inspect.getsource(RemoteExecutor._wait_for_jobs)
    assert "self.active_jobs.clear()" in loop and "self.check_active_jobs(active_jobs)" in loop
    assert "self.cancel_jobs(active_jobs)" in inspect.getsource(RemoteExecutor.cancel)
    assert "def cancel(" not in inspect.getsource(plugin.Executor)
    assert inspect.isasyncgenfunction(inspect.unwrap(plugin.Executor.check_active_jobs))
