"""The strategies a point trains with, one backend each, each in its framework's folder
(dlscale.train.frameworks: tensorflow's mirrored and multiworker, horovod's, keras3's
dataparallel on JAX, torch's ddp), and `make_backend`, which picks one as
tensorflow/models' `get_distribution_strategy` does: the driver and the probe have no
strategy branches."""

from __future__ import annotations

from dlscale.train.frameworks.backend import Backend
from dlscale.train.frameworks.horovod.horovod import Horovod
from dlscale.train.frameworks.keras3.dataparallel import DataParallel
from dlscale.train.frameworks.tensorflow.backends import Mirrored, MultiWorker
from dlscale.train.frameworks.torch.torchddp import DDP
from dlscale.train.training import RunError

BACKENDS = {b.kind: b for b in (Mirrored, MultiWorker, Horovod, DataParallel, DDP)}


def make_backend(kind: str, settings) -> Backend:
    if kind not in BACKENDS:
        raise RunError(f"unknown strategy '{kind}': expected one of {', '.join(BACKENDS)}", 2)
    return BACKENDS[kind](settings)
