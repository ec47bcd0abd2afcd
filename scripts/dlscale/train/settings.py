"""One training point's settings: a typed object built once from train.py's flags.

train.py and launch.py build it from the same command line (launch.py reads the flags of
the training command it starts, so a record it writes names the same settings); the
driver, the backends, the loops and the recorder read it, never an argparse namespace.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from dlscale.core.vocabulary import (
    COMMUNICATIONS,
    DEFAULTS,
    DEVICES,
    KERAS_BACKENDS,
    KERAS_VERSIONS,
    LOOPS,
    LR_SCALINGS,
    OPTIMIZERS,
    PRECISIONS,
    STRATEGIES,
)

DESCRIPTION = "Train one point of the scaling study (see scripts/train.py --help)."


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    out: Path
    model: str
    model_from: str | None   # your own model's builder (dlscale.train.usermodel), `model` its label
    gpus: int
    nodes: int
    strategy: str
    keras: int               # 2: tf-keras; 3: Keras 3 (docs/frameworks.md)
    backend: str             # Keras 3's backend: tensorflow, jax or torch
    epochs: int
    batch_per_gpu: int
    batch_per_gpu_file: Path | None
    synthetic: bool
    base_lr: float
    lr_scaling: str
    warmup_epochs: float
    loop: str
    optimizer: str
    momentum: float
    precision: str
    xla: bool
    device: str
    seed: int
    steps_per_epoch: int | None
    image_size: int | None
    shuffle_buffer: int
    cache_mb: int
    communication: str
    save_model: bool
    tensorboard: bool
    profile_steps: tuple[int, int] | None
    breakdown_steps: int
    keep_trace: bool
    compile_cache: Path | None
    telemetry_interval: float
    synthetic_check_steps: int
    attempt: int
    time_limit_min: float | None
    modules: tuple[str, ...]
    container: str | None
    num_workers: int         # a torch point's DataLoader processes reading its input (0: none)
    compile: bool            # a torch point's torch.compile (sweep.knobs compile)

    @property
    def global_batch(self) -> int:
        """Images per step over all replicas: batch per GPU x GPUs (weak and strong
        scaling alike: strong scaling plans the batch per GPU from the global batch)."""
        return self.batch_per_gpu * self.gpus

    def planned(self) -> dict:
        """The run record's keys that the settings alone give (before TensorFlow runs)."""
        return {"model": self.model, "model_from": self.model_from,
                "gpus_asked": self.gpus, "nodes": self.nodes,
                "strategy": self.strategy, "precision": self.precision,
                "keras_asked": self.keras, "backend": self.backend,
                "batch_per_gpu": self.batch_per_gpu, "global_batch": self.global_batch,
                "epochs": self.epochs, "attempt": self.attempt,
                **({"num_workers": self.num_workers, "compile": self.compile}
                   if self.backend == "torch" else {})}

    def model_size(self, manifest: dict) -> int:
        return self.image_size or manifest["image_shape"][0]


# the settings that define a run: a backup made with others is not resumed
def resume_key(settings: Settings, strategy_kind: str, manifest: dict, manifest_path: Path
               ) -> dict:
    """What a backup must have been made with to be resumed. The data is identified by
    the manifest, which lists every shard."""
    s = settings
    return {"model": s.model, "gpus": s.gpus, "strategy": strategy_kind,
            "keras": s.keras, "backend": s.backend,
            "batch_per_gpu": s.batch_per_gpu, "base_lr": s.base_lr,
            "lr_scaling": s.lr_scaling, "warmup_epochs": s.warmup_epochs,
            "momentum": s.momentum, "precision": s.precision, "seed": s.seed,
            "synthetic": s.synthetic, "steps_per_epoch": s.steps_per_epoch,
            "loop": s.loop, "optimizer": s.optimizer,
            "image_shape": manifest["image_shape"],
            "data_sha256": hashlib.sha256(manifest_path.read_bytes()).hexdigest(),
            "image_size": s.model_size(manifest), **model_identity(s.model_from)}


def model_identity(builder: str | None) -> dict:
    """Your own model's builder and its file's digest: a backup of an edited model is not
    resumed (a built-in model is identified by its name alone)."""
    if not builder:
        return {}
    from dlscale.train.usermodel import source_files

    paths = [p for p in source_files(builder) if p.is_file()]
    digest = hashlib.sha256() if paths else None
    for path in paths:  # the module, then the files its imports led to
        digest.update(path.read_bytes())
    return {"model_from": builder, "model_sha256": digest.hexdigest() if digest else None}


def steps_range(text: str) -> tuple[int, int]:
    first, _, last = text.partition(",")
    if not (first.isdigit() and last.isdigit() and 1 <= int(first) <= int(last)):
        raise argparse.ArgumentTypeError(f"expected FIRST,LAST steps such as 2,4, got '{text}'")
    return int(first), int(last)


def build_parser(description: str = DESCRIPTION) -> argparse.ArgumentParser:
    train, data = DEFAULTS["training"], DEFAULTS["data"]
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--data-dir", required=True, type=Path, help="folder with manifest.json and shards")
    add("--out", required=True, type=Path, help="run folder for train.log, epochs.jsonl, run.json")
    add("--model", default="ResNet50V2",
        help="keras.applications name (weights=None) or SimpleCNN (default: ResNet50V2)")
    add("--model-from", metavar="BUILDER",
        help="your own model: path/to/file.py:function or package.module:function, called "
             "with input_shape and num_classes; --model is then its label")
    add("--gpus", type=int, default=1, help="replicas in total, over all workers (default: 1)")
    add("--nodes", type=int, default=1, help="nodes the run spans (default: 1)")
    add("--strategy", choices=["auto", *STRATEGIES], default="auto",
        help="auto: mirrored in one process, multiworker when there are several workers; "
             "horovod: one process per GPU, started by horovodrun (see launch.py)")
    add("--keras", type=int, choices=KERAS_VERSIONS, default=train["keras"],
        help="2: tf-keras (Keras 2); 3: Keras 3 (`import keras`) on --backend (default: "
             "%(default)s)")
    add("--backend", choices=KERAS_BACKENDS, default=train["backend"],
        help="Keras 3's backend; jax trains with keras.distribution.DataParallel "
             "(default: %(default)s)")
    add("--epochs", type=int, default=train["epochs"])
    add("--batch-per-gpu", type=int, default=train["batch_per_gpu"],
        help="images per replica per step")
    add("--batch-per-gpu-file", type=Path,
        help="take the batch per replica from find_batch_size.py's JSON (batch_per_gpu: auto)")
    add("--synthetic", action="store_true",
        help="train on one repeated random batch (no input pipeline): the model's own speed")
    add("--base-lr", type=float, default=train["base_lr"], help="learning rate of one replica")
    add("--lr-scaling", choices=LR_SCALINGS, default=train["lr_scaling"],
        help="linear: lr = base x replicas (default); none: lr = base")
    add("--warmup-epochs", type=float, default=train["warmup_epochs"],
        help="ramp the rate linearly from base to scaled over this many epochs")
    add("--loop", choices=LOOPS, default=train["loop"],
        help="fit: Keras' Model.fit; custom: a tf.function step under strategy.run, the loss "
             "averaged over the global batch (mirrored and multiworker)")
    add("--optimizer", choices=OPTIMIZERS, default=train["optimizer"],
        help="sgd (with --momentum) or adam; the rate's scaling and warm-up apply to both")
    add("--momentum", type=float, default=train["momentum"], help="SGD momentum")
    add("--precision", choices=PRECISIONS, default=train["precision"],
        help="mixed_auto: bfloat16 where the hardware has it, float16 with loss scaling on "
             "older GPUs, float32 on CPUs without bfloat16 instructions")
    add("--xla", action=argparse.BooleanOptionalAction, default=False, help="jit_compile the step")
    add("--device", choices=DEVICES, default=train["device"],
        help="cpu: replicas on logical CPU devices (no GPU needed)")
    add("--seed", type=int, default=train["seed"])
    add("--steps-per-epoch", type=int,
        help="cap the steps of an epoch (default: all training images once)")
    add("--image-size", type=int,
        help="the model's input size in pixels; when the shards are smaller (data.resize: "
             "on_device) the model's first layer resizes them (default: the shards' size)")
    add("--shuffle-buffer", type=int, default=data["shuffle_buffer"],
        help="training reader's shuffle buffer, in records (default: %(default)s)")
    add("--cache-mb", type=int, default=data["cache_mb"], metavar="MIB",
        help="hold the decoded training images in memory after the first epoch when they "
             "take at most MIB MiB per input pipeline; 0: always read the shards "
             "(default: %(default)s)")
    add("--communication", choices=COMMUNICATIONS, default=train["communication"],
        help="multiworker collectives: auto (NCCL on GPUs, ring on CPUs), nccl or ring")
    add("--save-model", action=argparse.BooleanOptionalAction, default=False,
        help="save the final model as model.keras in --out (chief only)")
    add("--tensorboard", action=argparse.BooleanOptionalAction, default=False,
        help="write TensorBoard event files to --out/tensorboard (chief only)")
    add("--profile-steps", type=steps_range, metavar="FIRST,LAST",
        help="profile these training steps into --out/tensorboard (chief only)")
    add("--compile-cache", type=Path, metavar="DIR",
        help="Keras 3 on JAX: JAX's persistent compilation cache in DIR, where what this "
             "run compiles is kept and what an earlier run on the same devices compiled is "
             "found (training.compile_cache); your JAX_COMPILATION_CACHE_DIR wins")
    add("--breakdown-steps", type=int, default=0, metavar="N",
        help="trace N steps of the first epoch and time the all-reduce after training, into "
             "--out/breakdown.json (chief only; analysis.breakdown); 0: off")
    add("--keep-trace", action=argparse.BooleanOptionalAction, default=False,
        help="keep the window's raw trace in --out/trace (analysis.keep_traces)")
    add("--telemetry-interval", type=float, default=train["telemetry_interval_s"],
        metavar="SECONDS", help="sample host CPU, RSS and (NVML) GPU use into --out/"
        "telemetry.csv every SECONDS from the chief; 0: off (default: %(default)s)")
    add("--synthetic-check-steps", type=int, default=0, metavar="N",
        help="after training, time N steps on synthetic input (the model's speed without "
             "the input pipeline) for the input-bound check; 0: off")
    add("--attempt", type=int, default=1,
        help="which attempt at this point this is (the workflow counts failed ones)")
    add("--modules", nargs="+", default=(), metavar="NAME",
        help="environment modules the job must have loaded (software.modules): the run "
             "fails with the reason when one is not in LOADEDMODULES")
    add("--container", metavar="IMAGE",
        help="the container the job must run in (software.container): the run fails with "
             "the reason when it is not inside one")
    add("--num-workers", type=int, default=0, metavar="N",
        help="backend torch: N DataLoader worker processes read each rank's batches (in the "
             "same order as without them); 0: the training process reads them (default)")
    add("--compile", action=argparse.BooleanOptionalAction, default=False,
        help="backend torch: torch.compile the model (its compilation in the first steps)")
    add("--time-limit-min", type=float,
        help="stop at an epoch boundary before this many minutes from the start (status "
             "timeout, resumable); inside a SLURM job the job's own end time is used")
    return parser


def parse(argv=None, description: str = DESCRIPTION) -> Settings:
    """Settings from train.py's flags; argparse's usage error (exit 2) for a bad one."""
    parser = build_parser(description)
    args = parser.parse_args(argv)
    if args.batch_per_gpu_file:
        args.batch_per_gpu = int(json.loads(args.batch_per_gpu_file.read_text())["batch_per_gpu"])
    for name in ("gpus", "nodes", "epochs", "batch_per_gpu", "shuffle_buffer", "steps_per_epoch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.num_workers < 0:
        parser.error(f"--num-workers must be at least 0, got {args.num_workers}")
    if (args.num_workers or args.compile) and args.backend != "torch":
        parser.error("--num-workers and --compile are backend torch's: add --keras 3 "
                     "--backend torch")
    if args.cache_mb < 0:
        parser.error(f"--cache-mb must be at least 0, got {args.cache_mb}")
    if args.base_lr <= 0 or args.warmup_epochs < 0 or not 0 <= args.momentum < 1:
        parser.error("--base-lr must be > 0, --warmup-epochs >= 0 and 0 <= --momentum < 1")
    if args.backend in ("jax", "torch") and args.keras != 3:
        parser.error(f"--backend {args.backend} runs Keras 3 only: add --keras 3")
    args.modules = tuple(args.modules)
    return Settings(**vars(args))
