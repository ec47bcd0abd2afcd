"""The GPU count of a run whose lines state none, from what its log says of the launch
(dlscale.logparse.formats.launch), on real outputs: MLPerf results (tests/data/mlperf), Horovod's
benchmark page (tests/data/benchmark-outputs)."""

from __future__ import annotations

import math

import pytest
from conftest import ROOT

from dlscale.logparse.formats.launch import DEVICE_LIST, LaunchReader, might_say
from dlscale.logparse.reader import parse_file_runs, parse_runs
from dlscale.logparse.runs import ParsedLog
from dlscale.plan.external import resolve

MLPERF = ROOT / "tests" / "data" / "mlperf"
BENCH = ROOT / "tests" / "data" / "benchmark-outputs"


def launch_of(path) -> tuple:
    reader = LaunchReader()
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if might_say(line):
            reader.feed(number, line)
    return reader.said(0, math.inf)


@pytest.mark.parametrize("name, said", [
    # a set-up step of one task (`srun -N 1 -n 1 ... mpirun -np 1`) before the job's launch
    ("Dell_2xDSS8440x8A100-PCIE-40GB.txt", [("launcher", 16, "mpirun -np 16", 39),
                                             ("ranks", 16, "16 ranks' Node[k] start lines",
                                              339)]),
    ("Dell_3xDSS8440x8A100-PCIE-40GB.txt", [("launcher", 24, "mpirun -np 24", 57),
                                             ("ranks", 24, "24 ranks' Node[k] start lines",
                                              413)]),
    ("NVIDIA_dgxa100_ngc21.05_mxnet.txt", [("launcher", 8, "srun -n 8", 23),
                                            ("ranks", 8, "8 ranks' Node[k] start lines", 266)]),
])
def test_an_mlperf_jobs_launch_agrees_with_what_its_result_states(name, said):
    found, _nodes = launch_of(MLPERF / name)
    assert found == said
    [run] = parse_file_runs(str(MLPERF / name))
    assert run.settings["gpus"] == said[0][1] and run.facts["gpus_from"] == "log"
    assert not [w for w in run.warnings if "GPU(s)" in w]


def test_a_run_that_states_no_gpu_count_takes_its_launchers():
    """Horovod's benchmark page: `total images/sec: 1656.82` after `horovodrun -np 16`; the
    page's later examples launch 16 and 4: the largest launch is the job's."""
    [run] = parse_file_runs(str(BENCH / "horovod_docs_benchmarks.rst"))
    assert run.settings["gpus"] == 16
    assert run.facts["gpus_from"] == "horovodrun -np 16 (line 32)"
    entry = {"log": str(BENCH / "horovod_docs_benchmarks.rst"), "model": "ResNet101",
             "global_batch": 1024}
    [values], _ = resolve(entry, "external_runs[0]")
    assert (values["gpus"], values["gpus_from"]) == (16, "horovodrun -np 16 (line 32)")
    [values], _ = resolve({**entry, "gpus": 16}, "external_runs[0]")
    assert values["gpus_from"] == "config"


def test_without_the_batch_lines_an_mlperf_result_takes_its_gpus_from_the_launch():
    """NVIDIA's MXNet result names no GPU count in its platform (`1xNVIDIA DGX A100`); its
    batch does (3264 in all, 408 per device). Without its d_batch_size line (left out here)
    the job's `srun --ntasks=8` line says 8, and the 8 ranks' start lines agree."""
    lines = [line for line in (MLPERF / "NVIDIA_dgxa100_ngc21.05_mxnet.txt").read_text(
        errors="replace").splitlines(keepends=True) if '"key": "d_batch_size"' not in line]
    [run] = parse_runs("".join(lines), "mxnet.txt")
    assert run.settings["gpus"] == 8 and run.facts["gpus_from"] == "srun -n 8 (line 23)"
    assert not [w for w in run.warnings if "GPU(s)" in w]


def test_a_launch_that_disagrees_with_the_run_is_a_warning_and_the_run_is_kept():
    """The Dell 2-node result with its launch edited here to 12 processes: the result's
    own 16 GPUs are kept, and the warning names the launch and its line."""
    text = (MLPERF / "Dell_2xDSS8440x8A100-PCIE-40GB.txt").read_text(errors="replace")
    [run] = parse_runs(text.replace("-np 16", "-np 12"), "edited.txt")
    assert run.settings["gpus"] == 16
    [warning] = [w for w in run.warnings if "GPU(s)" in w]
    assert warning == ("edited.txt (run from line 13): its own lines say 16 GPU(s); "
                       "mpirun -np 12 (line 39) says 12: 16 kept")


def decided(lines: list[str], **run) -> ParsedLog:
    """A run read with `run`'s settings and facts, the launch of `lines` applied."""
    reader = LaunchReader()
    for number, line in enumerate(lines, 1):
        if might_say(line):
            reader.feed(number, line)
    parsed = ParsedLog("job.out", line=len(lines) + 1, **run)
    return reader.apply([parsed], "job.out")[0]


def test_one_workers_device_list_is_multiplied_by_the_workers_the_launch_started():
    """Where only TensorFlow's device list of one worker said a count (the keras reader
    marks it so), the launch's processes multiply it; without a launch it stays."""
    srun = "+ srun -n 4 -N 2 python train.py"
    run = decided([srun], settings={"gpus": 2},
                  facts={"gpus_from": DEVICE_LIST})
    assert (run.settings["gpus"], run.settings["nodes"]) == (8, 2)
    assert run.facts == {"gpus_from": "srun -n 4 (line 1) x 2 devices a worker",
                         "nodes_from": "srun -N 2 (line 1)"}
    assert not run.warnings
    alone = decided(["Epoch 1/2"], settings={"gpus": 2},
                    facts={"gpus_from": DEVICE_LIST})
    assert alone.settings["gpus"] == 2 and alone.facts["gpus_from"] == DEVICE_LIST


def test_a_launch_of_one_process_with_several_gpus_is_no_conflict():
    """MirroredStrategy: one process holds the node's GPUs, `srun -n 1` and
    `SLURM_NTASKS=1` say one task; a launch of 8 beside a log's 4 is a warning."""
    run = decided(["+ srun -n 1 python train.py", "SLURM_NTASKS=1"], settings={"gpus": 4})
    assert run.settings["gpus"] == 4 and not run.warnings
    run = decided(["+ mpirun -np 8 python train.py"], settings={"gpus": 4})
    assert run.warnings == ["job.out (run from line 2): its own lines say 4 GPU(s); "
                            "mpirun -np 8 (line 1) says 8: 4 kept"]


def test_a_torchrun_jobs_rank_prefixes_count_its_processes_where_nothing_else_does():
    """torchrun's `[rank0]:` and `[rank1]:` prefixes (tests/data/pytorch, captured here):
    with Lightning's `Starting with 2 processes` line (left out here in the second read)
    the count is the log's; without it, the two prefixes say 2."""
    path = ROOT / "tests" / "data" / "pytorch" / "torchrun_rank_prefix.out"
    [run] = parse_file_runs(str(path))
    assert (run.settings["gpus"], run.facts["gpus_from"]) == (2, "log")
    text = "".join(line for line in path.read_text().splitlines(keepends=True)
                   if "Starting with" not in line)
    [run] = parse_runs(text, "prefixes.out")
    assert (run.settings["gpus"], run.facts["gpus_from"]) == (2, "2 ranks' line prefixes")
    assert not run.warnings


def test_a_job_that_echoes_slurms_counts_reads_its_gpus_and_nodes_from_them():
    """tests/data/launch/env_echo.out, captured on the test cluster: a MultiWorkerMirrored
    job whose lines state no count but its script's echo of SLURM_NTASKS, SLURM_NNODES and
    WORLD_SIZE (line 1), which agree."""
    [run] = parse_file_runs(str(ROOT / "tests" / "data" / "launch" / "env_echo.out"))
    assert (run.settings["gpus"], run.settings["nodes"]) == (2, 2)
    assert run.facts["gpus_from"] == "SLURM_NTASKS=2 (line 1)"
    assert run.facts["nodes_from"] == "SLURM_NNODES=2 (line 1)"
    assert [(r["epoch"], r["seconds"], r["loss"]) for r in run.rows()] == [
        (1, 0.734, 2.4706), (2, 0.156, 2.4098)]
    assert not run.warnings
