"""Sweep expansion: the validated config becomes one Point per training run.

Pure Python (no Snakemake, no TensorFlow) so that rules/common.smk and the tests share
it. A point's `key` is its run folder below results/runs/: `{model}/gpus{g}/rep{r}` for
the study, with `nodes{n}/` (an explicit list of node counts), `{strategy}/`, `{loop}/`,
`{precision}/`, `keras{k}/` and `{backend}/` levels added only when the sweep varies
them. With `nodes: auto` a point's nodes follow from its GPUs (as few nodes as hold
them), so no level is needed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

from dlscale.core import models
from dlscale.core.errors import PlanError
from dlscale.plan.knobs import OWN_KNOBS, check_knobs, knob_sets, with_knobs
from dlscale.train import usermodel
from dlscale.train.keraschoice import default_strategy, framework_problem


class SweepError(PlanError):
    """A sweep that cannot run (a planning error, said as "invalid sweep: ...")."""

    def __str__(self) -> str:
        return f"invalid sweep: {super().__str__()}"


# what a point's key looks like (`{series}[/levels]/gpus{g}/rep{r}`): the train and
# tabulate rules' wildcard constraint, the same length however many points there are
POINT_PATTERN = r"[^/]+(?:/[^/]+)*?/gpus\d+/rep\d+"


@dataclass(frozen=True)
class Point:
    key: str
    series: str          # one line in the plots: model, plus what else the sweep varies
    model: str           # a model's name, or the label of your own (model_from)
    model_from: str | None   # your own model's builder: path/to/file.py:function
    command: str | None      # your own training command (sweep.commands), `model` its label
    gpus: int            # total replicas
    nodes: int
    gpus_per_node: int
    rep: int
    strategy: str
    precision: str
    keras: int           # 2: tf-keras; 3: Keras 3 (docs/frameworks.md)
    backend: str         # Keras 3's backend: tensorflow, jax or torch
    epochs: int
    batch_per_gpu: int | str   # "auto": results/batch/{model}/{precision}.json decides
    global_batch: int | None
    scaling: str         # weak: batch per GPU kept; strong: global batch kept
    base_lr: float
    optimizer: str
    loop: str
    lr_scaling: str
    warmup_epochs: float
    momentum: float
    xla: bool
    device: str
    seed: int
    communication: str
    save_model: bool
    tensorboard: bool
    profile_steps: tuple[int, int] | None
    tasks: int           # worker processes (1 for mirrored)
    tasks_per_node: int
    cpus_per_task: int
    mem_mb: int          # per node
    runtime: int         # minutes
    gres: str | None     # per node
    knobs: tuple[tuple[str, object], ...] = ()  # sweep.knobs: (name, value) of this point

    @property
    def cores(self) -> int:
        """The cores all its tasks use: the point's `threads` (profiles/local runs no other
        point on them)."""
        return self.cpus_per_task * self.tasks

    @property
    def tasks_per_gpu(self) -> int | None:
        """Several tasks: 1 when every worker owns one GPU (SLURM's --ntasks-per-gpu=1),
        else 0 (unset); None for one task (for several, the SLURM plugin would take `tasks`
        as tasks per GPU on a GPU job)."""
        if self.tasks == 1:
            return None
        return 1 if self.tasks_per_node == self.gpus_per_node else 0


def model_settings(config: dict, model: str) -> dict:
    """training and resources settings of a model, its per-model overrides applied."""
    return {**config["training"], **config["resources"], **config.get("models", {}).get(model, {})}


def finder_resources(config: dict, model: str) -> dict:
    """One GPU's worth of a model's resources, for its batch-size search."""
    over, gres = model_settings(config, model), config["resources"]["gres"]
    return {"gres": gres.format(gpus=1) if gres else "", "cpus_per_task": over["cpus_per_gpu"],
            "mem_mb": over["mem_mb_per_gpu"], "runtime": over["runtime_min"]}


def folder_listing(data: dict):
    """The images of data.source (listed, not read; limits applied), or PlanError."""
    from dlscale.data.datasets import DatasetError
    from dlscale.data.imagefolder import scan

    try:
        return scan(Path(data["source"]).expanduser(), data["test_fraction"],
                    {"train": data["limit_train"], "test": data["limit_test"]})
    except DatasetError as exc:  # a limit names itself, anything else is the folder's
        raise PlanError(f"{'' if str(exc).startswith('data.') else 'data.source: '}{exc}",
                        ) from None


def check_batches(points: list[Point], config: dict, train_images: int | None = None) -> None:
    """What train.py would refuse, refused before any job: a global batch larger than the
    training images (data.limit_train, or the dataset's size: the official one's, or
    `train_images`, what an image folder holds), and a batch search on CPUs."""
    from dlscale.data.datasets import DATASETS, FOLDER

    data = config["data"]
    known = DATASETS[data["dataset"]].train_images
    if data["dataset"] == FOLDER:
        known = train_images or folder_listing(data).available["train"]
    if data["limit_train"] and data["limit_train"] > known:
        raise SweepError(f"data.limit_train is {data['limit_train']} but {data['dataset']} has "
                         f"{known} training images")
    images, where = ((data["limit_train"], "data.limit_train") if data["limit_train"] else
                     (known, f"{data['dataset']}'s training set"))
    if config["training"]["communication"] == "nccl" and config["training"]["device"] == "cpu":
        raise SweepError("training.communication nccl needs GPUs, but training.device is cpu: "
                         "use auto or ring")
    for p in points:
        if p.batch_per_gpu == "auto" and p.device == "cpu":
            raise SweepError(f"point {p.key}: batch_per_gpu auto searches on a GPU, but "
                             "training.device is cpu: give batch_per_gpu as a number")
        if p.global_batch is not None and p.global_batch > images:
            raise SweepError(
                f"point {p.key}: global batch {p.global_batch} (batch_per_gpu "
                f"{p.batch_per_gpu} x {p.gpus} GPUs) is larger than the {images} training "
                f"images of {where}: lower batch_per_gpu or raise data.limit_train")


def node_counts(gpus: int, nodes, per_node_max: int) -> list[int]:
    """The node counts a point with `gpus` GPUs is tried on: auto = as few as hold them."""
    return [math.ceil(gpus / per_node_max)] if nodes == "auto" else list(nodes)


def why_not(gpus: int, nodes: int, chosen: str, strategy_listed: bool, config: dict) -> str | None:
    """Why `gpus` GPUs on `nodes` nodes with strategy `chosen` cannot run, or None."""
    most = config["resources"]["max_gpus_per_node"]
    if gpus < nodes:
        return f"{gpus} GPU(s) cannot span {nodes} nodes"
    if gpus % nodes:
        return f"{gpus} GPUs cannot be shared equally by {nodes} nodes"
    if gpus // nodes > most:
        return (f"{gpus} GPUs on {nodes} node(s) need {gpus // nodes} GPUs per node, but "
                f"resources.max_gpus_per_node is {most}")
    if chosen == "mirrored" and nodes > 1:
        return (f"strategy mirrored runs on one node, not {nodes}"
                + ("" if strategy_listed else ": use multiworker for multi-node points"))
    if chosen == "horovod" and nodes > 1 and not config["horovod"]["mpi_launcher"]:
        return (f"strategy horovod across {nodes} nodes needs Horovod built with MPI and "
                "horovod.mpi_launcher (e.g. 'mpirun')")
    return None


def batch_of(over: dict, gpus: int, scaling: str, model: str) -> tuple[int | str, int | None]:
    """(batch per GPU, global batch): weak keeps the first, strong the second."""
    if scaling == "weak":
        per_gpu = over["batch_per_gpu"]
        return per_gpu, (per_gpu * gpus if per_gpu != "auto" else None)
    total = over.get("global_batch")
    if not total:
        raise SweepError(f"sweep.scaling strong keeps the global batch, but {model} has none: "
                         "set training.global_batch (or models.<model>.global_batch)")
    if total % gpus:
        raise SweepError(f"sweep.scaling strong: global batch {total} of {model} cannot be "
                         f"split equally over {gpus} GPUs")
    return total // gpus, total


def check_gres(template: str | None) -> None:
    """resources.gres may name only {gpus} (the GPUs per node); SweepError otherwise."""
    import string

    if not template:
        return
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as exc:
        raise SweepError(f"resources.gres '{template}' is not a template ({exc})") from None
    unknown = [f for f in fields if f != "gpus"]
    if unknown:
        raise SweepError(f"resources.gres '{template}' names {{{unknown[0]}}}: the only "
                         "placeholder is {gpus} (the GPUs per node), e.g. 'gpu:v100:{gpus}'")


# the sweep's axes that a point names by the same word: a value asked for must give a point
SWEPT_AXES = ("keras", "backend", "strategy", "loop", "precision")


def check_size(config: dict, *axes: list) -> None:
    """SweepError before any point is made when every combination of the sweep's axes (an
    upper bound of its points) passes sweep.max_points."""
    sweep = config["sweep"]
    nodes = 1 if sweep["nodes"] == "auto" else len(sweep["nodes"])
    combinations = ((len(usermodel.entries(sweep["models"])) + len(sweep["commands"]))
                    * len(sweep["gpus"]) * nodes * sweep["repeats"]
                    * math.prod(len(axis) for axis in axes)
                    * math.prod(len(v) for v in (sweep.get("knobs") or {}).values()))
    if combinations > sweep["max_points"]:
        raise SweepError(f"the sweep combines into {combinations} points, more than "
                         f"sweep.max_points ({sweep['max_points']}): check its axes, or "
                         "raise sweep.max_points to plan them all")


def plan_sweep(config: dict, checked: bool = False, train_images: int | None = None,
               ) -> tuple[list[Point], list[str]]:
    """All points of the sweep in a stable order, and a note per combination of GPUs,
    nodes and strategy that cannot run and was left out. Raises SweepError on a setting
    that cannot run at all, or when no point is left. `checked`: the batches were
    checked against the data when this config was planned (see plan.Study's job_step);
    `train_images`: an image folder's, when the caller has listed it."""
    sweep, training, res = config["sweep"], config["training"], config["resources"]
    check_gres(res["gres"])
    precisions = sweep.get("precision") or [training["precision"]]
    strategies = sweep.get("strategy") or [None]
    loops = sweep.get("loop") or [training["loop"]]
    frameworks = list(itertools.product(sweep.get("keras") or [training["keras"]],
                                        sweep.get("backend") or [training["backend"]]))
    levels = (sweep["nodes"] != "auto" and len(sweep["nodes"]) > 1,
              len(strategies) > 1, len(loops) > 1, len(precisions) > 1,
              len(sweep.get("keras") or ()) > 1, len(sweep.get("backend") or ()) > 1)
    scaling = sweep["scaling"]
    image_size = config["data"]["image_size"]
    check_size(config, strategies, loops, precisions, frameworks)
    check_knobs(config)
    varied = {n for n, v in (sweep.get("knobs") or {}).items() if len(v) > 1}
    points, skipped, lost = [], {}, {}
    for (model, builder), strategy, loop, precision, (keras, backend), knobs, gpus, rep in \
            itertools.product(usermodel.entries(sweep["models"]), strategies, loops,
                              precisions, frameworks, knob_sets(config, OWN_KNOBS),
                              sweep["gpus"], range(1, sweep["repeats"] + 1)):
        # keras.applications checks this at build time; here it fails before any job
        need = 1 if builder else models.min_image_size(model)
        if image_size < need:
            raise SweepError(f"model {model} needs images of at least {need}px, but "
                             f"data.image_size is {image_size}")
        over = {**model_settings(config, model), **dict(knobs)}
        batch_per_gpu, global_batch = batch_of(over, gpus, scaling, model)
        for nodes in node_counts(gpus, sweep["nodes"], res["max_gpus_per_node"]):
            chosen = strategy or default_strategy(nodes, keras, backend)
            reason = why_not(gpus, nodes, chosen, strategy is not None, config)
            what = f"{gpus} GPU(s) on {nodes} node(s) with {chosen}"
            if not reason and models.torch_only(model) and backend != "torch":
                reason = f"model {model} is torchvision's: it trains on backend torch only"
            if not reason and (reason := framework_problem(
                    keras, backend, chosen, nodes, loop, batch_per_gpu,
                    training["tensorboard"])):
                what += f" on Keras {keras} ({backend}, loop {loop})"
            if reason:
                skipped.setdefault(what, reason)
                values = {"keras": keras, "backend": backend, "strategy": strategy,
                          "loop": loop, "precision": precision}
                for axis in SWEPT_AXES:
                    lost.setdefault((axis, values[axis]), reason)
                continue
            if chosen == "horovod" and loop == "custom":
                raise SweepError("the custom training loop runs mirrored and multiworker points; "
                                 "horovod points train with fit (training.loop or sweep.loop)")
            points.append(with_knobs(make_point(
                config, (model, builder), gpus, nodes, chosen, loop, precision, rep,
                batch_per_gpu, global_batch, levels=levels, framework=(keras, backend)),
                knobs, varied))
    trained = list(points)
    points += command_points(config, skipped, varied)
    notes = [f"sweep: {what} left out: {reason}" for what, reason in skipped.items()]
    if (sweep["models"] or sweep["commands"]) and not points:
        raise SweepError("no point of the sweep can run: " + "; ".join(
            dict.fromkeys(skipped.values())))
    for axis in SWEPT_AXES:
        for value in (sweep.get(axis) or []) if trained else []:
            if not any(getattr(p, axis) == value for p in trained):  # asked for, none left
                raise SweepError(f"sweep.{axis}: {value} gives no point that can run: "
                                 f"{lost.get((axis, value), 'every point was left out')}")
    check_points(points, config, checked, train_images)
    return points, notes


COMMAND = "command"  # the strategy column of a command's points: the command decides
TASKS = {"one": lambda gpus, nodes: 1, "per_gpu": lambda gpus, nodes: gpus,
         "per_node": lambda gpus, nodes: nodes}


def command_spec(spec) -> dict:
    """A sweep.commands value as {run, tasks, train_images, patterns, parameters}."""
    spec = {"run": spec} if isinstance(spec, str) else spec
    return {"tasks": "one", "train_images": None, "patterns": None, "parameters": None,
            **spec}


def command_points(config: dict, skipped: dict, varied: set = frozenset()) -> list[Point]:
    """The points of sweep.commands: one per command x knobs x GPUs x nodes x repeat,
    each run once in a job holding its GPUs and `tasks` SLURM tasks."""
    sweep, res = config["sweep"], config["resources"]
    points = []
    for (label, spec), knobs, gpus, rep in itertools.product(
            sweep["commands"].items(), knob_sets(config), sweep["gpus"],
            range(1, sweep["repeats"] + 1)):
        spec = command_spec(spec)
        over = {**model_settings(config, label), **dict(knobs)}
        batch_per_gpu, global_batch = batch_of(over, gpus, sweep["scaling"], label)
        if batch_per_gpu == "auto":
            raise SweepError(f"sweep.commands.{label}: batch_per_gpu auto searches built-in "
                             "models only; set a number (models.<label>.batch_per_gpu)")
        for nodes in node_counts(gpus, sweep["nodes"], res["max_gpus_per_node"]):
            reason = why_not(gpus, nodes, COMMAND, False, config)
            if reason:
                skipped.setdefault(f"{gpus} GPU(s) on {nodes} node(s) with {COMMAND}", reason)
                continue
            point = make_point(config, (label, None), gpus, nodes, COMMAND, "fit",
                               config["training"]["precision"], rep, batch_per_gpu,
                               global_batch, levels=(sweep["nodes"] != "auto"
                                                     and len(sweep["nodes"]) > 1,
                                                     False, False, False, False, False))
            tasks = TASKS[spec["tasks"]](gpus, nodes)
            points.append(with_knobs(dataclasses.replace(
                point, command=spec["run"], tasks=tasks, tasks_per_node=tasks // nodes,
                cpus_per_task=max(1, over["cpus_per_gpu"] * gpus // tasks)), knobs, varied))
    return points


def make_point(config: dict, entry: tuple[str, str | None], gpus: int, nodes: int,
               chosen: str, loop: str, precision: str, rep: int, batch_per_gpu, global_batch,
               levels: tuple[bool, ...], framework: tuple[int, str] | None = None) -> Point:
    """One point of the model `entry` (label, builder or None); `levels` says which of
    nodes, strategy, loop, precision, Keras and backend the sweep varies (each varied one
    is a folder level and, but nodes, part of the series); `framework`: (Keras, backend),
    training's by default."""
    training, res, scaling = config["training"], config["resources"], config["sweep"]["scaling"]
    keras, backend = framework or (training["keras"], training["backend"])
    model, builder = entry
    over = model_settings(config, model)
    per_node = gpus // nodes
    if chosen in ("horovod", "ddp"):
        tasks_per_node = per_node  # one process per GPU
    elif chosen == "multiworker":
        tasks_per_node = per_node if training["workers"] == "per_gpu" else 1
    else:
        tasks_per_node = 1
    gpus_per_task = per_node // tasks_per_node
    varied = [v for v, on in zip((f"nodes{nodes}", chosen, loop, precision, f"keras{keras}",
                                  backend), levels, strict=True) if on]
    folder = [model, *varied]
    series = " ".join([model] + [v for v in varied if v != f"nodes{nodes}"])
    return Point(
        key="/".join(folder + [f"gpus{gpus}", f"rep{rep}"]), series=series, model=model,
        model_from=builder, command=None,
        gpus=gpus, nodes=nodes, gpus_per_node=per_node, rep=rep, strategy=chosen,
        precision=precision, keras=keras, backend=backend, epochs=over["epochs"],
        batch_per_gpu=batch_per_gpu,
        global_batch=global_batch, scaling=scaling,
        base_lr=over["base_lr"], optimizer=over["optimizer"], loop=loop,
        # strong scaling keeps the learning rate with the global batch
        lr_scaling=over["lr_scaling"] if scaling == "weak" else "none",
        warmup_epochs=over["warmup_epochs"],
        momentum=training["momentum"], xla=training["xla"], device=training["device"],
        seed=training["seed"] + rep - 1, communication=training["communication"],
        save_model=training["save_model"], tensorboard=training["tensorboard"],
        profile_steps=tuple(training["profile_steps"]) if training["profile_steps"] else None,
        tasks=tasks_per_node * nodes,
        tasks_per_node=tasks_per_node,
        cpus_per_task=over["cpus_per_gpu"] * gpus_per_task,
        mem_mb=over["mem_mb_per_gpu"] * per_node, runtime=over["runtime_min"],
        gres=res["gres"].format(gpus=per_node) if res["gres"] else None,
    )


def torch_problem(points: list[Point], software: dict, python: str) -> str | None:
    """Why the study's torch points cannot start (`python`, torch.python resolved, is not
    there, or has no torch: every point failed at its import), or None; jobs that load
    software of their own (modules, a container) may have it: not judged."""
    if software["modules"] or software["container"] or not any(
            p.backend == "torch" and not p.command for p in points):
        return None
    fix = "`make setup-torch` builds it (or set torch.python to PyTorch's python)"
    if not Path(python).exists():
        return f"backend torch points run with torch.python {python}, which is not there: {fix}"
    missing = torch_missing(python)
    return (f"backend torch points run with torch.python {python}, {missing}: expected a "
            f"python that imports torch; {fix}") if missing else None


def torch_missing(python: str) -> str | None:
    """What keeps `python` from importing torch ("which has no torch", "which cannot be
    run: ..."), or None: its import machinery asked for the module, not torch imported
    (0.04 s, where importing torch takes seconds), at every Snakemake start but the job
    steps'."""
    import subprocess

    try:
        found = subprocess.run(
            [python, "-c", "import importlib.util, sys; "
             "sys.exit(importlib.util.find_spec('torch') is None and 3)"],
            capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"which cannot be run ({getattr(exc, 'strerror', None) or exc})"
    if found.returncode == 3:
        return "which has no torch (import torch fails)"
    if found.returncode:
        last = (found.stderr.strip().splitlines() or [f"exit status {found.returncode}"])[-1]
        return f"which cannot be run ({last[:200]})"
    return None


def check_points(points: list[Point], config: dict, checked: bool = False,
                 train_images: int | None = None) -> None:
    if not checked:
        check_batches(points, config, train_images)
    keys = [p.key for p in points]
    if len(set(keys)) != len(keys):
        raise SweepError("two sweep points map to the same run folder: " + ", ".join(
            sorted({k for k in keys if keys.count(k) > 1})))
