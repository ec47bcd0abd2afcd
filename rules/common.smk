# Config validation and the small wildcard functions the rules call; what needs no
# wildcard lives in the package (dlscale/plan.py), where unit tests reach it.
import re
import shlex
import sys
from functools import partial
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

SCRIPTS = Path(workflow.basedir) / "scripts"
sys.path.insert(0, str(SCRIPTS))  # for a snakemake that runs outside the project's venv
from dlscale import schema, vocabulary  # noqa: E402
from dlscale import contract as C  # noqa: E402
from dlscale.plan import PlanError, Study, check_raw_config  # noqa: E402
from dlscale.sources import DATASETS  # noqa: E402
from dlscale.tfrecords import MANIFEST  # noqa: E402

try:
    check_raw_config(config)
    validate(config, schema=str(schema.PATH))
    # inside a SLURM job, Snakemake parses this file again to run the job's one rule
    STUDY = Study(config, workflow.basedir, job_step=not workflow.is_main_process)
    STUDY.announce()
except PlanError as exc:
    raise WorkflowError(str(exc))
POINTS, EXTERNAL, DATA_DIR = STUDY.points, STUDY.external, STUDY.data_dir
PLOT_NAMES = vocabulary.PLOT_NAMES
# the site's software stack for the rules that run TensorFlow (prepare, batch search,
# train): environment modules (--sdm env-modules) or a container (--sdm apptainer)
SOFTWARE_MODULES = config["software"]["modules"]
SOFTWARE_CONTAINER = config["software"]["container"]


wildcard_constraints:
    dataset="|".join(DATASETS),
    size=r"\d+",
    filename=r"[^/]+",


def script(name):
    """A stage's command-line script, passed to rules as a param (provenance)."""
    return str(SCRIPTS / name)


def planned(method):
    """A Study method as a rule function, with PlanError shown as Snakemake's error."""

    def call(*args):
        try:
            return method(*args)
        except PlanError as exc:
            raise WorkflowError(str(exc))

    return call


def by_wildcards(method, *names):
    """A Study method of the named wildcards' values as a rule function."""
    return lambda wildcards: planned(method)(*(getattr(wildcards, n) for n in names))


def one_of(keys):
    return "|".join(re.escape(k) for k in keys) or "(?!)"


def data_dir(wildcards, input):
    return str(Path(input.manifest).parent)


def point(wildcards):
    return POINTS[wildcards.point]


def of_point(method):
    """A Study method of a Point as a function of the rule's wildcards."""
    return lambda wildcards: method(point(wildcards))


def folder_of(output_key):
    """The folder of one of the outputs (by name or index), as a param."""
    return lambda wildcards, output: str(Path(output[output_key]).parent)


def point_resource(name):
    """A rule resource read from the point's expansion (see dlscale/sweep.py)."""

    def resource(wildcards):
        value = getattr(point(wildcards), name)
        return "" if value is None else value  # gres null: request no GRES

    return resource


SITE_SLURM_EXTRA = STUDY.site_slurm_extra(
    getattr(workflow.resource_settings.default_resources, "args", None)
)


def point_resources(*per_task):
    """The train rules' resources: the point's, and `per_task` ones for a job of several
    tasks (the `mpi` resource keeps the SLURM plugin from starting one step per task).
    """
    resources = {
        name: point_resource(name)
        for name in ("gres", "cpus_per_task", "mem_mb", "nodes") + per_task
    }
    resources["runtime"] = of_point(STUDY.runtime)
    resources["slurm_extra"] = lambda wc: STUDY.slurm_extra(point(wc), SITE_SLURM_EXTRA)
    return resources | ({"mpi": "srun"} if per_task else {})


onstart:
    # what `dlscale status` reports on: the points this run planned
    if workflow.is_main_process:
        STUDY.write_plan()
