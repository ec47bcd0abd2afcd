"""The strategies a point trains with, one backend each (dlscale.train.backends:
TensorFlow's and JAX's; dlscale.train.torchddp: PyTorch's), and `make_backend`, which
picks one as tensorflow/models' `get_distribution_strategy` does: the driver and the
probe have no strategy branches."""

from __future__ import annotations

from dlscale.train.backends import Backend, DataParallel, Horovod, Mirrored, MultiWorker
from dlscale.train.torchddp import DDP
from dlscale.train.training import RunError

BACKENDS = {b.kind: b for b in (Mirrored, MultiWorker, Horovod, DataParallel, DDP)}


def make_backend(kind: str, settings) -> Backend:
    if kind not in BACKENDS:
        raise RunError(f"unknown strategy '{kind}': expected one of {', '.join(BACKENDS)}", 2)
    return BACKENDS[kind](settings)
