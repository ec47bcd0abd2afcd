"""What the workflow plans, without Snakemake: the study read from the validated config.

rules/common.smk builds one `Study` per run of Snakemake and its small wildcard
functions read from it. Everything here is plain Python and unit-tested; a problem
raises PlanError with a one-line message naming the key and what was expected. Here: the
study's checks, its points and their attempts, jobs and notes; where its data comes from
is dlscale.plan.sources (StudyData), what its points run dlscale.plan.pointflags
(PointCommands), each a part of `Study`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from dlscale.core import schema
from dlscale.core.contract import DATA, KEPT, MANIFEST, RUN_JSON, read_attempts, run_dir
from dlscale.core.errors import PlanError
from dlscale.core.schema import check_raw_config  # noqa: F401 (rules/common.smk's)
from dlscale.data.datasets import DATASETS, FOLDER
from dlscale.jobs.outcomes import failed_record, planned_attempt, runtime_factor
from dlscale.launch import command as user_command
from dlscale.logparse.reader import compile_patterns
from dlscale.plan import modelimports
from dlscale.plan.analysisplan import AnalysisPlan
from dlscale.plan.pointflags import PointCommands, batch_file
from dlscale.plan.sources import Source, StudyData
from dlscale.plan.sweep import Point, command_spec, folder_listing, plan_sweep, torch_problem
from dlscale.train import usermodel
from dlscale.train.keraschoice import without_tensorflow_problem


class Study(StudyData, PointCommands):
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
            user_command.check_template(label, spec["run"], list(
                config["sweep"].get("knobs") or {}))
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
