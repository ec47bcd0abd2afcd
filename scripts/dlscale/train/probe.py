"""The network's probe: the all-reduce timed alone across a study's node count, once per
node count and strategy (the rule probe_network), on the allocation of the study's
largest point there, with that point's software, strategy and devices. It is timed as
the points time theirs (dlscale.train.allreduce: nccl-tests' way), from 4 KiB up to the
largest gradient of the study, or until one all-reduce takes PROBE_CALL_S; the
prediction (dlscale.reporting.explain) fits the link between nodes on it.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from dlscale.core.files import write_json_atomic
from dlscale.jobs import slurm
from dlscale.logparse.lines import last_lines
from dlscale.train import allreduce, keraschoice
from dlscale.train.settings import Settings

# an all-reduce this long is bandwidth-bound on any link: larger buffers add time, not
# knowledge (at 100 Mbit/s, 4 MiB; on NVLink, never reached below the gradient)
PROBE_CALL_S = 0.25


def probe_sizes(largest: int) -> list[int]:
    """4 KiB, 16 KiB, ... (each four times the last) below `largest`, then `largest`."""
    sizes = [allreduce.BENCH_SMALLEST]
    while sizes[-1] * 4 < largest:
        sizes.append(sizes[-1] * 4)
    return sizes + [largest - largest % 4] if largest > sizes[-1] else sizes


def measure(backend, largest: int) -> dict:
    """The all-reduce's median seconds per size, 4 KiB up to `largest` bytes, stopping
    after the first size whose call took PROBE_CALL_S or more; every worker agrees on
    where to stop (the chief's time decides)."""
    sizes, t0 = probe_sizes(largest), time.perf_counter()
    seconds = allreduce.time_allreduce(
        backend, sizes, enough=lambda took: backend.agree(backend.chief and took >= PROBE_CALL_S))
    return allreduce.record(sizes, seconds, t0)


def run(settings: Settings, largest: int, out: Path) -> int:
    """Time the collective on every worker; the chief writes `out` (JSON)."""
    from dlscale.train.driver import resolve_strategy

    keraschoice.use_keras(settings.keras, settings.backend,
                          host_devices=settings.gpus // settings.nodes
                          if settings.device == "cpu" else 1)
    keraschoice.import_framework()
    from dlscale.train.strategies import make_backend

    strategy = resolve_strategy(settings)
    backend = make_backend(strategy, settings)
    backend.setup()
    hosts = sorted({h.rsplit(":", 1)[0] for h in backend.facts().get("cluster") or []})
    if not hosts and os.environ.get("SLURM_JOB_NODELIST"):
        hosts = slurm.hostnames(os.environ["SLURM_JOB_NODELIST"])
    collective = measure(backend, largest)
    if backend.chief:
        write_json_atomic(out, {
            "strategy": strategy, "backend": settings.backend, "device": settings.device,
            "nodes": settings.nodes, "gpus": settings.gpus, "workers": backend.size,
            "hosts": hosts or [socket.gethostname()], "collective": collective})
        print(f"probe: {settings.gpus} replicas on {settings.nodes} node(s), {strategy}: "
              + ", ".join(f"{b} B {s * 1e3:.2f} ms" for b, s in
                          zip(collective["bytes"], collective["seconds"], strict=True)))
    return 0


def record_failure(out: Path, log: Path) -> int:
    """The probe's record where its workers failed: why, from the log's last line."""
    try:
        lines = last_lines(log, 1, width=300)
    except OSError:
        lines = []
    why = lines[-1] if lines else "no output"
    write_json_atomic(out, {"error": f"the probe failed ({why}); see {log}"})
    print(f"probe: failed ({why}); the prediction goes without it", flush=True)
    return 0
