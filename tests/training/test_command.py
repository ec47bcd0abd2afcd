"""run_command.py: your own training script's point, run alone (outside Snakemake)."""

from __future__ import annotations

import json
import sys

from conftest import ROOT, run_script

EXAMPLE = (f"{sys.executable} {ROOT / 'examples' / 'my_train.py'} --gpus {{gpus}} "
           "--batch-size {batch_per_gpu} --epochs {epochs} --lr {lr} "
           "--data-dir /usr/share/datasets/fashion-mnist --limit 128 --cpu-replicas")


def test_a_script_that_fails_after_its_epochs_keeps_them_its_test_and_telemetry(tmp_path):
    out = tmp_path / "run"
    proc = run_script("run_command.py", "--command", EXAMPLE + "; echo 'upload failed' >&2; "
                      "exit 5", "--model", "my_train", "--gpus", "2", "--batch-per-gpu", "16",
                      "--epochs", "2", "--lr", "0.02", "--out", str(out), "--device", "cpu",
                      "--telemetry-interval", "0.2")
    assert proc.returncode == 1, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "failed" and run["epochs_completed"] == 2
    assert run["failure"].startswith("the command exited with status 5; its last lines: ")
    assert run["failure"].endswith("| upload failed")
    epochs = [json.loads(line) for line in (out / "epochs.jsonl").read_text().splitlines()]
    assert [(e["epoch"], e["steps"], e["images"]) for e in epochs] == [(1, 4, 128),
                                                                        (2, 4, 128)]
    # evaluate()'s line after the epochs is the test result, as for any Keras log
    assert 0 <= run["test_accuracy"] <= 1 and run["test_loss"] > 0
    # telemetry of the command's process tree: the script's own RSS (TensorFlow: far
    # above bash's few MB), summarised over the epoch whose result line came
    assert run["telemetry"] == {"file": "telemetry.csv", "interval_s": 0.2,
                                "gpu_note": "no GPU telemetry: cpu run"}
    rows = (out / "telemetry.csv").read_text().splitlines()
    assert rows[0] == "time_s,cpu_percent,rss_mb" and len(rows) > 2
    summarised = [e for e in epochs if "rss_mb_peak" in e]
    assert summarised and all(e["rss_mb_peak"] > 100 and 0 <= e["cpu_percent"] <= 100
                              for e in summarised)


def test_a_cpu_commands_memory_is_its_largest_processs_peak_where_its_output_gives_none(
        tmp_path):
    """On CPUs a command's output gives no memory (chapter 11's train.py prints `GPU memory
    reserved: 0 GB`): the point's memory is its largest process's peak resident memory,
    as dlscale's own CPU points record theirs (issue 98, item 3)."""
    out = tmp_path / "run"
    command = (f"{sys.executable} -c \"b = bytearray(300 * 2 ** 20); b[::4096] = "
               "b'1' * len(b[::4096]); print('Epoch 1 took: 0.10s loss=0.5000 acc=10.0%'); "
               "print('Epoch 2 took: 0.10s loss=0.4000 acc=11.0%'); "
               "print('GPU memory reserved:    0 GB')\"")
    proc = run_script("run_command.py", "--command", command, "--model", "m", "--epochs",
                      "2", "--lr", "0.1", "--out", str(out), "--device", "cpu",
                      "--telemetry-interval", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "completed", run["failure"]
    assert 300 / 1024 < run["memory_gib"] < 1.0  # the 300 MiB it touched, and Python
    assert "ru_maxrss" in run["memory_from"] and "memory_note" not in run
