"""What a point of the study runs, as command lines: train.py's flags for a built-in or
your own model, run_command.py's for your command, launch.py's plan (how the workers
start, run.json's planned keys), the interpreter of each point's environment, and the
values the analysis is told of a point. `PointCommands` is the part of `Study`
(dlscale.plan.study) that writes them, from its `config`, `data`, `data_dir`, `basedir`
and a point's `attempt`.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from dlscale.core.contract import BATCH, COMPILE_CACHE, run_dir
from dlscale.core.vocabulary import knob_text, scaled_lr
from dlscale.launch import command as user_command
from dlscale.plan.analysisplan import meta_flags
from dlscale.plan.sweep import Point, command_spec

# steps timed on synthetic input by analysis.synthetic_check (after as many untimed ones)
SYNTHETIC_CHECK_STEPS = 10


def knob_meta(knobs: tuple) -> dict:
    """A point's knobs as the per-run table's columns: each by its name, and `knobs`
    their names (the tables after it carry each named one)."""
    return {**{name: knob_text(value) for name, value in knobs},
            **({"knobs": ",".join(name for name, _ in knobs)} if knobs else {})}


def script_knobs(p: Point) -> dict:
    """The knobs a command's point hands run_command.py (--knob) and its record: those
    that are not a placeholder of dlscale's own (batch_per_gpu is the batch)."""
    return {name: knob_text(value) for name, value in p.knobs
            if name not in user_command.PLACEHOLDERS}


def batch_file(p: Point) -> str:
    return f"{BATCH}/{p.model}/{p.precision}.json"


class PointCommands:
    """The command lines of a Study's points."""

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
        knobs = dict(p.knobs)  # a torch point's num_workers and compile (plan.knobs)
        if "num_workers" in knobs:
            flags["num-workers"] = knobs["num_workers"]
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
                    "keep-trace": analysis["keep_traces"],
                    "compile": knobs.get("compile", False)}
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
        if spec["parameters"]:
            flags["parameters"] = spec["parameters"]
        return " ".join([f"--{k} {shlex.quote(str(v))}" for k, v in flags.items()] + [
            f"--knob {shlex.quote(f'{name}={value}')}" for name, value in script_knobs(p).items()])

    def launch_plan(self, p: Point) -> str:
        """launch.py's --plan: how the workers start, and run.json's planned keys."""
        planned = {"model": p.model, "gpus_asked": p.gpus, "nodes": p.nodes, "epochs": p.epochs,
                   "precision": p.precision, "attempt": self.attempt(p),
                   "batch_per_gpu": p.batch_per_gpu, "global_batch": p.global_batch}
        if p.command:  # the command starts its own tasks (dlscale.launch.command)
            plan = {"command": True,
                    "planned": {**planned, "replicas": p.gpus, "strategy": user_command.STRATEGY,
                                "knobs": script_knobs(p)}}
        else:
            plan = {"tasks": p.tasks, "tasks_per_node": p.tasks_per_node, "nodes": p.nodes,
                    "planned": {**planned, "model_from": p.model_from, "strategy": p.strategy,
                                "keras_asked": p.keras, "backend": p.backend},
                    "nccl_debug": p.device == "gpu" and p.nodes > 1}  # NCCL's network
            if p.strategy == "horovod":
                plan.update(horovod=True, **{k: self.config["horovod"][k]
                                             for k in ("mpi_launcher", "timeline")})
        plan["batch_file"] = batch_file(p) if p.batch_per_gpu == "auto" else None  # its search
        plan["mem_mb"] = p.mem_mb * p.nodes  # its ask: held to it outside SLURM (launcher)
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
                           "scaling": p.scaling, "epochs_expected": p.epochs,
                           **knob_meta(p.knobs)})
