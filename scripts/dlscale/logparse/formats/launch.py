"""How many processes (GPUs) and nodes a job started, from what its log says of the launch,
for a run whose own lines state no GPU count: the launcher's command line (`mpirun -np
16`, `srun --ntasks=8 -N 2`, `horovodrun -np 4`, as a job script's `set -x` echoes it),
the environment a job echoes (`SLURM_NTASKS=8`, `WORLD_SIZE=8`, `SLURM_NNODES=2`),
PyTorch Lightning 1.x's `initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4`, and
MXNet's per-rank `Node[k] start` lines (the ranks counted), and last the distinct rank
prefixes of the lines (srun -l's `1: `, torchrun's `[rank1]:`). Each run takes what was
said from the previous run's first line to the next run's (a job script running one launch
per GPU count holds its runs in that order); of several launches there, the largest
(a job's set-up steps run one task: `srun -n 1 ... mpirun -np 1` before `mpirun -np 16`).
The source goes into the run's `gpus_from`; where sources, or the run's own statement,
disagree, a warning names both and the first is kept (the run's own, then the launcher,
the environment, Lightning's line, the ranks); a launch of one process is no conflict (a
MirroredStrategy job holds several GPUs in one). Where only one worker's device list
(TensorFlow's `Using MirroredStrategy with devices (...)`) said a count, the launch's
processes multiply it: each worker holds that many.
"""

from __future__ import annotations

import math
import re

NAME = "launch"


def might_say(line: str) -> bool:
    """Whether a line may say something of the launch: every line a pattern below can
    match holds one of these words (plain substring tests: 0.2 us a line against a
    regex's 0.55; a log of millions of lines pays it on each)."""
    return ("run" in line or "_SIZE" in line or "SLURM_N" in line or "NUM_NODES" in line
            or "MEMBER: " in line or "Node[" in line or "mpiexec" in line)


_AFTER = r"(?:^|[\s'\"=;(+])"  # a launcher is a word of its own
LAUNCHERS = re.compile(_AFTER + r"(mpirun|mpiexec|orterun|horovodrun)\b[^|;&]*?\s"
                       r"(?:-np|-n|--np|-c)[= ]?(\d+)\b")
SRUN = re.compile(_AFTER + r"srun\b([^|;&]*)")
SRUN_TASKS = re.compile(r"\s(?:--ntasks[= ]|-n ?)(\d+)\b")
SRUN_NODES = re.compile(r"\s(?:--nodes[= ]|-N ?)(\d+)\b")
ENV_TASKS = re.compile(r"\b(SLURM_NTASKS|WORLD_SIZE|OMPI_COMM_WORLD_SIZE|PMI_SIZE)[=:] ?(\d+)\b")
ENV_NODES = re.compile(r"\b(SLURM_NNODES|SLURM_JOB_NUM_NODES)[=:] ?(\d+)\b")
MEMBER = re.compile(r"initializing distributed: GLOBAL_RANK: \d+, MEMBER: \d+/(\d+)")
RANK_START = re.compile(r"\bNode\[(\d+)\] start\b")
# the first kept on a conflict
ORDER = ("launcher", "environment", "lightning", "ranks", "prefixes")
DEVICE_LIST = "one worker's device list"  # a run's gpus_from where that alone said it


def named(what: str, line: int | None) -> str:
    """A source as a row or a warning names it: with its line where it has one."""
    return what if line is None else f"{what} (line {line})"


class LaunchReader:
    """What a log's lines say of the launch, line by line (fed by dlscale.logparse.reader)."""

    def __init__(self):
        # (line, kind, count, what) for the GPU count; (line, count, what) for nodes
        self.tasks: list[tuple[int, str, int, str]] = []
        self.nodes: list[tuple[int, int, str]] = []
        self.ranks: dict[int, int] = {}  # rank -> the line of its start

    def feed(self, number: int, text: str) -> None:
        """A line that might_say something."""
        if found := LAUNCHERS.search(text):
            self.tasks.append((number, "launcher", int(found[2]), f"{found[1]} -np {found[2]}"))
        elif found := SRUN.search(text):
            if tasks := SRUN_TASKS.search(found[1]):
                self.tasks.append((number, "launcher", int(tasks[1]), f"srun -n {tasks[1]}"))
            if nodes := SRUN_NODES.search(found[1]):
                self.nodes.append((number, int(nodes[1]), f"srun -N {nodes[1]}"))
        for name, value in ENV_TASKS.findall(text):
            self.tasks.append((number, "environment", int(value), f"{name}={value}"))
        for name, value in ENV_NODES.findall(text):
            self.nodes.append((number, int(value), f"{name}={value}"))
        if found := MEMBER.search(text):
            self.tasks.append((number, "lightning", int(found[1]),
                               f"Lightning's MEMBER: .../{found[1]}"))
        if found := RANK_START.search(text):
            self.ranks.setdefault(int(found[1]), number)

    def said(self, first: float, last: float) -> tuple[list[tuple[str, int, str, int]],
                                                       tuple[int, str, int] | None]:
        """([(kind, count, what, line)] the largest of each kind, in ORDER; the nodes
        (count, what, line) or None) from lines `first` <= line < `last`."""
        best: dict[str, tuple[int, str, int]] = {}
        for line, kind, count, what in self.tasks:
            if first <= line < last and count > best.get(kind, (0,))[0]:
                best[kind] = (count, what, line)
        ranks = [line for line in self.ranks.values() if first <= line < last]
        if len(ranks) > 1:
            best["ranks"] = (len(ranks), f"{len(ranks)} ranks' Node[k] start lines", min(ranks))
        nodes = max(((c, w, n) for n, c, w in self.nodes if first <= n < last),
                    default=None, key=lambda found: found[0])
        return [(kind, *best[kind]) for kind in ORDER if kind in best], nodes

    def apply(self, runs: list, path: str, prefixes: int = 0) -> list:
        """The runs with the GPU count (and nodes) of their launch where they state none,
        `gpus_from` in their facts, and a warning where what is said disagrees.
        `prefixes`: the distinct rank prefixes of the log's lines (srun -l's `0: `,
        torchrun's `[rank1]:`), the processes where nothing else says."""
        for index, run in enumerate(runs):
            first = runs[index - 1].line if index else 0
            last = runs[index + 1].line if index + 1 < len(runs) else math.inf
            found, nodes = self.said(first, last)
            if prefixes > 1:
                found.append(("prefixes", prefixes, f"{prefixes} ranks' line prefixes", None))
            where = f"{path} (run from line {run.line})"
            if run.facts.get("gpus_from") == DEVICE_LIST and found:
                # one worker's devices (the count it gave) times the workers launched
                devices = run.settings["gpus"]
                _kind, count, what, line = found[0]
                run.settings["gpus"] = devices * count
                run.facts["gpus_from"] = named(what, line) + (
                    f" x {devices} devices a worker" if devices > 1 else "")
                found = []  # said once, by the launch
            elif "gpus" in run.settings:
                run.facts.setdefault("gpus_from", "log")
                # a launch of one process with several GPUs (MirroredStrategy) is no conflict
                found = [("log", run.settings["gpus"], "its own lines", run.line),
                         *(f for f in found if f[1] > 1)]
            elif found:
                _kind, count, what, line = found[0]
                run.settings["gpus"] = count
                run.facts["gpus_from"] = named(what, line)
            if found and (other := [f for f in found[1:] if f[1] != found[0][1]]):
                kind, count, what, line = found[0]
                kept = what if kind == "log" else named(what, line)
                run.warnings.append(f"{where}: {kept} say {count} GPU(s); " + ", ".join(
                    f"{named(w, n)} says {c}" for _k, c, w, n in other) + f": {count} kept")
            if nodes and "nodes" not in run.settings:
                run.settings["nodes"] = nodes[0]
                run.facts["nodes_from"] = f"{nodes[1]} (line {nodes[2]})"
        return runs
