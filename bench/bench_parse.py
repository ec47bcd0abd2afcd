#!/usr/bin/env python3
"""Log parser benchmark (issue 22: a 200 MB job output in under a minute, bounded memory).

  python bench/bench_parse.py [--mb 200] [--shape keras|runs|dllogger|lightning|examples|hftrainer]
      [--work DIR]

Writes a job output of the given size as a long job would leave it: `srun --label`
prefixes from two tasks, each printing its own Keras lines (tf-keras verbose=2 epoch
lines with validation metrics, an `Epoch k/N` header before each), with a TensorFlow
warning between epochs now and then; or (--shape dllogger) one process's NVIDIA DLLogger
lines as DeepLearningExamples print them, an entry every 10 iterations and one per epoch
of 100 iterations; or (--shape runs) one process's 20-epoch Keras output, each run ending
with its evaluate() line, again and again (a job script that trains many times: a run
each); or (--shape lightning) a Lightning 1.x training, each epoch one line of bar states
joined by carriage returns; or (--shape examples) PyTorch's examples' `Train Epoch:` and
`Test set:` lines with a total time at the end; or (--shape hftrainer) a Hugging Face
Trainer's dicts logged every few steps and its summary. Then times, in one process, what
planning and the parse_logs rule call: reader.parse_file_runs on the file, and reports
the time, the lines per second and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import platform
import resource
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from dlscale.logparse.reader import parse_file_runs  # noqa: E402


def fill(path: Path, megabytes: float, block, head: str = "") -> tuple[int, int]:
    """Write `head`, then block(1), block(2)... (each a list of lines) until the file holds
    the given size; (blocks, lines) written."""
    target = int(megabytes * 1e6)
    size, lines, count = len(head), head.count("\n"), 0
    with open(path, "w") as out:
        out.write(head)
        while size < target:
            count += 1
            part = block(count)
            text = "".join(part)
            out.write(text)
            size += len(text)
            lines += len(part)
    return count, lines


def write_log(path: Path, megabytes: float) -> tuple[int, int]:
    """The file, and (epochs per task, lines)."""
    total = 10**7  # Keras' N in Epoch k/N: larger than any epoch count written here

    def epoch(n: int) -> list[str]:
        block = [f"{task}: Epoch {n}/{total}\n" for task in (0, 1)]
        for task in (0, 1):
            ms = 14000 + (n * 7 + task * 13) % 900
            block.append(f"{task}: 25/25 - {ms // 1000}s - loss: {2.0 / (1 + n % 50):.4f}"
                         f" - accuracy: {0.1 + (n % 80) / 100:.4f} - val_loss: 2.1034"
                         f" - val_accuracy: 0.2188 - {ms}ms/epoch - {ms // 25}ms/step\n")
        if n % 100 == 0:
            block.append("0: 2026-11-23 16:00:00.000000: W tensorflow/core/data/root_dataset"
                         ".cc:362] Optimization loop failed: CANCELLED: Operation was "
                         "cancelled\n")
        return block

    return fill(path, megabytes, epoch)


def write_dllogger(path: Path, megabytes: float) -> tuple[int, int]:
    """A DLLogger stdout log of the given size, and (epochs, lines)."""

    def epoch(n: int) -> list[str]:
        epochs, block = n - 1, []  # DeepLearningExamples count epochs from 0
        for it in range(10, 101, 10):
            second = (epochs * 100 + it) / 1000
            block.append(f"DLL 2026-11-27 10:{int(second) // 60 % 60:02d}:"
                         f"{second % 60:09.6f} - ({epochs}, {it}) train.loss : "
                         f"{2.0 / (1 + epochs % 50 + it / 100):.6f}  train.total_ips : "
                         f"{2600 + it:.4f} images/s\n")
        block.append(f"DLL 2026-11-27 10:{int(second) // 60 % 60:02d}:{second % 60:09.6f} - "
                     f"({epochs},) train.loss : 1.5  train.top1 : 45.5 %  val.top1 : 50.1 %"
                     f"  train.total_ips : 2650.0 images/s\n")
        return block

    return fill(path, megabytes, epoch, head=(
        "DLL 2026-11-27 10:00:00.000000 - PARAMETER batch_size : 256  world_size : 8  "
        "amp : True  epochs : 1000000 \n"))


def write_runs(path: Path, megabytes: float) -> tuple[int, int]:
    """One process's Keras output of a 20-epoch training repeated (a job script that trains
    again and again: one run each), and (runs, lines)."""

    def run(n: int) -> list[str]:
        block = []
        for epoch in range(1, 21):
            ms = 14000 + (n * 7 + epoch * 13) % 900
            block.append(f"Epoch {epoch}/20\n")
            block.append(f"25/25 - {ms // 1000}s - loss: {2.0 / epoch:.4f} - accuracy: "
                         f"{0.1 + epoch / 100:.4f} - {ms}ms/epoch - {ms // 25}ms/step\n")
        block.append("5/5 - 1s - loss: 1.2034 - accuracy: 0.4188 - 800ms/epoch - "
                     "160ms/step\n")  # evaluate()
        return block

    return fill(path, megabytes, run)


def write_lightning(path: Path, megabytes: float) -> tuple[int, int]:
    """One Lightning 1.x training's output as tests/data/lightning-slurm/lit1-2.out holds it:
    each epoch one physical line of 129 bar states joined by carriage returns (128 steps),
    two finished states and a callback's print ending it; and (epochs, lines)."""

    def epoch(n: int) -> list[str]:
        e, states = n - 1, []
        for k in range(129):
            states.append(f"\rEpoch {e}: {100 * k // 128:3d}%|{'█' * (10 * k // 128):<10}| "
                          f"{k}/128 [00:00<00:00, {140 + (n + k) % 20}.{k % 100:02d}it/s, "
                          f"loss=2.3{k % 10}, v_num=7, train_loss_step=2.{300 + k % 50}]")
        states.append(f"\rEpoch {e}: 100%|██████████| 128/128 [00:00<00:00, "
                      f"{150 + n % 20}.17it/s, loss=2.31, v_num=7, train_loss_step=2.300, "
                      f"train_loss_epoch=2.310]epoch {e} done, saving\n")
        return ["".join(states)]

    return fill(path, megabytes, epoch)


def write_examples(path: Path, megabytes: float) -> tuple[int, int]:
    """One run in the style of PyTorch's examples (tests/data/pytorch-examples): per epoch
    ten `Train Epoch:` lines and a `Test set:` line, the total time at the end; and
    (epochs, lines)."""
    target = int(megabytes * 1e6)

    def epoch(n: int) -> list[str]:
        block = [f"Train Epoch: {n} [{640 * k}/60000 ({640 * k * 100 // 60000}%)]\tLoss: "
                 f"{2.0 / (1 + k + n % 50):.6f}\n" for k in range(10)]
        return block + ["\n", f"Test set: Average loss: {1.0 / (1 + n % 9):.4f}, Accuracy: "
                        f"{9000 + n % 900}/10000 ({90 + n % 9}%)\n", "\n"]

    epochs, lines = fill(path, megabytes - 0.001, epoch)
    with open(path, "a") as out:
        out.write(f"Total time: {epochs * 12.5:.2f}s\n")
    assert path.stat().st_size <= target + 100
    return epochs, lines + 1


def write_hftrainer(path: Path, megabytes: float) -> tuple[int, int]:
    """One Hugging Face Trainer run logging every few steps (transformers 5 prints the
    numbers as text), 100 dicts an epoch and an evaluation's, the summary at the end; and
    (epochs, lines)."""

    def epoch(n: int) -> list[str]:
        block = [f"{{'loss': '{2.0 / (1 + k % 50 + n % 50):.4g}', 'grad_norm': "
                 f"'0.5{k % 10}57', 'learning_rate': '2.656e-05', "
                 f"'epoch': '{round(n - 1 + (k + 1) / 100, 4)}'}}\n" for k in range(100)]
        return block + [f"{{'eval_loss': '2.307', 'eval_runtime': '0.0223', "
                        f"'eval_samples_per_second': '2869', 'eval_steps_per_second': "
                        f"'358.6', 'epoch': '{n}'}}\n"]

    epochs, lines = fill(path, megabytes - 0.001, epoch)
    with open(path, "a") as out:
        out.write(f"{{'train_runtime': '{epochs * 0.25:.4f}', 'train_samples_per_second': "
                  f"'1182', 'train_steps_per_second': '73.87', 'train_loss': '2.302', "
                  f"'epoch': '{epochs}'}}\n")
    return epochs, lines + 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=200.0, help="log size in MB (default 200)")
    parser.add_argument("--shape", choices=("keras", "dllogger", "runs", "lightning", "examples",
                                            "hftrainer"), default="keras")
    parser.add_argument("--work", type=Path, default=Path("/tmp/dlscale-bench-parse"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    log = args.work / "job.out"
    write = {"keras": write_log, "dllogger": write_dllogger, "runs": write_runs,
             "lightning": write_lightning, "examples": write_examples,
             "hftrainer": write_hftrainer}[args.shape]
    epochs, lines = write(log, args.mb)
    streams = 2 if args.shape == "keras" else 1
    count, epochs = (epochs, 20) if args.shape == "runs" else (1, epochs)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start, cpu = time.perf_counter(), time.process_time()
    runs = parse_file_runs(str(log))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert len(runs) == count and all(
        len(r.epochs) == epochs and r.streams == streams for r in runs), (
        len(runs), len(runs[0].epochs), epochs)
    # what the rule then does: read planning's parse back (dlscale.core.contract.PARSED)
    cache = args.work / "parsed"
    shutil.rmtree(cache, ignore_errors=True)
    parse_file_runs(str(log), None, str(cache))
    start = time.perf_counter()
    again = parse_file_runs(str(log), None, str(cache))
    read_back = time.perf_counter() - start
    assert args.shape != "runs" or all(r.test for r in runs)
    assert len(again) == count and len(again[0].epochs) == epochs
    kept_mb = sum(p.stat().st_size for p in cache.iterdir()) / 1e6
    print(f"machine: {platform.node()} {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}")
    print(f"log ({args.shape}): {log.stat().st_size / 1e6:.1f} MB, {lines} lines, {count} "
          f"run(s) of {streams} task(s) x {epochs} epochs")
    print(f"parse: {seconds:.1f} s, {cpu:.1f} s of CPU ({lines / seconds:,.0f} lines/s); peak RSS "
          f"{peak:.0f} MB (before parsing {before:.0f} MB)")
    print(f"read back from the parse kept at planning: {read_back:.1f} s ({kept_mb:.0f} MB kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
