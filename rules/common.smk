# Config validation and the small wildcard functions the rules call; what needs no
# wildcard lives in the package (dlscale/plan/study.py), where unit tests reach it.
import re
import shlex
import sys
from functools import partial
from pathlib import Path

from snakemake.exceptions import WorkflowError

SCRIPTS = Path(workflow.basedir) / "scripts"
sys.path.insert(0, str(SCRIPTS))  # for a snakemake that runs outside the project's venv
from dlscale.core import contract as C  # noqa: E402
from dlscale.core import schema, vocabulary  # noqa: E402
from dlscale.data.datasets import DATASETS  # noqa: E402
from dlscale.plan import pluginfix, probes, sweep  # noqa: E402
from dlscale.plan.rulefunctions import note_forced, planned  # noqa: E402
from dlscale.plan.rulefunctions import resources_signature_once  # noqa: E402
from dlscale.plan.rulefunctions import retry_records_only, signature_once  # noqa: E402
from dlscale.plan.study import PlanError, Study, check_raw_config  # noqa: E402

try:
    check_raw_config(config)
    schema.validate(config)  # and fills in the defaults
    # in a SLURM job, Snakemake parses this file again to run the job's one rule
    STUDY = Study(config, workflow.basedir, job_step=not workflow.is_main_process)
    STUDY.announce()
except PlanError as exc:
    raise WorkflowError(str(exc))
POINTS, DATA_DIR, ANALYSIS = STUDY.points, STUDY.data_dir, STUDY.analysis
EXTERNAL = ANALYSIS.external
POINT = sweep.POINT_PATTERN  # a run folder's key, whatever the sweep's size
RESOURCES = ("gres", "cpus_per_task", "mem_mb", "nodes")
PLOT_NAMES, WHY_PLOTS = vocabulary.PLOT_NAMES, vocabulary.WHY_PLOTS
# the site's software for the TensorFlow rules: modules (--sdm env-modules) or a container
SOFTWARE_MODULES = config["software"]["modules"]
SOFTWARE_CONTAINER = config["software"]["container"]


wildcard_constraints:
    dataset="|".join(DATASETS),
    size=r"\d+",
    filename=r"[^/]+",


def script(name):
    """A stage's command-line script, passed to rules as a param (provenance)."""
    return str(SCRIPTS / name)


resources_signature_once()
if workflow.is_main_process:  # the one that polls SLURM and cancels on Ctrl-C
    pluginfix.mend()


def by_wildcards(method, *names):
    """A Study method of the named wildcards' values as a rule function."""
    return signature_once(
        lambda wildcards: planned(method)(*(getattr(wildcards, n) for n in names))
    )


def one_of(keys):
    return "|".join(re.escape(k) for k in keys) or "(?!)"


@signature_once
def data_dir(wildcards, input):
    return str(Path(input.manifest).parent)


def point(wildcards):
    probe = getattr(wildcards, "probe", None)  # a probe takes its point's allocation
    try:
        return PROBES[probe] if probe else POINTS[wildcards.point]
    except KeyError:
        key = probe or wildcards.point
        raise WorkflowError(f"{key}: no such point in this study's sweep")


def of_point(method):
    """A Study method of a Point as a function of the rule's wildcards."""
    return signature_once(lambda wildcards: method(point(wildcards)))


def folder_of(output_key):
    """The folder of one of the outputs (by name or index), as a param."""
    return signature_once(
        lambda wildcards, output: str(Path(output[output_key]).parent)
    )


def folder_of_input(input_key):
    """The folder of one of the inputs (by name or index), as a param."""
    return signature_once(lambda wildcards, input: str(Path(input[input_key]).parent))


def point_resource(name):
    """A rule resource read from the point's expansion (see dlscale/plan/sweep.py)."""

    def resource(wildcards):
        value = getattr(point(wildcards), name)
        return "" if value is None else value  # gres null: request no GRES

    return signature_once(resource)


SITE_SLURM_EXTRA = STUDY.site_slurm_extra(
    getattr(workflow.resource_settings.default_resources, "args", None)
)


def point_resources():
    """The train rule's resources. Only a point of several tasks gets `tasks` and `mpi`
    (None leaves a resource out; the SLURM plugin refuses `mpi` for one task)."""
    resources = {name: point_resource(name) for name in RESOURCES}
    return resources | {
        "runtime": of_point(STUDY.runtime),
        "slurm_extra": of_point(lambda p: STUDY.slurm_extra(p, SITE_SLURM_EXTRA)),
        "tasks": of_point(lambda p: p.tasks if p.tasks > 1 else None),
        "tasks_per_gpu": of_point(lambda p: p.tasks_per_gpu),
        "mpi": of_point(lambda p: "srun" if p.tasks > 1 else None),
    }


onstart:
    # what `dlscale status` reports on: the points this run planned
    if workflow.is_main_process:
        STUDY.write_plan()
    note_forced(workflow)  # -R/-F/-f, which Snakemake 9 reads after parsing
