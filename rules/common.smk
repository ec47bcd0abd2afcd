# Config loading and validation, sweep expansion and the small helpers the rules call.
import json
import re
import shlex
import sys
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

SCRIPTS = Path(workflow.basedir) / "scripts"
sys.path.insert(0, str(SCRIPTS))
from dlscale import outcomes, sweep, vocabulary  # noqa: E402
from dlscale.external import entry_key, resolve as resolve_external  # noqa: E402
from dlscale.sources import DATASETS, find_cached  # noqa: E402
from dlscale.sweep import SweepError, expand  # noqa: E402

URL_FILE_NAME = re.compile(r"[A-Za-z0-9._+-]+")

_md5 = config.get("data", {}).get("md5")
if isinstance(_md5, (int, float)) and not isinstance(_md5, bool):
    raise WorkflowError(
        f"data.md5 was read as the number {_md5!r}: put the checksum in quotes, "
        'e.g. md5: "c58f30108f718f92721af3b95e74349a"'
    )
validate(config, schema="../config/schema.yaml")

DATA = config["data"]
DATA_DIR = f"results/data/{DATA['dataset']}-{DATA['image_size']}px"

try:
    POINTS = {p.key: p for p in expand(config)}
except SweepError as exc:
    raise WorkflowError(f"invalid sweep: {exc}")


wildcard_constraints:
    dataset="|".join(DATASETS),
    size=r"\d+",
    filename=r"[^/]+",


def script(name):
    """A stage's command-line script, passed to rules as a param (provenance)."""
    return str(SCRIPTS / name)


def data_dir(wildcards, input):
    return str(Path(input.manifest).parent)


def resolve_source(dataset):
    """(path prepare_data.py reads, md5 it must check, {download target: (url, md5)})."""
    spec = DATASETS[dataset]
    configured = dataset == DATA["dataset"]
    source = DATA["source"] if configured else "auto"
    md5 = DATA["md5"] if configured else None
    official = {f.name: f for f in spec.files}
    if source == "auto":
        cached = find_cached(spec)
        if cached is not None:
            return str(cached), None, {}
        targets = {
            f"resources/downloads/{dataset}/{f.name}": (f.url, f.md5)
            for f in spec.files
        }
        path = (
            next(iter(targets))
            if len(targets) == 1
            else f"resources/downloads/{dataset}"
        )
        return path, None, targets
    if "://" in source:
        name = PurePosixPath(urlparse(source).path).name
        if not URL_FILE_NAME.fullmatch(name):
            raise WorkflowError(
                f"data.source '{source}': the file name '{name}' may hold only letters, "
                "digits and . _ + - (it names the downloaded file)"
            )
        if not md5 and name in official:
            md5 = official[name].md5
        target = f"resources/downloads/{dataset}/{name}"
        return target, None, {target: (source, md5)}
    path = Path(source).expanduser()
    if not path.exists():
        raise WorkflowError(
            f"data.source '{source}' does not exist: expected 'auto', an URL, "
            f"or a local {dataset} archive or folder"
        )
    if md5 and not path.is_file():
        raise WorkflowError(
            f"data.md5 is set but data.source '{source}' is a folder: a checksum applies "
            "to an archive file (leave md5 null for a folder)"
        )
    return str(path), md5, {}


def download_spec(wildcards):
    target = f"resources/downloads/{wildcards.dataset}/{wildcards.filename}"
    _, _, downloads = resolve_source(wildcards.dataset)
    if target not in downloads:
        raise WorkflowError(f"{target} is not a download of the configured data source")
    return downloads[target]


def download_url(wildcards):
    return download_spec(wildcards)[0]


def download_md5_flag(wildcards):
    md5 = download_spec(wildcards)[1]
    return f"--md5 {shlex.quote(md5)}" if md5 else ""


def prepare_input(wildcards):
    path, _, downloads = resolve_source(wildcards.dataset)
    return list(downloads) or [path]


def prepare_flags(wildcards):
    path, md5, _ = resolve_source(wildcards.dataset)
    flags = [
        f"--dataset {wildcards.dataset}",
        f"--source {shlex.quote(path)}",
        f"--image-size {wildcards.size}",
        f"--shards {DATA['shards']}",
    ]
    if md5:
        flags.append(f"--md5 {shlex.quote(md5)}")
    for key in ("limit_train", "limit_test"):
        if DATA[key] and wildcards.dataset == DATA["dataset"]:
            flags.append(f"--{key.replace('_', '-')} {DATA[key]}")
    return " ".join(flags)


# --- training points ---------------------------------------------------------------


def points_where(multi_task):
    """Regex of the run folders whose points do (or do not) start several workers."""
    keys = [k for k, p in POINTS.items() if (p.tasks > 1) == multi_task]
    return "|".join(re.escape(k) for k in keys) or "(?!)"


def point(wildcards):
    return POINTS[wildcards.point]


def point_attempt(wildcards):
    """Grows when an attempt at the point fails, so the next run plans it again."""
    return outcomes.planned_attempt(run_dir(wildcards.point))


def point_runtime(wildcards):
    """Minutes: runtime_min, times 1 + the timeouts since the point last completed."""
    return point(wildcards).runtime * outcomes.runtime_factor(run_dir(wildcards.point))


def run_folder(wildcards, output):
    return str(Path(output.run).parent)


def train_flags(wildcards):
    p = point(wildcards)
    flags = {
        "model": p.model,
        "gpus": p.gpus,
        "nodes": p.nodes,
        "strategy": p.strategy,
        "epochs": p.epochs,
        "base-lr": p.base_lr,
        "lr-scaling": p.lr_scaling,
        "warmup-epochs": p.warmup_epochs,
        "momentum": p.momentum,
        "precision": p.precision,
        "device": p.device,
        "seed": p.seed,
        "shuffle-buffer": DATA["shuffle_buffer"],
    }
    if p.batch_per_gpu == "auto":
        flags["batch-per-gpu-file"] = batch_file(p)
    else:
        flags["batch-per-gpu"] = p.batch_per_gpu
    text = " ".join(f"--{k} {v}" for k, v in flags.items())
    return text + (" --xla" if p.xla else " --no-xla")


def train_python(wildcards):
    """The interpreter of a point: the Horovod environment's for horovod points."""
    if point(wildcards).strategy != "horovod":
        return "python"
    python = Path(config["horovod"]["python"])
    return str(python if python.is_absolute() else Path(workflow.basedir) / python)


def launch_flags(wildcards):
    p = point(wildcards)
    flags = f"--tasks {p.tasks} --tasks-per-node {p.tasks_per_node} --nodes {p.nodes}"
    if p.strategy == "horovod":
        flags += " --horovod"
        if config["horovod"]["mpi_launcher"]:
            flags += f" --mpi-launcher {shlex.quote(config['horovod']['mpi_launcher'])}"
    return flags


def batch_file(p):
    return f"results/batch/{p.model}/{p.precision}.json"


def train_input(wildcards):
    p = point(wildcards)
    inputs = {"manifest": f"{DATA_DIR}/manifest.json"}
    if p.batch_per_gpu == "auto":
        inputs["batch"] = batch_file(p)
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


def tasks_per_gpu(wildcards):
    """1 when every worker owns one GPU (SLURM's --ntasks-per-gpu=1), else 0 (unset)."""
    p = point(wildcards)
    return 1 if p.tasks_per_node == p.gpus_per_node else 0


def run_dir(key):
    return f"results/runs/{key}"


# --- analysis ---------------------------------------------------------------------

PLOT_NAMES = vocabulary.PLOT_NAMES


def _external_runs():
    """{key: (entry, per-run values)}, each log read now: what it lacks fails here."""
    runs = {}
    for index, item in enumerate(config["external_runs"]):
        where = f"external_runs[{index}]"
        for name in ("log", "err_log"):
            if item.get(name) and not Path(item[name]).is_file():
                raise WorkflowError(f"{where}: {name} '{item[name]}' does not exist")
        key = entry_key(item)
        if key in runs:
            raise WorkflowError(
                f"{where}: a second entry for model {item['model']} and log "
                f"{Path(item['log']).name} (set repeat for a repeated study)"
            )
        try:
            per_run, warnings = resolve_external(item, where)
        except ValueError as exc:
            raise WorkflowError(str(exc))
        for warning in warnings:
            print(f"dlscale: warning: {warning}", file=sys.stderr)
        runs[key] = (item, per_run)
    return runs


EXTERNAL = _external_runs()

for _key in POINTS:
    _failed = outcomes.failed_record(run_dir(_key))
    if _failed:
        print(
            f"dlscale: point {_key} ended {_failed['status']} ({_failed.get('failure')}): "
            "it is planned again",
            file=sys.stderr,
        )


def point_meta(wildcards):
    """The planned values; run.json's (the replicas TensorFlow used ...) replace them."""
    p = point(wildcards)
    meta = {
        "run": p.key,
        "series": p.series,
        "repeat": p.rep,
        "model": p.model,
        "gpus": p.gpus,
        "gpus_asked": p.gpus,
        "nodes": p.nodes,
        "strategy": p.strategy,
        "precision": p.precision,
        "epochs_expected": p.epochs,
    }
    return meta_flags(meta)


def meta_flags(meta):
    """--meta KEY=VALUE flags for parse_logs.py, quoted for the shell."""
    return " ".join(f"--meta {shlex.quote(f'{k}={v}')}" for k, v in meta.items())


def external_log(wildcards):
    return EXTERNAL[wildcards.ext][0]["log"]


def external_meta(wildcards):
    """--meta for the entry, --per-run for each run's values, --pattern for its patterns."""
    item, per_run = EXTERNAL[wildcards.ext]
    meta = {
        "run": f"external/{wildcards.ext}",
        "source": "external",
        "series": item.get("label", f"{item['model']} (external)"),
        "model": item["model"],
        "nodes": item["nodes"],
        "repeat": item["repeat"],
        "images_per_epoch": item["train_images"],
        "precision": item["precision"],
        "strategy": item["strategy"],
    }
    patterns = " ".join(
        f"--pattern {shlex.quote(f'{k}={v}')}"
        for k, v in item.get("patterns", {}).items()
    )
    per_run_flag = f"--per-run {shlex.quote(json.dumps(per_run))}"
    return f"{meta_flags(meta)} {per_run_flag} {patterns}".strip()


def run_tables():
    return [f"{run_dir(k)}/epochs.csv" for k in POINTS] + [
        f"results/external/{k}/epochs.csv" for k in EXTERNAL
    ]


def plot_subtitle():
    if not POINTS:
        return "external runs"
    t = config["training"]
    return (
        f"{DATA['dataset']} at {DATA['image_size']} px, {t['batch_per_gpu']} images per "
        f"GPU per step, {t['epochs']} epochs, device {t['device']}"
    )


def all_targets():
    if not POINTS and not EXTERNAL:
        raise WorkflowError(
            "nothing to run: sweep.models is empty and there are no external_runs"
        )
    return (
        ["results/tables/scaling.csv", "results/tables/failed.csv"]
        + [f"results/plots/{n}.png" for n in PLOT_NAMES]
        + ["results/checks/points.txt"]
    )
