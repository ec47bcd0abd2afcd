"""How many processes (GPUs) and nodes a job started, from what its log says of the launch,
for a run whose own lines state no GPU count: the launcher's command line (`mpirun -np
16`, `srun --ntasks=8 -N 2`, `horovodrun -np 4`, as a job script's `set -x` echoes it),
`torchrun --nproc-per-node 4 --nnodes 2`, `deepspeed --num_gpus 8 --num_nodes 2`; per node
as OpenMPI's `mpirun -np 8 -N 2` and `srun -N 2 --ntasks-per-node=4` say it), DeepSpeed's
launcher lines (`WORLD INFO DICT: {...}`, `nnodes=2, num_local_procs=8`,
`dist_world_size=16`), the environment a job echoes (`SLURM_NTASKS=8`, `WORLD_SIZE=8`,
`SLURM_NNODES=2`) and the world size a process prints (DeepSpeed's `world_size ....... 8`),
PyTorch Lightning 1.x's `initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4`, the
processes DeepSpeed's launcher saw end (`Process 73593 exits successfully.`) and MXNet's
per-rank `Node[k] start` lines (each counted), and last the distinct rank prefixes of the
lines (srun -l's `1: `, torchrun's `[default1]:`; where the workers whose lines a run holds
outnumber them, as torchrun's local ranks on several nodes do, the workers). Each run takes what was
said from the previous run's first line to the next run's (a job script running one launch
per GPU count holds its runs in that order); of several launches there, the largest
(a job's set-up steps run one task: `srun -n 1 ... mpirun -np 1` before `mpirun -np 16`).
The source goes into the run's `gpus_from`; where sources, or the run's own statement,
disagree, a warning names both and the first is kept (the run's own, then the launcher,
the environment, Lightning's line, the ranks); a launch of one process is no conflict (a
MirroredStrategy job holds several GPUs in one). Where only one worker's device list
(TensorFlow's `Using MirroredStrategy with devices (...)`) said a count, the launch's
processes multiply it: each worker holds that many. A launch that names the dtype the
parameters train in (torchtitan's `--training.dtype=bfloat16`: parameters, gradients and
optimizer states in it, no mixed precision) gives the runs after it their `param_dtype`,
the prediction's bytes a gradient.
"""

from __future__ import annotations

import math
import re

NAME = "launch"


def might_say(line: str) -> bool:
    """Whether a line may say something of the launch: every line a pattern below can
    match holds one of these words (DeepSpeed's launcher lines are its launch.py's;
    plain substring tests: 0.2 us a line against a regex's 0.55; a log of millions of
    lines pays it on each)."""
    return ("run" in line or "_SIZE" in line or "SLURM_" in line or "NUM_NODES" in line
            or "MEMBER: " in line or "Node[" in line or "mpiexec" in line
            or "launch" in line or "deepspeed" in line or "world_size" in line
            or "odes" in line or "training.dtype" in line)


_AFTER = r"(?:^|[\s'\"=;(+/])"  # a launcher is a word of its own, or a path's last
LAUNCHERS = re.compile(_AFTER + r"(mpirun|mpiexec|orterun|horovodrun)\b[^|;&]*?\s"
                       r"(?:-np|-n|--np|-c)[= ]?(\d+)\b")
SRUN = re.compile(_AFTER + r"srun\b([^|;&]*)")
SRUN_TASKS = re.compile(r"\s(?:--ntasks[= ]|-n ?)(\d+)\b")
# srun's options whose value is the next word (`-n 4`, `--nodes 2`, `-p gpu`)
SRUN_VALUED = {"-n", "-N", "-c", "-p", "-t", "-J", "-o", "-e", "-w", "-x", "-A", "-q", "-G",
               "--ntasks", "--nodes", "--ntasks-per-node", "--cpus-per-task", "--partition",
               "--time", "--job-name", "--output", "--error", "--nodelist", "--exclude",
               "--account", "--qos", "--gpus", "--gres", "--mem", "--export", "--mpi",
               "--gpus-per-node", "--gpus-per-task", "--cpu-bind", "-D"}
SRUN_NODES = re.compile(r"\s(?:--nodes[= ]|-N ?)(\d+)\b")
PER_NODE = re.compile(r"\s(?:--ntasks-per-node[= ]|--npernode[= ]|-npernode |-N ?|-ppn ?|"
                      r"--map-by[= ]ppr:)(\d+)\b")  # srun's, OpenMPI's, MPICH's a node
TORCHRUN = re.compile(_AFTER + r"(torchrun|torch\.distributed\.(?:run|launch))\b([^|;&]*)")
NPROC = re.compile(r"\s--nproc[-_]per[-_]node[= ](\d+)\b")
NNODES = re.compile(r"\s--nnodes[= ](?:\d+:)?(\d+)\b")  # an elastic 1:4: its largest
DTYPE = re.compile(r"--training\.dtype[= ]\s*(\w+)")  # torchtitan's
DEEPSPEED = re.compile(_AFTER + r"deepspeed\b(?![.\w-])([^|;&]*)")  # not --deepspeed_config
NUM_GPUS = re.compile(r"\s--num[_-]gpus[= ](\d+)\b")
NUM_NODES = re.compile(r"\s--num[_-]nodes[= ](\d+)\b")
# DeepSpeed's launcher (deepspeed/launcher/launch.py), on each node
WORLD_INFO = re.compile(r"WORLD INFO DICT: \{(.*)\}")
WORLD_HOST = re.compile(r"'[^']*': \[([\d, ]*)\]")
LOCAL_PROCS = re.compile(r"\bnnodes=(\d+), num_local_procs=(\d+)\b")
DIST_WORLD = re.compile(r"\bdist_world_size=(\d+)\b")
# a process's world size: DeepSpeed's config print (`world_size ....... 8`), its MPI
# discovery (`world_size=24`), a script's own print
WORLD_SIZE = re.compile(r"(?<![\w.])world_size(?: \.+ | ?= ?|: )(\d+)\b")
EXITS = re.compile(r"\bProcess (\d+) exits (?:successfully|with return code)")
# (ezpz, ALCF's launcher helpers, echoes WORLD_SIZE_IN_USE=8 beside WORLD_SIZE_TOTAL)
ENV_TASKS = re.compile(r"\b(SLURM_NTASKS|WORLD_SIZE(?:_IN_USE)?|OMPI_COMM_WORLD_SIZE|PMI_SIZE)"
                       r"[=:] ?(\d+)\b")
ENV_NODES = re.compile(r"\b(SLURM_NNODES|SLURM_JOB_NUM_NODES) ?[=:] ?(\d+)\b")
# a job script's echo of its allocation: the node list, a banner's nodes, the cluster
NODELIST = re.compile(r"\bSLURM_(?:JOB_)?NODELIST\s*[=:]\s*([\w.\-\[\],]+)")
BANNER_NODES = re.compile(r"^\W*(?:nodes|number of nodes|num nodes)\s*[:=]\s*(\d+)\s*$",
                          re.IGNORECASE)
CLUSTER = re.compile(r"\bSLURM_CLUSTER_NAME\s*[=:]\s*([\w.\-]+)")
MEMBER = re.compile(r"initializing distributed: GLOBAL_RANK: \d+, MEMBER: \d+/(\d+)")
RANK_START = re.compile(r"\bNode\[(\d+)\] start\b")
# the first kept on a conflict
ORDER = ("launcher", "environment", "lightning", "processes", "ranks", "prefixes")
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
        self.exits: dict[int, int] = {}  # a process DeepSpeed's launcher saw end -> its line
        self.clusters: list[tuple[int, str]] = []  # (line, SLURM_CLUSTER_NAME)
        self.nodelists: list[tuple[int, str]] = []  # (line, the job's node list)
        self.dtypes: list[tuple[int, str]] = []  # (line, the dtype parameters train in)

    def feed(self, number: int, text: str) -> None:
        """A line that might_say something."""
        if found := LAUNCHERS.search(text):
            count, what = int(found[2]), f"{found[1]} -np {found[2]}"
            self.tasks.append((number, "launcher", count, what))
            if per_node := PER_NODE.search(text, found.start()):
                nodes = -(-count // int(per_node[1]))
                self.nodes.append((number, nodes, f"{what} with {per_node[1]} a node"))
        elif found := SRUN.search(text):
            command = self.srun(number, found[1])  # what srun starts: torchrun on a node
            if inner := TORCHRUN.search(command):
                self.per_node(number, inner[2], NPROC, NNODES, inner[1])
            elif inner := DEEPSPEED.search(command):
                self.per_node(number, inner[1], NUM_GPUS, NUM_NODES, "deepspeed")
        elif found := TORCHRUN.search(text):
            self.per_node(number, found[2], NPROC, NNODES, found[1])
        elif found := DEEPSPEED.search(text):
            self.per_node(number, found[1], NUM_GPUS, NUM_NODES, "deepspeed")
        for name, value in ENV_TASKS.findall(text):
            self.tasks.append((number, "environment", int(value), f"{name}={value}"))
        for name, value in ENV_NODES.findall(text):
            self.nodes.append((number, int(value), f"{name}={value}"))
        if "NODELIST" in text and (found := NODELIST.search(text)):
            self.nodes.append((number, hostlist_count(found[1]),
                               f"SLURM_JOB_NODELIST {found[1]}"))
            self.nodelists.append((number, found[1]))
        if "odes" in text and (found := BANNER_NODES.match(text)):
            self.nodes.append((number, int(found[1]), f"the banner's '{text.strip()}'"))
        if "training.dtype" in text and (found := DTYPE.search(text)):
            self.dtypes.append((number, found[1].lower()))
        if "CLUSTER_NAME" in text and (found := CLUSTER.search(text)):
            self.clusters.append((number, found[1]))
        if "world_size" in text or "WORLD INFO" in text or "num_local_procs" in text:
            self.deepspeed(number, text)
        if found := MEMBER.search(text):
            self.tasks.append((number, "lightning", int(found[1]),
                               f"Lightning's MEMBER: .../{found[1]}"))
        if found := RANK_START.search(text):
            self.ranks.setdefault(int(found[1]), number)
        if found := EXITS.search(text):
            self.exits.setdefault(int(found[1]), number)

    def srun(self, number: int, flags: str) -> str:
        """The tasks (-n, or -N times --ntasks-per-node) and nodes of an srun line, read
        from srun's own options (not those of the command it starts); that command."""
        words, at = flags.split(), 0
        while at < len(words) and words[at].startswith("-"):
            at += 2 if words[at] in SRUN_VALUED and at + 1 < len(words) else 1
        flags, command = " " + " ".join(words[:at]), " " + " ".join(words[at:])
        tasks, nodes = SRUN_TASKS.search(flags), SRUN_NODES.search(flags)
        if tasks:
            self.tasks.append((number, "launcher", int(tasks[1]), f"srun -n {tasks[1]}"))
        elif nodes and (per_node := PER_NODE.search(flags.replace(nodes[0], " ", 1))):
            count = int(nodes[1]) * int(per_node[1])
            self.tasks.append((number, "launcher", count,
                               f"srun -N {nodes[1]} --ntasks-per-node={per_node[1]}"))
        if nodes:
            self.nodes.append((number, int(nodes[1]), f"srun -N {nodes[1]}"))
        return command

    def per_node(self, number: int, flags: str, procs: re.Pattern, nodes: re.Pattern,
                 name: str) -> None:
        """A launcher that starts so many processes a node on so many nodes (torchrun's
        --nproc-per-node and --nnodes, deepspeed's --num_gpus and --num_nodes)."""
        each, over = procs.search(flags), nodes.search(flags)
        if each:
            count = int(each[1]) * (int(over[1]) if over else 1)
            self.tasks.append((number, "launcher", count, f"{name} {each[0].strip()}"
                               + (f" {over[0].strip()}" if over else "")))
        if over:
            self.nodes.append((number, int(over[1]), f"{name} {over[0].strip()}"))

    def deepspeed(self, number: int, text: str) -> None:
        """DeepSpeed's launcher lines (every process of every node, the nodes) and the
        world size a process prints."""
        if found := WORLD_INFO.search(text):
            hosts = WORLD_HOST.findall(found[1])
            count = sum(len([r for r in ranks.split(",") if r.strip()]) for ranks in hosts)
            if count:
                self.tasks.append((number, "launcher", count,
                                   f"DeepSpeed's WORLD INFO DICT ({len(hosts)} node(s))"))
                self.nodes.append((number, len(hosts), "DeepSpeed's WORLD INFO DICT"))
        if found := LOCAL_PROCS.search(text):
            nodes, each = int(found[1]), int(found[2])
            self.tasks.append((number, "launcher", nodes * each,
                               f"DeepSpeed's nnodes={nodes}, num_local_procs={each}"))
            self.nodes.append((number, nodes, f"DeepSpeed's nnodes={nodes}"))
        if found := DIST_WORLD.search(text):
            self.tasks.append((number, "launcher", int(found[1]),
                               f"DeepSpeed's dist_world_size={found[1]}"))
        elif found := WORLD_SIZE.search(text):
            self.tasks.append((number, "environment", int(found[1]),
                               f"a process's world_size {found[1]}"))

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
        ends = [line for line in self.exits.values() if first <= line < last]
        if len(ends) > 1:
            best["processes"] = (len(ends), f"{len(ends)} processes' ends (DeepSpeed's "
                                 "'Process N exits')", min(ends))
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
            if prefixes and run.streams > prefixes:
                # torchrun's [default0]: is a local rank: each prefix holds the workers of
                # that local rank on every node
                found.append(("prefixes", run.streams, f"{run.streams} workers' lines under "
                              f"{prefixes} ranks' line prefixes (each prefix's lines "
                              f"{run.streams // prefixes} workers')", None))
            elif prefixes > 1:
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
            # the cluster, nodes and dtype the job's launch said before the run (the last)
            for key, said in (("slurm_cluster", self.clusters), ("nodelist", self.nodelists),
                              ("param_dtype", self.dtypes)):
                if before := [value for line, value in said if line < last]:
                    run.facts[key] = before[-1]
        return runs


def hostlist_count(hostlist: str) -> int:
    """The hosts a SLURM host list names: `gpu[003,009]` 2, `n[1-4],m1` 5 (counted as
    SLURM's hostlist expands it, without asking scontrol: the log is read anywhere)."""
    count = 0
    for _name, ranges in HOSTS.findall(hostlist):
        for part in ranges.split(",") if ranges else [""]:
            low, _dash, high = part.partition("-")
            count += int(high) - int(low) + 1 if high.isdigit() and low.isdigit() else 1
    return count


HOSTS = re.compile(r"([^,\[\]]+)(?:\[([^\]]*)\])?")  # a host list's entries: name[ranges]
