# Config validation and the small wildcard functions the rules call; what needs no
# wildcard lives in the package (dlscale/plan.py), where unit tests reach it.
import re
import shlex
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

SCRIPTS = Path(workflow.basedir) / "scripts"
sys.path.insert(0, str(SCRIPTS))  # for a snakemake that runs outside the project's venv
from dlscale import schema, sweep, vocabulary  # noqa: E402
from dlscale import contract as C  # noqa: E402
from dlscale.plan import PlanError, Study, batch_file, check_raw_config  # noqa: E402
from dlscale.sources import DATASETS, FOLDER  # noqa: E402
from dlscale.tfrecords import MANIFEST  # noqa: E402

try:
    check_raw_config(config)
    validate(config, schema=str(schema.PATH))
    # inside a SLURM job, Snakemake parses this file again to run the job's one rule
    STUDY = Study(config, workflow.basedir, job_step=not workflow.is_main_process)
except PlanError as exc:
    raise WorkflowError(str(exc))
for _note in STUDY.notes():
    print(f"dlscale: {_note}", file=sys.stderr)
if workflow.is_main_process:
    try:  # an image folder's content, as the input that prepares it again when it changes
        if _note := STUDY.record_listing():
            print(f"dlscale: {_note}", file=sys.stderr)
    except OSError as exc:
        raise WorkflowError(f"cannot write the image folder's listing: {exc}")
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


def one_of(keys):
    return "|".join(re.escape(k) for k in keys) or "(?!)"


def data_dir(wildcards, input):
    return str(Path(input.manifest).parent)


def download_url(wildcards):
    return planned(STUDY.download)(wildcards.dataset, wildcards.filename)[0]


def download_md5_flag(wildcards):
    md5 = planned(STUDY.download)(wildcards.dataset, wildcards.filename)[1]
    return f"--md5 {md5}" if md5 else ""  # checked hex (schema) or official


def prepare_input(wildcards):
    if wildcards.dataset == FOLDER:  # what the folder holds, not its top folder's mtime
        return [STUDY.listing_file(wildcards.size)]
    source = planned(STUDY.source)(wildcards.dataset)
    return list(source.downloads) or [source.path]


def prepare_flags(wildcards):
    return planned(STUDY.source)(wildcards.dataset).prepare_flags(
        STUDY.data, wildcards.size
    )


def points_where(multi_task, command=False):
    """Regex of the run folders of dlscale's (or with `command` sweep.commands') points
    that do (or do not) start several tasks."""
    return one_of(
        k
        for k, p in POINTS.items()
        if bool(p.command) == command and (p.tasks > 1) == multi_task
    )


def point(wildcards):
    return POINTS[wildcards.point]


def of_point(method):
    """A Study method of a Point as a function of the rule's wildcards."""
    return lambda wildcards: method(point(wildcards))


def of_external(method):
    return lambda wildcards: method(wildcards.ext)


def folder_of(output_key):
    """The folder of one of the outputs (by name or index), as a param."""
    return lambda wildcards, output: str(Path(output[output_key]).parent)


def train_input(wildcards):
    p = point(wildcards)
    inputs = {"manifest": f"{DATA_DIR}/{MANIFEST}"}
    if p.batch_per_gpu == "auto":
        inputs["batch"] = batch_file(p)
    if p.model_from:  # an edited model trains again
        inputs["model"] = STUDY.model_files(p)
    return inputs


def finder_resource(name):
    """A batch-size search's resource: one GPU's worth of its model's (overrides applied)."""
    return lambda wildcards: sweep.finder_resources(config, wildcards.model)[name]


def point_resource(name):
    """A rule resource read from the point's expansion (see dlscale/sweep.py)."""

    def resource(wildcards):
        value = getattr(point(wildcards), name)
        return "" if value is None else value  # gres null: request no GRES

    return resource


def site_slurm_extra():
    """The profile's default `slurm_extra`, kept beside the train rules' own."""
    for arg in (
        getattr(workflow.resource_settings.default_resources, "args", None) or []
    ):
        name, _, value = arg.partition("=")
        if name.strip() == "slurm_extra":
            return value.strip().strip("'\"") or None
    return None


SITE_SLURM_EXTRA = site_slurm_extra()


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


def all_targets():
    return (
        [C.table("scaling"), C.table("failed")]
        # each point's record too: one that went missing is trained again, never "up to
        # date" because the tables built from it still exist
        + [f"{C.RUNS}/{key}/{C.RUN_JSON}" for key in POINTS]
        + [f"{C.PLOTS}/{n}.png" for n in PLOT_NAMES]
        + [f"{C.CHECKS}/points.txt", C.REPORT_PAGE]
        + ([C.table("verdicts")] if STUDY.references else [])
        + ([C.table("compared")] if STUDY.compare else [])
        + ([C.table("history")] if STUDY.history_db else [])
    )


def report_first_page():
    """What `snakemake --report` opens on: the study's answer once written, else a page
    that says how to get it."""
    page = Path(C.REPORT_PAGE)
    return str(page.resolve()) if page.exists() else "report/workflow.rst"


def history_studies():
    """The earlier studies' points the plots draw (history.compare), or none."""
    compare = STUDY.history_db and config["history"]["compare"]
    return [C.table("history_studies")] if compare else []


onstart:
    # what `dlscale status` reports on: the points this run planned
    if workflow.is_main_process:
        STUDY.write_plan()
