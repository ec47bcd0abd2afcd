"""What the workflow plans, without Snakemake: the study read from the validated config.

rules/common.smk builds one `Study` per run of Snakemake and its small wildcard
functions read from it. Everything here is plain Python and unit-tested; a problem
raises PlanError with a one-line message naming the key and what was expected.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from dlscale.core import schema
from dlscale.core.contract import (
    BATCH,
    COMPILE_CACHE,
    DATA,
    DOWNLOADS,
    KEPT,
    MANIFEST,
    RUN_JSON,
    read_attempts,
    run_dir,
)
from dlscale.core.errors import PlanError
from dlscale.core.files import write_json_atomic
from dlscale.core.schema import check_raw_config  # noqa: F401 (rules/common.smk's)
from dlscale.core.vocabulary import scaled_lr
from dlscale.data.datasets import DATASETS, FOLDER, find_cached
from dlscale.jobs.outcomes import failed_record, planned_attempt, runtime_factor
from dlscale.launch import command as user_command
from dlscale.logparse.reader import compile_patterns
from dlscale.plan import modelimports
from dlscale.plan.analysisplan import AnalysisPlan, meta_flags
from dlscale.plan.sweep import Point, command_spec, folder_listing, plan_sweep, torch_problem
from dlscale.train import usermodel
from dlscale.train.keraschoice import without_tensorflow_problem

LISTING_SUFFIX = ".listing.json"  # beside results/data/folder-NNpx/: record_listing
URL_FILE_NAME = re.compile(r"[A-Za-z0-9._+-]+")
# steps timed on synthetic input by analysis.synthetic_check (after as many untimed ones)
SYNTHETIC_CHECK_STEPS = 10


@dataclass(frozen=True)
class Source:
    """Where a dataset comes from: the path prepare_data.py reads, the md5 it checks,
    and the downloads (target -> (url, md5)) that must happen first."""
    dataset: str
    path: str
    md5: str | None = None
    downloads: dict[str, tuple[str, str | None]] = field(default_factory=dict)

    def prepare_flags(self, data: dict, size: int | str) -> str:
        flags = [f"--dataset {self.dataset}", f"--source {shlex.quote(self.path)}",
                 f"--image-size {size}", f"--shards {data['shards']}"]
        if self.md5:
            flags.append(f"--md5 {shlex.quote(self.md5)}")
        if self.dataset == data["dataset"]:
            for key in ("limit_train", "limit_test"):
                if data[key]:
                    flags.append(f"--{key.replace('_', '-')} {data[key]}")
            if self.dataset == FOLDER:
                flags.append(f"--test-fraction {data['test_fraction']}")
        return " ".join(flags)


def resolve_source(data: dict, dataset: str) -> Source:
    """The configured source for the configured dataset ('auto' for any other)."""
    spec = DATASETS[dataset]
    configured = dataset == data["dataset"]
    source = data["source"] if configured else "auto"
    md5 = data["md5"] if configured else None
    if dataset == FOLDER:  # your own images: a folder here (listed by sweep.check_batches)
        return Source(dataset, str(Path(source).expanduser()))
    if source == "auto":
        cached = find_cached(spec)
        if cached is not None:
            return Source(dataset, str(cached))
        targets = {f"{DOWNLOADS}/{dataset}/{f.name}": (f.url, f.md5) for f in spec.files}
        path = next(iter(targets)) if len(targets) == 1 else f"{DOWNLOADS}/{dataset}"
        return Source(dataset, path, None, targets)
    if "://" in source:
        name = PurePosixPath(urlparse(source).path).name
        if not URL_FILE_NAME.fullmatch(name):
            raise PlanError(f"data.source '{source}': the file name '{name}' may hold only "
                            "letters, digits and . _ + - (it names the downloaded file)")
        official = {f.name: f.md5 for f in spec.files}
        target = f"{DOWNLOADS}/{dataset}/{name}"
        return Source(dataset, target, None, {target: (source, md5 or official.get(name))})
    path = Path(source).expanduser()
    if not path.exists():
        raise PlanError(f"data.source '{source}' does not exist: expected 'auto', an URL, or a "
                        f"local {dataset} archive or folder")
    if md5 and not path.is_file():
        raise PlanError(f"data.md5 is set but data.source '{source}' is a folder: a checksum "
                        "applies to an archive file (leave md5 null for a folder)")
    return Source(dataset, str(path), md5)


def batch_file(p: Point) -> str:
    return f"{BATCH}/{p.model}/{p.precision}.json"


class Study:
    """The validated config, read once: points, sources, flags; `analysis` its external
    runs, references, compared studies and the analysis rules' flags."""

    def __init__(self, config: dict, basedir: str | Path, job_step: bool = False):
        """`job_step`: the plan made again inside a job (Snakemake's SLURM job step
        parses the Snakefile to run one rule): the points and their flags only; what
        the planning process checked and read (the data's size, your model files,
        external logs, references, compared tables) and its notes are not done again."""
        self.config, self.basedir, self.job_step = config, Path(basedir), job_step
        self.data = config["data"]
        self.data_dir = f"{DATA}/{self.data['dataset']}-{self.shard_size()}px"
        # your own images, listed once (not read): their count, and whether they changed
        self.folder = (folder_listing(self.data)
                       if self.data["dataset"] == FOLDER and not job_step else None)
        points, self.skipped = plan_sweep(
            config, checked=job_step,
            train_images=self.folder.available["train"] if self.folder else None)
        for label, given in config["sweep"]["commands"].items():
            spec = command_spec(given)
            user_command.check_template(label, spec["run"])
            try:
                compile_patterns(spec["patterns"], f"sweep.commands.{label}.patterns")
            except ValueError as exc:
                raise PlanError(str(exc)) from None
        known = set(schema.load()["$defs"]["model"]["enum"]) | {p.model for p in points}
        for label in config.get("models") or {}:
            if label not in known:
                raise PlanError(f"models.{label}: no model of sweep.models is labelled "
                                f"'{label}' (and it is not a model dlscale knows)")
        self._model_files: dict[str, list[str]] = {}
        self._attempts: dict[str, list[dict]] = {}
        self._held: dict[str, str] | None = None  # point -> the live job holding it
        for builder in dict.fromkeys(p.model_from for p in points
                                     if p.model_from and not job_step):  # nothing of it runs
            files = modelimports.local_imports(usermodel.check(builder), builder)
            self._model_files[builder] = [str(f) for f in files]
            mine = [p for p in points if p.model_from == builder]
            modelimports.check(builder, files, mine, config["software"])
            if any(p.batch_per_gpu == "auto" for p in mine):
                raise PlanError(f"sweep.models: '{builder}': batch_per_gpu auto searches "
                                "built-in models only; set a number for this model "
                                "(models.<label>.batch_per_gpu)")
        self.points = {p.key: p for p in points}
        self.warnings: list[str] = []
        self.analysis = AnalysisPlan(config, self.basedir, self.points, job_step, self.warnings)
        self._sources: dict[str, Source] = {}
        if not job_step and (problem := without_tensorflow_problem(
                points, config["software"], self.shard_size(),
                None if self.data["dataset"] == FOLDER
                else DATASETS[self.data["dataset"]].native_shape[0])
                or torch_problem(points, config["software"], self.environment_python("torch"))):
            raise PlanError(problem)
        if self.points and not job_step and self.data["dataset"] != FOLDER:
            # a source that is not there: one line at planning (a dry run too), not an
            self.source(self.data["dataset"])  # InputFunctionException when the DAG is built
        if not self.points and not self.analysis.external:
            raise PlanError("nothing to run: sweep.models is empty and there are no "
                            "external_runs")

    def notes(self) -> list[str]:
        """What a user should know before anything runs: warnings about external runs,
        and the failed points that are planned again (none inside a job)."""
        if self.job_step:
            return []
        notes = [f"note: {n}" for n in self.skipped] + [f"warning: {w}" for w in self.warnings]
        notes += [f"note: {n}" for n in (self.folder.notes if self.folder else [])]
        for key in self.points:
            failed = failed_record(run_dir(key))
            if failed:
                notes.append(f"point {key} ended {failed['status']} ({failed.get('failure')}): "
                             "it is planned again")
            folder = Path(run_dir(key))
            if not (folder / RUN_JSON).exists() and (folder / KEPT / RUN_JSON).exists():
                notes.append(f"point {key}: {folder / RUN_JSON} is missing, so it is trained "
                             f"again; the last completed record is kept in {folder / KEPT}/ "
                             "(copy its files back into the run folder to use it instead)")
        return notes

    def model_files(self, p: Point) -> list[str]:
        """Your own model's files (its module and those its imports lead to): inputs of
        its points, so that an edit trains them again."""
        if not p.model_from:
            return []
        if p.model_from not in self._model_files:  # in a job: located again, not checked
            self._model_files[p.model_from] = [
                str(f) for f in usermodel.source_files(p.model_from)]
        return self._model_files[p.model_from]

    def attempts(self, p: Point) -> list[dict]:
        """The point's attempts.jsonl, read once per planning."""
        if p.key not in self._attempts:
            self._attempts[p.key] = read_attempts(run_dir(p.key))
        return self._attempts[p.key]

    def attempt(self, p: Point) -> int:
        """Grows when an attempt at the point fails, so the next run plans it again."""
        return planned_attempt(run_dir(p.key), self.attempts(p))

    def slurm_extra(self, p: Point, site: str | None) -> str | None:
        """The job's `slurm_extra`: the site's (the profile's default), and a dependency on
        the SLURM job that still trains the point (a Snakemake restarted while it runs):
        the new job waits PENDING, holding no GPUs, and keeps that job's record."""
        from dlscale.jobs import locks, slurm

        if self.job_step:
            return site or None
        if self._held is None:  # once: every lock read, squeue asked if one names a job
            named = {k: str(job) for k in self.points
                     if (job := locks.current_holder(Path(run_dir(k))).get("slurm_job"))}
            active = (slurm.active_jobs() if named else None) or {}
            own = os.environ.get("SLURM_JOB_ID")
            self._held = {k: job for k, job in named.items() if job in active and job != own}
        job = self._held.get(p.key)
        if job is None:
            return site or None
        print(f"dlscale: {p.key} is still being trained by SLURM job {job}: its new job "
              "waits for it (--dependency=afterany), then keeps its record if it completed",
              file=sys.stderr)
        return " ".join(filter(None, [site, f"--dependency=afterany:{job}"]))

    def runtime(self, p: Point) -> int:
        """Minutes: runtime_min, times 1 + the timeouts since the point last completed."""
        return p.runtime * runtime_factor(run_dir(p.key), self.attempts(p))

    def shard_size(self) -> int:
        """The shards' image size: data.image_size when preparation resizes, the dataset's
        own size when the model does (data.resize: on_device)."""
        if self.data["resize"] == "on_device" and self.data["dataset"] != FOLDER:
            # a folder's images differ in size: preparation brings them to one
            return DATASETS[self.data["dataset"]].native_shape[0]
        return self.data["image_size"]

    def source(self, dataset: str) -> Source:
        """Resolved once per dataset (it looks at the file system)."""
        if dataset not in self._sources:
            self._sources[dataset] = resolve_source(self.data, dataset)
        return self._sources[dataset]

    def listing_file(self, size: int | str) -> str:
        """The rule input that stands for an image folder's content (see record_listing)."""
        return f"{DATA}/{FOLDER}-{size}px{LISTING_SUFFIX}"

    def record_listing(self) -> str | None:
        """Write what the image folder holds (a digest of every image's path and bytes,
        imagefolder.content_digest) to listing_file, only when it changed: the data is
        prepared again when an image is added, deleted or edited, not when one is touched.
        A note names what changed after a preparation; a job's planning writes nothing."""
        if self.folder is None:
            return None
        from dlscale.data.imagefolder import content_digest

        path = Path(self.listing_file(self.shard_size()))
        source = Path(self.data["source"]).expanduser().resolve()
        digest, changes = content_digest(source, self.folder.stats,
                                         path.with_name(f".{path.stem}.stats.json"))
        listing = {"source": str(source), "images": self.folder.available, "digest": digest}
        try:
            before = json.loads(path.read_text())
        except (OSError, ValueError):
            before = None
        if before == listing:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, listing)
        if before is None or not (Path(self.data_dir) / MANIFEST).exists():
            return None
        said = "; ".join(f"{len(v)} {k} (e.g. {v[0]})" for k, v in changes.items() if v)
        return (f"note: the images in {listing['source']} changed since they were listed "
                f"({said or 'the listing was of another form'}): the data is prepared again")

    def download(self, dataset: str, filename: str) -> tuple[str, str | None]:
        target = f"{DOWNLOADS}/{dataset}/{filename}"
        downloads = self.source(dataset).downloads
        if target not in downloads:
            raise PlanError(f"{target} is not a download of the configured data source")
        return downloads[target]

    # --- training points ---------------------------------------------------------------
    def train_flags(self, p: Point) -> str:
        flags = {"model": p.model, "gpus": p.gpus, "nodes": p.nodes, "strategy": p.strategy,
                 "keras": p.keras, "backend": p.backend, "epochs": p.epochs,
                 "base-lr": p.base_lr, "optimizer": p.optimizer,
                 "loop": p.loop, "lr-scaling": p.lr_scaling,
                 "warmup-epochs": p.warmup_epochs, "momentum": p.momentum,
                 "precision": p.precision, "device": p.device, "seed": p.seed,
                 "shuffle-buffer": self.data["shuffle_buffer"],
                 "cache-mb": self.data["cache_mb"], "image-size": self.data["image_size"],
                 "communication": p.communication,
                 "telemetry-interval": self.config["training"]["telemetry_interval_s"],
                 "breakdown-steps": (analysis := self.config["analysis"])["breakdown"]}
        if p.model_from:
            flags["model-from"] = p.model_from
        if p.backend == "jax" and self.config["training"]["compile_cache"]:
            flags["compile-cache"] = COMPILE_CACHE
        if analysis["synthetic_check"]:
            flags["synthetic-check-steps"] = SYNTHETIC_CHECK_STEPS
        if p.profile_steps:
            flags["profile-steps"] = ",".join(map(str, p.profile_steps))
        if p.batch_per_gpu == "auto":
            flags["batch-per-gpu-file"] = batch_file(p)
        else:
            flags["batch-per-gpu"] = p.batch_per_gpu
        software = self.config["software"]
        if software["container"]:
            flags["container"] = software["container"]
        text = " ".join(f"--{k} {shlex.quote(str(v))}" for k, v in flags.items())
        if software["modules"]:
            text += " --modules " + " ".join(map(shlex.quote, software["modules"]))
        switches = {"xla": p.xla, "save-model": p.save_model, "tensorboard": p.tensorboard,
                    "keep-trace": analysis["keep_traces"]}
        return text + "".join(f" --{k}" if on else f" --no-{k}" for k, on in switches.items())

    def command_flags(self, p: Point) -> str:
        """run_command.py's flags for a point of sweep.commands (dlscale.launch.command)."""
        spec = command_spec(self.config["sweep"]["commands"][p.model])
        lr = scaled_lr(p.base_lr, p.gpus, p.lr_scaling)  # as train.py scales it
        flags = {"command": p.command, "model": p.model, "gpus": p.gpus, "nodes": p.nodes,
                 "tasks": p.tasks, "batch-per-gpu": p.batch_per_gpu, "epochs": p.epochs,
                 "seed": p.seed, "lr": lr, "precision": p.precision, "device": p.device,
                 "telemetry-interval": self.config["training"]["telemetry_interval_s"]}
        if spec["train_images"]:
            flags["train-images"] = spec["train_images"]
        if spec["patterns"]:
            flags["patterns"] = json.dumps(spec["patterns"])
        return " ".join(f"--{k} {shlex.quote(str(v))}" for k, v in flags.items())

    def launch_plan(self, p: Point) -> str:
        """launch.py's --plan: how the workers start, and run.json's planned keys."""
        planned = {"model": p.model, "gpus_asked": p.gpus, "nodes": p.nodes, "epochs": p.epochs,
                   "precision": p.precision, "attempt": self.attempt(p),
                   "batch_per_gpu": p.batch_per_gpu, "global_batch": p.global_batch}
        if p.command:  # the command starts its own tasks (dlscale.launch.command)
            plan = {"command": True,
                    "planned": {**planned, "replicas": p.gpus, "strategy": user_command.STRATEGY}}
        else:
            plan = {"tasks": p.tasks, "tasks_per_node": p.tasks_per_node, "nodes": p.nodes,
                    "planned": {**planned, "model_from": p.model_from, "strategy": p.strategy,
                                "keras_asked": p.keras, "backend": p.backend},
                    "nccl_debug": p.device == "gpu" and p.nodes > 1}  # NCCL's network
            if p.strategy == "horovod":
                plan.update(horovod=True, **{k: self.config["horovod"][k]
                                             for k in ("mpi_launcher", "timeline")})
        plan["batch_file"] = batch_file(p) if p.batch_per_gpu == "auto" else None  # its search
        return "--plan " + shlex.quote(json.dumps(plan, separators=(",", ":")))

    def environment_python(self, section: str) -> str:  # horovod, torch: their python
        python = Path(self.config[section]["python"])
        return str(python if python.is_absolute() else self.basedir / python)

    def worker_command(self, p: Point) -> str:
        """What launch.py runs for the point (after --), every value quoted: train.py with
        its flags, or run_command.py with your command's."""
        script = self.basedir / "scripts" / ("run_command.py" if p.command else "train.py")
        tail = f"--attempt {self.attempt(p)} --out {shlex.quote(run_dir(p.key))}"
        if p.command:
            return f"python {shlex.quote(str(script))} {self.command_flags(p)} {tail}"
        return (f"{shlex.quote(self.python(p))} {shlex.quote(str(script))} "
                f"{self.train_flags(p)} {tail} --data-dir {shlex.quote(self.data_dir)}")

    def python(self, p: Point) -> str:
        """The interpreter of a point: its environment's for horovod and torch points."""
        if p.strategy == "horovod" or p.backend == "torch":
            return self.environment_python("horovod" if p.strategy == "horovod" else "torch")
        return "python"

    def point_meta(self, p: Point) -> str:
        """The planned values; run.json's (the replicas TensorFlow used ...) replace them."""
        return meta_flags({"run": p.key, "series": p.series, "repeat": p.rep,
                           "model": p.model, "gpus": p.gpus,
                           "nodes": p.nodes, "strategy": p.strategy, "precision": p.precision,
                           "scaling": p.scaling, "epochs_expected": p.epochs})

    def announce(self) -> None:
        """Say at planning what a user should know (notes), and record the image folder's
        listing (in the planning process only); PlanError when it cannot be written."""
        notes = self.notes()
        if not self.job_step:
            notes.insert(0, f"the study plans {len(self.points)} point(s) and "
                            f"{len(self.analysis.external)} external run(s)")
            try:  # the folder's content: the input that prepares it again when it changes
                notes.append(self.record_listing())
            except OSError as exc:
                raise PlanError(f"cannot write the image folder's listing: {exc}") from None
        for note in filter(None, notes):
            print(f"dlscale: {note}", file=sys.stderr)

    @staticmethod
    def site_slurm_extra(default_resources_args) -> str | None:
        """The profile's default `slurm_extra` (Snakemake's default-resources as
        name=value texts), kept beside the train rules' own."""
        for arg in default_resources_args or []:
            name, _, value = arg.partition("=")
            if name.strip() == "slurm_extra":
                return value.strip().strip("'\"") or None
        return None

    # --- what the rules ask, by wildcard value (rules/common.smk: by_wildcards) -----------
    def download_url(self, dataset: str, filename: str) -> str:
        return self.download(dataset, filename)[0]

    def download_md5_flag(self, dataset: str, filename: str) -> str:
        md5 = self.download(dataset, filename)[1]
        return f"--md5 {md5}" if md5 else ""  # checked hex (schema) or official

    def prepare_inputs(self, dataset: str, size: str) -> list[str]:
        if dataset == FOLDER:  # what the folder holds, not its top folder's mtime
            return [self.listing_file(size)]
        source = self.source(dataset)
        return list(source.downloads) or [source.path]

    def prepare_flags_of(self, dataset: str, size: str) -> str:
        return self.source(dataset).prepare_flags(self.data, size)

    def train_inputs(self, key: str) -> dict:
        """A point's inputs: the data, its batch search (auto), its model's files."""
        p = self.points[key]
        if p.command:  # your command reads its own data
            return {}
        inputs = {"manifest": f"{self.data_dir}/{MANIFEST}"}
        if p.batch_per_gpu == "auto":
            inputs["batch"] = batch_file(p)
        if p.model_from:  # an edited model trains again
            inputs["model"] = self.model_files(p)
        return inputs

    def finder_resource(self, name: str, model: str):
        """A batch search's resource: one GPU's worth of its model's (overrides applied)."""
        from dlscale.plan import sweep

        return sweep.finder_resources(self.config, model)[name]

    def write_plan(self) -> None:
        """results/plan.json: the points `dlscale status` reports on."""
        from dlscale.core.contract import PLAN
        from dlscale.core.files import write_json_atomic
        from dlscale.reporting.status import plan_record

        Path(PLAN).parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(PLAN, plan_record(self.points))
