"""The training loop of a PyTorch point (strategy ddp, Keras 3 on the torch backend), as
keras-team/keras' examples/demo_torch_multi_gpu.py writes it: the Keras model is a
`torch.nn.Module`, wrapped in `DistributedDataParallel` (one process per replica), trained
by torch's optimizer on Keras' loss, each rank on its own batches of the study's shards.

It keeps the study's rules as `fit` keeps them on the other backends: the rate of every
step from the warm-up schedule (the rate scaled by the GPUs), the loss the mean over the
global batch (DDP averages the ranks' gradients), a Keras verbose=2 line per epoch and,
through the same callbacks driven by hand, the epoch records, the window and the time
limit. The chief saves a backup after every epoch (the model's and the optimizer's state,
then the epoch count, each file written whole); a rerun restores it on every rank.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from dlscale.measure.torchwindow import INPUT_MARK
from dlscale.train import keraschoice
from dlscale.train.frameworks.handloop import drive

CHECKPOINT = "checkpoint.pt"  # a torch point's backup: model and optimizer state
EPOCH_FILE = "epochs.json"    # beside it: the epochs it holds, {"epoch": count}


def is_backup(folder: Path) -> bool:
    """Whether `folder` holds a torch point's backup."""
    return (folder / EPOCH_FILE).exists() or (folder / CHECKPOINT).exists()


def completed_epochs(folder: Path) -> int:
    try:
        return max(int(json.loads((folder / EPOCH_FILE).read_bytes())["epoch"]), 0)
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def backup_problem(folder: Path) -> str | None:
    """Why a torch backup cannot be restored (its epoch count or its state unreadable)."""
    import torch

    name = folder.name
    try:
        if not isinstance(json.loads((folder / EPOCH_FILE).read_bytes()).get("epoch"), int):
            return f"{name}/{EPOCH_FILE} names no epoch"
        torch.load(folder / CHECKPOINT, map_location="cpu", weights_only=True)
    except Exception as exc:  # OSError, a truncated or foreign file ...
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"{name}: the backup cannot be read ({first[:160]})"
    return None


def module_layer(keras, x, module, name: str):
    """A `torch.nn.Module` (torchvision's, or yours) applied to `x` (N x H x W x C, as
    dlscale feeds every model) as a Keras layer: permuted to PyTorch's N x C x H x W,
    then Keras' TorchModuleWrapper, its output shape found by one call on zeros. Its
    weights stay float32; under a mixed precision policy it computes in the policy's
    dtype through torch's autocast (PyTorch's way), its output back in float32."""
    import torch

    height, width, channels = (int(d) for d in x.shape[1:])
    # the permuted input is channels-last in memory: a convolution's weight gradient
    # then came out channels-last too, not in DDP's bucket layout, and DDP warned "Grad
    # strides do not match bucket view strides" in every torchvision model's log (and
    # copied each such gradient at every step); the module is given NCHW memory
    module.register_forward_pre_hook(contiguous_inputs)
    was_training = module.training
    module.eval()
    with torch.no_grad():
        out = module(torch.zeros(1, channels, height, width))
    module.train(was_training)
    compute = keras.mixed_precision.global_policy().compute_dtype
    if compute != "float32":
        module = autocast(module, getattr(torch, compute))
    x = keras.layers.Permute((3, 1, 2), dtype="float32", name="channels_first")(x)
    return keras.layers.TorchModuleWrapper(module, name=name, dtype="float32",
                                           output_shape=(None, *out.shape[1:]))(x)


def contiguous_inputs(_module, args: tuple) -> tuple:
    """A forward pre-hook: the module's tensor arguments in contiguous memory (a function
    of this module's, so that a module that is pickled keeps it)."""
    return tuple(a.contiguous() if hasattr(a, "contiguous") else a for a in args)


def autocast(module, dtype):
    """`module` run under torch.autocast(dtype) on its input's device, float32 out."""
    import torch

    class Autocasted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.module = module

        def forward(self, x):
            with torch.autocast(x.device.type, dtype=dtype):
                return self.module(x).float()

    return Autocasted()


def on_device(images, labels, device):
    """A batch (dlscale's reader's numpy arrays, or a DataLoader's tensors) as tensors
    on `device`."""
    import torch

    return (torch.as_tensor(images).to(device, non_blocking=True),
            torch.as_tensor(labels).to(device, non_blocking=True))


def tally(loss, probabilities, labels):
    """(loss x images, correct predictions, images) of one batch, float64 on its device:
    summed over batches and ranks, the mean loss and accuracy over every image."""
    import torch

    return torch.stack([loss.detach().double() * len(labels),
                        (probabilities.argmax(-1) == labels).sum().double(),
                        torch.tensor(float(len(labels)), dtype=torch.float64,
                                     device=labels.device)])


def means(totals) -> dict:
    """The loss and accuracy of a tally's sums."""
    return {"loss": float(totals[0] / totals[2]), "accuracy": float(totals[1] / totals[2])}


def make_optimizer(name: str, params, lr: float, momentum: float):
    """torch's SGD or Adam with Keras' defaults (Adam's epsilon 1e-7, as the other
    backends' Keras Adam)."""
    import torch

    if name == "adam":
        return torch.optim.Adam(params, lr=lr, eps=1e-7)
    return torch.optim.SGD(params, lr=lr, momentum=momentum)


class TorchLoop:
    """train(...) for a Keras 3 model on the torch backend, built and compiled (compile
    gives it the loss and metrics the evaluation reads) in this process."""

    def __init__(self, backend, model, plan, settings, schedule, backup: Path):
        import torch

        self.backend, self.model, self.plan = backend, model, plan
        self.schedule, self.backup = schedule, backup
        self.device = torch.device(backend.torch_device)
        model.to(self.device)
        self.replica = model
        if backend.size > 1:
            from torch.nn.parallel import DistributedDataParallel

            self.replica = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.compiled = None  # torch.compile's backend where the point compiles
        if settings.compile:  # its compilation in the first steps (and the first epoch)
            self.replica = torch.compile(self.replica)
            self.compiled = "inductor"  # torch.compile's default backend
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = make_optimizer(settings.optimizer, params, plan.lr, settings.momentum)
        keras = keraschoice.keras()
        self.loss = keras.losses.SparseCategoricalCrossentropy()
        self.step_count = 0
        # float16 compute (mixed_float16) scales the loss, as Keras' LossScaleOptimizer does
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=keras.mixed_precision.global_policy().name ==
            "mixed_float16")

    def restore(self) -> int:
        """The epochs a previous attempt finished (0: start from the beginning); every
        rank loads the chief's backup."""
        import torch

        done = completed_epochs(self.backup)
        if done:
            state = torch.load(self.backup / CHECKPOINT, map_location=self.device,
                               weights_only=True)
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scaler.load_state_dict(state["scaler"])
            self.step_count = int(state["steps"])
        return done

    def save(self, epochs: int) -> None:
        """The chief's backup of `epochs` finished epochs, each file written whole."""
        import torch

        if not self.backend.chief:
            return
        self.backup.mkdir(parents=True, exist_ok=True)
        partial = self.backup / f".{CHECKPOINT}.partial"
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scaler": self.scaler.state_dict(), "steps": self.step_count}, partial)
        os.replace(partial, self.backup / CHECKPOINT)
        meta = self.backup / f".{EPOCH_FILE}.partial"
        meta.write_text(json.dumps({"epoch": epochs}))
        os.replace(meta, self.backup / EPOCH_FILE)

    def _rate(self) -> float:
        rate = float(self.schedule(self.step_count))
        for group in self.optimizer.param_groups:
            group["lr"] = rate
        self.backend.lr = rate
        return rate

    def _step(self, images, labels):
        """One training step on this rank's batch: (loss, probabilities, labels)."""
        x, y = on_device(images, labels, self.device)
        self._rate()
        self.optimizer.zero_grad(set_to_none=True)
        probabilities = self.replica(x, training=True)
        loss = self.loss(y, probabilities)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.step_count += 1
        return loss, probabilities, y

    def _epoch(self, iterator, hooks) -> dict:
        import torch

        totals = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss, hits, images
        for step in range(self.plan.steps):
            hooks.on_train_batch_begin(step)
            with torch.profiler.record_function(INPUT_MARK):  # the window's input
                images, labels = next(iterator)
            loss, probabilities, y = self._step(images, labels)
            with torch.no_grad():
                totals += tally(loss, probabilities, y)
            hooks.on_train_batch_end(step)
        return means(self.backend.all_sum(totals))

    def timed_steps(self, batches, steps: int) -> float:
        """Seconds of `steps` training steps on `batches` (the synthetic check's one
        repeated batch), after as many untimed ones; every rank takes part."""
        import torch

        def run():
            for _ in range(steps):
                loss, _, _ = self._step(*next(batches))
            float(loss)  # on the host: the device's work is done
            if self.device.type == "cuda":
                torch.cuda.synchronize()

        run()
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    def train(self, dataset, epochs: int, callbacks: list, verbose: bool) -> int:
        """Train from the restored epoch on; return the epoch it resumed at (0: none)."""
        start = self.restore()
        iterator = iter(dataset)
        self._rate()  # the first step's, for the records
        drive(self.model, callbacks, start, epochs, self.plan.steps, verbose,
              lambda hooks: self._epoch(iterator, hooks), self.save)
        return start
