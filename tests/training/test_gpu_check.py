"""bench/gpu_check.py's --cpu rehearsal (issue 60): the GPU check's code end to end on
this machine's CPU, with TensorFlow made unimportable, as on the lent GPU machines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import NO_TENSORFLOW

ROOT = Path(__file__).resolve().parents[2]

WITHOUT_TENSORFLOW = NO_TENSORFLOW + """
import runpy
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_gpu_check_rehearses_on_cpu_without_tensorflow(tmp_path):
    """SimpleCNN only: ResNet50V2's two XLA compilations on CPU cost CI 2 minutes (the GPU
    check trains both; `bench/gpu_check.py --cpu` rehearses both here in 1 min 54 s)."""
    out = tmp_path / "check.json"
    done = subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW,
                           str(ROOT / "bench" / "gpu_check.py"), "--cpu", "--out", str(out),
                           "--models", "SimpleCNN", "--keep-trace"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert not report["tensorflow_imported"] and report["system"]["rehearsal"]
    points = report["points"]
    assert [(p["model"], p["precision"], p["batch"], p["image_size"]) for p in points] == [
        ("SimpleCNN", p, 8, 32) for p in ("float32", "mixed_bfloat16")]
    for point in points:
        assert point["images_per_s"] > 0 and len(point["epoch_s"]) == 2
        assert "gpu_util_percent" not in point  # no GPU: no GPU figures, never zeros
        # the window's split, and what each line of the trace held, for the GPU's layout
        window = point["breakdown"]
        assert window["summary"]["steps"] == 1 and window["summary"]["compute_s"] > 0
        assert any(kind == "compute" for line in window["lines"].values()
                   for _, _, kind in line)
        # xprof's own breakdown of the same trace, paired step for step (make setup has it)
        assert window["xprof"]["steps"] == 1 and window["xprof_notes"] == []
    kept = tmp_path / "trace-SimpleCNN-mixed_bfloat16.xplane.pb"  # the last point's
    assert kept.stat().st_size > 0 and not list(tmp_path.glob("trace-*-*-*"))
    # dlscale's own point through train.py: shards read by dlscale's reader, its window
    point = report["dlscale_point"]
    assert (point["status"], point["exit_status"], point["train_input"]) == (
        "completed", 0, "files")
    assert point["versions"]["jax"] and point["images_per_s"] > 0
    assert len(point["epoch_s"]) == 3 and point["window"]["steps"] == 1
    assert list((tmp_path / "point" / "trace").glob("plugins/profile/*/*.xplane.pb"))
    assert set(report["bf16_speedup"]) == {"SimpleCNN"}
    search = report["batch_search"]
    assert (search["largest_batch"], search["stopped_by"]) == (16, "max_batch")
    assert [t["batch"] for t in search["tries"]] == [16] and search["tries"][0]["fits"]
    lines = "\n".join(report["markdown"])
    assert done.stdout.rstrip().endswith(lines)
    assert "| SimpleCNN | mixed_bfloat16 | 8 |" in lines
    assert search["model"] == "SimpleCNN"
    assert (tmp_path / "check.telemetry.csv").read_text().startswith("time_s,cpu_percent")
