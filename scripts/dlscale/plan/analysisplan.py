"""The analysis half of a study's plan: the logs of runs dlscale did not make, the
reference values, the tables compared, the history, and the flags of the rules that
build tables from them. `Study.analysis` (dlscale.plan.study) is one; checked at planning, each
problem one PlanError naming the entry and what was expected."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from pathlib import Path

from dlscale.core import schema
from dlscale.core.contract import (
    EXTERNAL,
    PARSED,
    RUN_JSON,
    RUN_TABLE,
    run_dir,
)
from dlscale.core.errors import PlanError
from dlscale.plan.external import configured, entry_key
from dlscale.plan.external import resolve as resolve_external


def unreadable_file(path: str | Path) -> str | None:
    """Why `path` cannot be read as a file ("does not exist", "is a directory" ...), or
    None when it can."""
    import os

    path = Path(path)
    if path.is_symlink() and not path.exists():
        return "is a symbolic link that leads nowhere (a loop, or a missing target)"
    if not path.exists():
        return "does not exist"
    if path.is_dir():
        return "is a directory, expected a file"
    if not path.is_file():
        return "is not a regular file"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def html_safe_json(value) -> str:
    """JSON whose text holds no <, > or & (written as \\u003c, \\u003e, \\u0026, which
    json.loads reads back unchanged). Snakemake's report embeds the params of report
    rules in a <script> element as they are: a label such as '</script><script>...' from
    a shared file must not end that element."""
    return (json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("&", "\\u0026"))


def meta_flags(meta: dict) -> str:
    """--meta KEY=VALUE flags for parse_logs.py, quoted for the shell."""
    return " ".join(f"--meta {shlex.quote(f'{k}={v}')}" for k, v in meta.items())


def external_series(item: dict) -> str:
    """The series an external_runs entry is drawn in: its label, or '<model> (external)'."""
    return item.get("label", f"{item['model']} (external)")


class AnalysisPlan:
    """The analysis inputs of a study, read once at planning (nothing inside a job step);
    `Study.analysis` holds it. `warnings` is the study's list, appended to."""

    def __init__(self, config: dict, basedir: Path, points: dict, job_step: bool,
                 warnings: list[str]):
        self.config, self.basedir, self.points = config, basedir, points
        self.warnings = warnings
        self.external = {} if job_step else self._external_runs()
        self.references = [] if job_step else self._references()
        self.compare = [] if job_step else self._compared()
        self.network_files = [] if job_step else self._network()
        if not job_step:
            self._check_history_path()
            self._check_lock_mode()
            self._check_window_epoch()

    def _external_runs(self) -> dict[str, tuple[dict, list[dict]]]:
        """{key: (entry, per-run values)}, each log read now: what it lacks fails here."""
        runs, series = {}, {}
        own = {p.series for p in self.points.values()}
        for index, item in enumerate(self.config["external_runs"]):
            where = f"external_runs[{index}]"
            name = external_series(item)
            if name in own:  # its runs would be pooled with the points' as repeats
                raise PlanError(f"{where}: label '{name}' is a series this study trains "
                                "(sweep.models or sweep.commands): the log's runs would be "
                                "averaged with its points; give the log a label of its own")
            first = series.setdefault(name, (where, item["model"]))
            if first[1] != item["model"]:  # one line in the plots for two models' speedups
                raise PlanError(f"{where}: label '{name}' is {first[0]}'s too, a log of "
                                f"{first[1]}, and this is one of {item['model']}: a series is "
                                "one model; give each its own label")
            for name in ("log", "err_log"):
                if item.get(name) and (problem := unreadable_file(item[name])):
                    raise PlanError(f"{where}: {name} '{item[name]}' {problem}")
            key = entry_key(item)
            if key in runs and Path(runs[key][0]["log"]).resolve() != Path(item["log"]).resolve():
                # another log of the same name (job.out in two folders): told apart by path
                digest = hashlib.sha256(str(Path(item["log"]).resolve()).encode()).hexdigest()
                key = f"{key}-{digest[:8]}"
            if key in runs:
                raise PlanError(f"{where}: a second entry for model {item['model']} and log "
                                f"{item['log']} (set repeat for a repeated study)")
            try:
                per_run, warnings = resolve_external(item, where, PARSED)
            except ValueError as exc:
                raise PlanError(str(exc)) from exc
            self.warnings += warnings
            self._check_layout(where, item, per_run)
            runs[key] = (item, per_run)
        for p in self.points.values():
            self._check_layout(f"point {p.key}", {}, [{"gpus": p.gpus, "nodes": p.nodes}])
        return runs

    def _check_layout(self, where: str, item: dict, per_run: list[dict]) -> None:
        """PlanError for a run's GPUs and nodes that contradict each other or
        analysis.gpus_per_node, naming both values (the prediction raised the node size
        silently; an 8-GPU run on 16 nodes was predicted as such)."""
        per_node = self.config["analysis"]["gpus_per_node"]
        for index, values in enumerate(per_run):
            gpus = values.get("gpus")
            nodes = values.get("nodes") if values.get("nodes") is not None else (
                configured(item, "nodes", index) or 1)
            run = f"{where}, run {index + 1}" if len(per_run) > 1 else where
            if gpus is None:
                continue
            if nodes > gpus:
                raise PlanError(f"{run}: {gpus} GPU(s) on {nodes} nodes: a node holds at "
                                "least one GPU of the run; give nodes (or gpus) as the run "
                                "used them")
            if per_node and -(-gpus // nodes) > per_node:
                raise PlanError(f"{run}: {gpus} GPU(s) on {nodes} node(s) need "
                                f"{-(-gpus // nodes)} a node, but analysis.gpus_per_node is "
                                f"{per_node}: one of the two is wrong")

    def _network(self) -> list[str]:
        """analysis.network's nccl-tests outputs, each read now (what it lacks fails here,
        not after the training); one source per level."""
        from dlscale.logparse import nccltests

        network, levels = self.config["analysis"]["network"], {}
        for level in ("within_node", "between_nodes"):
            if network[level]:
                levels[level] = f"analysis.network.{level}"
        inside, between = network["within_node"], network["between_nodes"]
        if inside and between and inside["bus_bandwidth_gbs"] < between["bus_bandwidth_gbs"]:
            self.warnings.append(
                f"analysis.network.within_node's bus_bandwidth_gbs {inside['bus_bandwidth_gbs']}"
                f" is below between_nodes' {between['bus_bandwidth_gbs']}: a node's own links "
                "are as fast as the network between nodes or faster on most machines (were "
                "the two swapped?); the prediction uses them as given")
        for index, path in enumerate(network["nccl_tests"]):
            where = f"analysis.network.nccl_tests[{index}]"
            if problem := unreadable_file(path):
                raise PlanError(f"{where}: '{path}' {problem}")
            try:
                result = nccltests.parse(Path(path).read_text(errors="replace"), path)
                level = nccltests.ring_level(result)[0]
            except nccltests.NcclTestsError as exc:
                raise PlanError(f"{where}: {exc}") from None
            if level in levels:
                raise PlanError(f"{where}: '{path}' measured the level {level.replace('_', ' ')}"
                                f", which {levels[level]} gives too: give one per level")
            levels[level] = f"{where} ('{path}')"
        return list(network["nccl_tests"])

    def network_flags(self) -> str:
        """explain_scaling.py's --network: analysis.network, where it gives anything."""
        network = self.config["analysis"]["network"]
        if not (network["within_node"] or network["between_nodes"] or network["nccl_tests"]):
            return ""
        return f"--network {shlex.quote(html_safe_json(network))}"

    def prediction_flags(self) -> str:
        """explain_scaling.py's --gpus-per-node where analysis.gpus_per_node gives it."""
        per_node = self.config["analysis"]["gpus_per_node"]
        return f"--gpus-per-node {int(per_node)}" if per_node else ""

    def _references(self) -> list[dict]:
        spec = self.config["references"]
        if not spec:
            return []  # and pandas is not imported: a plain study's planning never needs it
        from dlscale.reporting.references import ReferenceError, load

        models = {p.model for p in self.points.values()}
        models |= {item["model"] for item, _ in self.external.values()}
        try:
            return load(spec, self.basedir, schema.load(), models)
        except ReferenceError as exc:
            raise PlanError(str(exc)) from exc

    def _compared(self) -> list[tuple[str, str]]:
        """(label, path) of each compared study, its table read now: a missing file or
        column fails here, not after the training."""
        if not self.config["compare"]:
            return []
        import pandas as pd

        from dlscale.core.vocabulary import COMPARED_COLUMNS
        from dlscale.reporting.analysis import THIS_STUDY, read_table

        compared, labels = [], set()
        for index, item in enumerate(self.config["compare"]):
            where = f"compare[{index}]"
            if item["label"] in labels:
                raise PlanError(f"{where}: label '{item['label']}' is given twice")
            if item["label"].strip().lower() == THIS_STUDY:
                raise PlanError(f"{where}: label '{item['label']}' is how the plots name the "
                                "study being run: give the compared study another label")
            labels.add(item["label"])
            if problem := unreadable_file(item["scaling"]):
                raise PlanError(f"{where}: scaling '{item['scaling']}' {problem}")
            try:
                table = read_table(item["scaling"], list(COMPARED_COLUMNS))
            except ValueError as exc:
                raise PlanError(f"{where}: {exc}") from exc
            for column in COMPARED_COLUMNS[1:]:  # all numbers but the series' name
                numbers = pd.to_numeric(table[column], errors="coerce")
                wrong = table[column].notna() & numbers.isna()
                if wrong.any():
                    row = int(wrong.idxmax())
                    raise PlanError(
                        f"{where}: {item['scaling']} line {row + 2}, column {column}: "
                        f"'{table[column][row]}' is not a number")
            compared.append((item["label"], item["scaling"]))
        return compared

    def _check_window_epoch(self) -> None:
        """The window traces steps of each point's first epoch, profiler start and stop
        among them: skip_epochs 0 would count that epoch in epoch_time_s."""
        analysis = self.config["analysis"]
        trains = any(not p.command for p in self.points.values())
        if trains and analysis["breakdown"] and not analysis["skip_epochs"]:
            raise PlanError(f"analysis.skip_epochs 0 with analysis.breakdown "
                            f"{analysis['breakdown']}: the first epoch holds the profiled "
                            "window, which epoch_time_s would count; set skip_epochs to 1 or "
                            "more, or breakdown to 0")

    @staticmethod
    def _check_lock_mode() -> None:
        """$DLSCALE_POINT_LOCK, which every point's launcher reads (and SLURM's jobs
        inherit): a value it cannot take fails here, before any job."""
        from dlscale.jobs.locks import LockError, lock_mode

        try:
            lock_mode()
        except LockError as exc:
            raise PlanError(str(exc)) from None

    def _check_history_path(self) -> None:
        """history.path names a file whose folder exists or can be made: said now, not
        by the history step after the training."""
        path = self.config["history"]["path"]
        if not path:
            return
        target = Path(path).expanduser()
        if target.is_symlink():
            try:
                target.resolve(strict=False)
                broken = not target.exists() and not target.parent.joinpath(
                    os.readlink(target)).parent.is_dir()
            except (RuntimeError, OSError) as exc:  # a loop: ELOOP, or Python's RuntimeError
                raise PlanError(f"history.path '{path}' is a symbolic link that cannot be "
                                f"followed ({getattr(exc, 'strerror', None) or exc}): expected "
                                "the history's file") from None
            if broken:
                raise PlanError(f"history.path '{path}' is a symbolic link to "
                                f"'{os.readlink(target)}', whose folder does not exist")
        if target.is_dir():
            raise PlanError(f"history.path '{path}' is a folder: expected the history's file "
                            "(e.g. history.sqlite in it)")
        folder = target.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        if not folder.is_dir():
            raise PlanError(f"history.path '{path}': its folder cannot be made, {folder} is "
                            "a file")

    def compare_flags(self) -> str:
        if not self.compare:
            return ""
        return f"--compare-json {shlex.quote(html_safe_json(self.compare))}"

    @property
    def history_db(self) -> str | None:
        """The results history's database (config history.path), None for none."""
        return self.config["history"]["path"]

    def history_flags(self) -> str:
        """record_history.py's flags: the database, what to compare, the study's config."""
        h = self.config["history"]
        flags = [f"--db {shlex.quote(h['path'])}", f"--compare {h['compare']}",
                 f"--tolerance {h['tolerance']}", f"--workflow {shlex.quote(str(self.basedir))}",
                 f"--config-json {shlex.quote(html_safe_json(self.config))}"]
        if h["system"]:
            flags.append(f"--system {shlex.quote(h['system'])}")
        return " ".join(flags)

    def analysis_flags(self) -> str:
        a = self.config["analysis"]
        flags = [f"--skip-epochs {a['skip_epochs']}",
                 f"--accuracy-tolerance {a['accuracy_tolerance']}"]
        if a["target_accuracy"] is not None:
            flags.append(f"--target-accuracy {a['target_accuracy']}")
        if a["gpu_hour_price"] is not None:
            flags.append(f"--gpu-hour-price {a['gpu_hour_price']}")
        if self.references:
            flags.append(f"--references {shlex.quote(html_safe_json(self.references))}")
        return " ".join(flags)

    def external_flags(self, key: str) -> str:
        """--meta for the entry, --per-run for each run's values, --pattern for patterns."""
        item, per_run = self.external[key]
        meta = {"run": f"external/{key}", "source": "external",
                "series": external_series(item),
                "model": item["model"], "repeat": item["repeat"],
                "images_per_epoch": item.get("train_images", ""),
                "precision": item["precision"],
                "strategy": item["strategy"]}
        if isinstance(item["nodes"], int):  # else one per run, in --per-run
            meta["nodes"] = item["nodes"]
        if item.get("skip_epochs") is not None:
            meta["skip_epochs"] = item["skip_epochs"]
        if item.get("parameters"):
            meta["parameters"] = item["parameters"]
        patterns = "".join(f" --pattern {shlex.quote(f'{k}={v}')}"
                           for k, v in item.get("patterns", {}).items())
        return (f"{meta_flags(meta)} --per-run {shlex.quote(json.dumps(per_run))}{patterns}"
                f" --cache {shlex.quote(PARSED)}")

    def run_tables(self) -> list[str]:
        return ([f"{run_dir(k)}/{RUN_TABLE}" for k in self.points]
                + [f"{EXTERNAL}/{k}/{RUN_TABLE}" for k in self.external])

    def targets(self, plot_names) -> list[str]:
        """What `rule all` asks for."""
        from dlscale.core.contract import CHECKS, PLOTS, REPORT_PAGE, table

        return (
            [table("scaling"), table("failed"), table("breakdown"), table("prediction")]
            # each point's record too: one that went missing is trained again, never
            # "up to date" because the tables built from it still exist
            + [f"{run_dir(key)}/{RUN_JSON}" for key in self.points]
            + [f"{PLOTS}/{n}.png" for n in plot_names]
            + [f"{CHECKS}/points.txt", REPORT_PAGE]
            + ([table("verdicts")] if self.references else [])
            + ([table("compared")] if self.compare else [])
            + ([table("history")] if self.history_db else []))

    def history_studies(self) -> list[str]:
        """The earlier studies' points the plots draw (history.compare), or none."""
        from dlscale.core.contract import table

        compare = self.history_db and self.config["history"]["compare"]
        return [table("history_studies")] if compare else []

    @staticmethod
    def report_first_page(page: str, fallback: str) -> str:
        """What `snakemake --report` opens on: the study's answer once written, else a page
        that says how to get it."""
        return str(Path(page).resolve()) if Path(page).exists() else fallback
