"""The network's probes a study plans (the rule probe_network): one per strategy and node
count over one node, on the allocation of the largest point there, so that the link
between nodes is measured once per node count, not per point (dlscale.train.probe).
"""

from __future__ import annotations

import dataclasses
import shlex

from dlscale.core import models
from dlscale.core.contract import NETWORK
from dlscale.plan.rulefunctions import signature_once

# the largest buffer where no model of the study has a known gradient (a model of yours)
UNKNOWN_GRADIENT_BYTES = 64 * 2 ** 20
# sbatch's flag for the probe's job: its nodes taken whole, so that no job (the study's
# own points included: Snakemake submits them with the probe) shares the link while it is
# timed. On the test bed, the two-node point trained beside the probe: both sent over the
# slowed link at once, the probe read it at 69 Mbit/s of 100 and the point was predicted
# +18.6 % off (docs/benchmarks.md, "The test bed")
EXCLUSIVE = "--exclusive"


def probe_file(key: str) -> str:
    """results/network/{strategy}/nodes{N}.json for a probe's key."""
    return f"{NETWORK}/{key}.json"


def plan(points: dict, config: dict) -> dict:
    """probe key ("multiworker/nodes2") -> the point whose allocation the probe takes:
    the largest of dlscale's own points of that strategy and node count (commands start
    their own processes, and one node has no link between nodes to probe). None without
    analysis.breakdown (no prediction is made then)."""
    if not config["analysis"]["breakdown"]:
        return {}
    found: dict = {}
    for p in points.values():
        if p.command or p.nodes < 2:
            continue
        key = f"{p.strategy}/nodes{p.nodes}"
        if key not in found or (p.gpus, p.key) > (found[key].gpus, found[key].key):
            found[key] = p
    return dict(sorted(found.items()))


def largest_bytes(points: dict) -> int:
    """The largest float32 gradient of the study's models (the models table's, at 10
    classes and 128 px), or UNKNOWN_GRADIENT_BYTES where none is known."""
    table = models.table()
    known = [table[p.model].gradient_bytes for p in points.values()
             if not p.model_from and p.model in table and table[p.model].gradient_bytes]
    return max(known, default=UNKNOWN_GRADIENT_BYTES)


def worker_command(study, p, out: str) -> str:
    """What launch.py runs for the probe: probe_network.py with the point's train.py
    flags (a fixed batch: a batch search's file is not needed to time a collective)."""
    script = study.basedir / "scripts" / "probe_network.py"
    p = dataclasses.replace(p, batch_per_gpu=1, profile_steps=None)
    return (f"{shlex.quote(study.python(p))} {shlex.quote(str(script))} "
            f"--probe-out {shlex.quote(out)} --largest-bytes {largest_bytes(study.points)} -- "
            f"{study.train_flags(p)} --out {shlex.quote(out + '.d')} "
            f"--data-dir {shlex.quote(study.data_dir)}")


def worker_of(study, planned: dict):
    """The rule's params function: (wildcards, output) -> the probe's worker command."""
    return lambda wildcards, output: worker_command(study, planned[wildcards.probe], output[0])


def job_resources(resources: dict) -> dict:
    """The probe's job's resources: its point's (`resources`, the train rule's), the
    nodes taken whole (EXCLUSIVE) on the first attempt; the retry, which only records
    why SLURM ended the first (dlscale.plan.rulefunctions.retry_records_only), asks for
    the site's slurm_extra alone."""
    site = resources["slurm_extra"]

    def slurm_extra(wildcards, attempt):
        return (" ".join(filter(None, [site(wildcards), EXCLUSIVE])) if attempt == 1
                else site(wildcards))
    return resources | {"slurm_extra": signature_once(slurm_extra)}
