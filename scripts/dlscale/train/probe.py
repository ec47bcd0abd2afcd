"""The network's probe: the all-reduce timed alone across a study's node count, once per
node count and strategy (the rule probe_network), on the allocation of the study's
largest point there, with that point's software, strategy and devices. It is timed as
the points time theirs (dlscale.measure.allreduce: nccl-tests' way), from 4 KiB up to the
largest gradient of the study, or until one all-reduce takes PROBE_CALL_S; the
prediction (dlscale.reporting.explain) fits the link between nodes on it.
"""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

from dlscale.core.files import write_json_atomic
from dlscale.jobs import slurm
from dlscale.logparse.lines import last_lines
from dlscale.measure import allreduce
from dlscale.train import keraschoice
from dlscale.train.settings import Settings

# an all-reduce this long is bandwidth-bound on any link: larger buffers add time, not
# knowledge (at 100 Mbit/s, 4 MiB; on NVLink, never reached below the gradient)
PROBE_CALL_S = 0.25
# Tests only: seconds of sleep before the probe times anything, so that its job is still
# running when a test ends it (tests/cluster/test_slurm.py, a cancelled probe)
SLOW_PROBE_ENV = "DLSCALE_TEST_SLOW_PROBE_S"


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
    time.sleep(float(os.environ.get(SLOW_PROBE_ENV) or 0))
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


# a Python exception's last line, or a launcher's word on a worker's end: the workers'
# error, where the log's last line is often a framework's warning printed on the way out
ERROR_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Interrupt)\b.*|dlscale launch: .*"
                        r"(?:exited|killed|signal).*)$")


def workers_error(log: Path) -> str:
    """Why the probe's workers failed, from their log: the last error line (an exception,
    the launcher's word on a worker's end), else the last line."""
    try:
        lines = last_lines(log, 200, width=300)
    except OSError:
        return "no output"
    errors = [line for line in lines if ERROR_LINE.match(line)]
    return (errors or lines or ["no output"])[-1]


def record_failure(out: Path, log: Path) -> int:
    """The probe's record where its workers failed inside a living job: their error."""
    return record(out, f"the probe failed ({workers_error(log)}); see {log}")


def record_ended(out: Path, job_file: Path, log: Path) -> int:
    """The probe's record where SLURM ended its job before the workers or the fallback
    wrote one (scancel, its time limit, a node's failure): that job's state, as the
    accounting has it, read on the rule's retry."""
    try:
        job = job_file.read_text().strip()
    except OSError:
        job = ""
    state = ended_state(job) if job else None
    ended = (f"its SLURM job {job} ended {state}" if state else
             f"its SLURM job {job} ended" if job else "its job ended")
    return record(out, f"the probe failed ({ended} before the probe wrote its record: "
                       f"scancel, the time limit or a node's failure); see {log}")


def ended_state(job: str, wait_s: float = 60.0) -> str | None:
    """The ended job's state (CANCELLED, TIMEOUT, NODE_FAIL...), asked again while SLURM
    still says it runs (its end reaches the controller a moment after the job's); None
    where SLURM never says."""
    deadline = time.time() + wait_s
    while True:
        state = slurm.job_state(job)
        if state not in ("RUNNING", "PENDING", "COMPLETING", "SUSPENDED"):
            return state
        if time.time() > deadline:
            return None
        time.sleep(2)


def record(out: Path, error: str) -> int:
    write_json_atomic(out, {"error": error})
    print(f"probe: {error}; the prediction goes without it", flush=True)
    return 0
