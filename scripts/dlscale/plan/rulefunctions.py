"""Functions of the rules: Study methods with Snakemake's errors, their parameters read once.

Snakemake reads a rule function's parameters each time it calls it (`inspect.signature`),
a cost of every large dry run (docs/benchmarks.md); a function that carries them under
`FUNC_OVERWRITE_PARAMS_ATTR` (`signature_once`) is read once. A Snakemake without that
attribute inspects each call as before.
"""

from __future__ import annotations

import functools
import inspect

from dlscale.core.errors import PlanError
from dlscale.core.vocabulary import FORCED_ENV

try:
    from snakemake.common import FUNC_OVERWRITE_PARAMS_ATTR as PARAMS_ATTR
except ImportError:  # another Snakemake, or none (the package's unit tests)
    PARAMS_ATTR = None


def planned(method):
    """A Study method as a rule function, with PlanError shown as Snakemake's error."""
    from snakemake.exceptions import WorkflowError

    def call(*args):
        try:
            return method(*args)
        except PlanError as exc:
            raise WorkflowError(str(exc)) from None  # the one line the user needs

    return call


def signature_once(function):
    """`function`, its parameters read once and kept where Snakemake looks for them."""
    if PARAMS_ATTR:
        setattr(function, PARAMS_ATTR, inspect.signature(function).parameters)
    return function


def resources_signature_once() -> None:
    """The same for the resource evaluator Snakemake calls for each resource of each job
    (`Resource.evaluate`, a bound method, whose parameters are its function's without
    `self`): 11,000 of those inspections in that dry run."""
    if not PARAMS_ATTR:
        return
    from snakemake.resources import Resource

    evaluate = Resource.evaluate
    if not hasattr(evaluate, PARAMS_ATTR):
        bound = inspect.signature(functools.partial(evaluate, None)).parameters
        setattr(evaluate, PARAMS_ATTR, bound)



def note_forced(workflow) -> None:
    """Tell the point's launch.py, through its environment (inherited by local jobs,
    exported to SLURM's), whether the user forced its rerun (snakemake -F, -f, or -R
    naming the train rule or files of run folders): then a record completed while
    Snakemake was away is trained again, not kept. Not a rule param: a param that
    changes makes Snakemake rerun every point the next time. Called at `onstart`, before
    any job: while the Snakefile is parsed, Snakemake 9 has not set dag_settings yet."""
    import os

    dag_settings = workflow.dag_settings
    if dag_settings is None or not workflow.is_main_process:  # a job step forces its job
        return
    named = [str(t) for t in dag_settings.forcerun or ()]
    if dag_settings.forceall or dag_settings.forcetargets or "train" in named:
        os.environ[FORCED_ENV] = "*"
    else:
        os.environ[FORCED_ENV] = " ".join(named)


# A retry that only writes a record: one core of one node, no GPU, a few minutes
RECORD_ONLY = {"gres": "", "cpus_per_task": 1, "mem_mb": 1000, "nodes": 1, "runtime": 5,
               "tasks": None, "tasks_per_gpu": None, "mpi": None}


def first_attempt(function, then):
    """`function`'s value (of the rule's wildcards) on a job's first attempt, `then` on
    its retries."""
    return signature_once(
        lambda wildcards, attempt: function(wildcards) if attempt == 1 else then)


def retry_records_only(resources: dict) -> dict:
    """A rule's `resources` on its first attempt; on a retry (after SLURM ended the first:
    scancel, its time limit, a node's failure) RECORD_ONLY's, the rest kept (the site's
    slurm_extra), and `probe_attempt`, which the rule's shell reads to record only."""
    kept = {name: first_attempt(f, RECORD_ONLY[name]) if name in RECORD_ONLY else f
            for name, f in resources.items()}
    return kept | {"probe_attempt": signature_once(lambda wildcards, attempt: attempt)}
