"""The GPU count and nodes of a launch, per node as launchers say them (OpenMPI's -N, srun's
--ntasks-per-node, torchrun's --nproc-per-node and --nnodes, deepspeed's --num_gpus and
--num_nodes), from DeepSpeed's launcher lines, and from torchrun's local-rank prefixes on
several nodes (dlscale.logparse.formats.launch), on real outputs: tests/data/launch."""

from __future__ import annotations

import math

import pytest
from conftest import ROOT

from dlscale.logparse.formats.launch import LaunchReader, might_say
from dlscale.logparse.reader import parse_file_runs, parse_runs

DATA = ROOT / "tests" / "data" / "launch"
ECHOES = [line for line in (DATA / "launch_lines.out").read_text().splitlines()
          if line.startswith("+ ") and not line.startswith("+ echo")]


def said(lines: list[str]) -> tuple:
    reader = LaunchReader()
    for number, line in enumerate(lines, 1):
        if might_say(line):
            reader.feed(number, line)
    return reader.said(0, math.inf)


@pytest.mark.parametrize("index, count, what, nodes", [
    (0, 8, "mpirun -np 8", (4, "mpirun -np 8 with 2 a node")),  # -N 2: 2 a node
    (1, 8, "mpirun -np 8", (2, "mpirun -np 8 with 4 a node")),  # a path, ppr:4:node
    (2, 4, "mpirun -np 4", (2, "mpirun -np 4 with 2 a node")),  # --npernode 2
    (3, 8, "srun -N 2 --ntasks-per-node=4", (2, "srun -N 2")),
    (4, 8, "srun -N 2 --ntasks-per-node=4", (2, "srun -N 2")),  # --nodes=2, per node 4
    (5, 8, "torchrun --nproc-per-node 4 --nnodes 2", (2, "torchrun --nnodes 2")),
    (6, 8, "torchrun --nproc_per_node=4 --nnodes=2", (2, "torchrun --nnodes=2")),
    (7, 8, "torch.distributed.run --nproc-per-node=4 --nnodes=1:2",
     (2, "torch.distributed.run --nnodes=1:2")),  # elastic: its largest
    (8, 16, "deepspeed --num_gpus 8 --num_nodes 2", (2, "deepspeed --num_nodes 2")),
    (9, 2, "deepspeed --num_gpus=2", None),  # one node, but a hostfile may name more
])
def test_a_launch_per_node_is_read_as_processes_and_nodes(index, count, what, nodes):
    """Each launch a job script echoed (`set -x`, captured: launch_lines.out)."""
    found, node_count = said([ECHOES[index]])
    assert found == [("launcher", count, what, 1)]
    assert node_count == (None if nodes is None else (*nodes, 1))


def test_deepspeeds_launcher_lines_say_the_processes_and_nodes():
    """DeepSpeed-Chat's DPO log: the launcher's WORLD INFO DICT of one node of 8 (and
    `dist_world_size=8`), each process's `world_size = 8`, 8 processes' ends; the reward
    model's log: only `cmd = deepspeed main.py` (no count) and 16 processes' ends."""
    dpo = (DATA / "deepspeed_chat_dpo_opt-350M.log").read_text().splitlines()
    found, nodes = said(dpo)
    assert [(kind, count) for kind, count, _what, _line in found] == [
        ("launcher", 8), ("environment", 8), ("processes", 8)]
    assert found[0][2:] == ("DeepSpeed's WORLD INFO DICT (1 node(s))", 5)
    assert nodes == (1, "DeepSpeed's WORLD INFO DICT", 5)
    [run] = parse_file_runs(str(DATA / "deepspeed_chat_dpo_opt-350M.log"))
    assert (run.settings["gpus"], run.settings["nodes"]) == (8, 1)
    assert run.facts["gpus_from"] == "DeepSpeed's WORLD INFO DICT (1 node(s)) (line 5)"
    assert not [w for w in run.warnings if "GPU(s)" in w]
    [run] = parse_file_runs(str(DATA / "deepspeed_chat_reward_opt-350m.log"))
    assert run.settings["gpus"] == 16 and "nodes" not in run.settings
    assert run.facts["gpus_from"] == ("16 processes' ends (DeepSpeed's 'Process N exits') "
                                      "(line 1838)")


def test_deepspeeds_lines_of_several_nodes():
    """The launcher's lines as each node prints them (a hostfile's nodes, pdsh's prefix):
    the DPO log's own lines, their dict given a second host of 8."""
    dpo = (DATA / "deepspeed_chat_dpo_opt-350M.log").read_text().splitlines()[:10]
    two = [line.replace("{'localhost': [0, 1, 2, 3, 4, 5, 6, 7]}",
                        "{'n1': [0, 1, 2, 3, 4, 5, 6, 7], 'n2': [0, 1, 2, 3, 4, 5, 6, 7]}")
               .replace("nnodes=1,", "nnodes=2,").replace("dist_world_size=8",
                                                           "dist_world_size=16")
           for line in dpo]
    found, nodes = said([f"n{k}: {line}" for k in (1, 2) for line in two])
    assert found[0][:3] == ("launcher", 16, "DeepSpeed's WORLD INFO DICT (2 node(s))")
    assert nodes[:2] == (2, "DeepSpeed's WORLD INFO DICT")


def test_torchrun_local_rank_prefixes_of_two_nodes_count_every_worker():
    """torchrun's `[default0]:`, `[default1]:` are local ranks: two nodes print each. The
    Keras lines of env_echo.out (two workers, every line printed by both) under each of
    two prefixes: 4 workers, not the 2 prefixes."""
    lines = (DATA / "env_echo.out").read_text().splitlines()
    keras = lines[lines.index("Epoch 1/2"):]
    text = "".join(f"[default{k}]:{line}\n" for line in keras for k in (0, 1))
    [run] = parse_runs(text, "two-nodes.out")
    assert run.streams == 4
    assert run.settings["gpus"] == 4
    assert run.facts["gpus_from"] == ("4 workers' lines under 2 ranks' line prefixes (each "
                                      "prefix's lines 2 workers')")
    # one process a node (--nproc-per-node 1) on two nodes: one prefix, two workers
    [run] = parse_runs("".join(f"[default0]:{line}\n" for line in keras), "one-each.out")
    assert (run.streams, run.settings["gpus"]) == (2, 2)
