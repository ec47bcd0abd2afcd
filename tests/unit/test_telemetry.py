"""Telemetry summaries from a recorded telemetry.csv (tests/data/telemetry), without TensorFlow."""

from __future__ import annotations

from conftest import ROOT, read_telemetry

from dlscale.train.telemetry import HOST_COLUMNS, summarize

RECORDED = ROOT / "tests" / "data" / "telemetry" / "telemetry.csv"


def test_a_recorded_cpu_file_has_host_columns_only():
    rows, gpus = read_telemetry(RECORDED)
    assert gpus == 0 and len(rows) == 8
    assert list(rows[0]) == HOST_COLUMNS


def test_the_summary_of_a_window_is_its_mean_cpu_and_peak_memory():
    rows, gpus = read_telemetry(RECORDED)
    # the file was sampled every 0.5 s; 0 .. 1.2 s is covered by the samples at 0.501 s
    # (50.0 %, 591.4 MB), 1.007 s (51.0 %, 600.3 MB) and 1.508 s (64.0 %, 648.4 MB)
    assert summarize(rows, gpus, 0.0, 1.2, 400, 0.5) == {"cpu_percent": 55.0,
                                                        "rss_mb_peak": 648.4}
    # an epoch shorter than the interval, 2.1 .. 2.3 s: the sample at 2.51 s covers it
    assert summarize(rows, gpus, 2.1, 2.3, 400, 0.5) == {"cpu_percent": 82.8,
                                                        "rss_mb_peak": 652.1}
    assert summarize(rows, gpus, 10, 20, 400, 0.5) == {}  # no sample: no figures, not zeros


def test_gpu_columns_give_utilisation_memory_and_energy_per_image():
    rows = [{"time_s": t, "cpu_percent": 10.0, "rss_mb": 100.0, "gpu0_util_percent": u0,
             "gpu0_mem_used_mb": m, "gpu0_power_w": 200.0, "gpu0_energy_j": e0,
             "gpu1_util_percent": u1, "gpu1_mem_used_mb": m, "gpu1_power_w": 200.0,
             "gpu1_energy_j": e1}
            for t, u0, u1, m, e0, e1 in [(1, 90, 80, 1000, 5000, 7000),
                                         (2, 100, 70, 1500, 5200, 7150)]]
    out = summarize(rows, 2, 0, 2.5, images=700, interval=1.0)
    assert out["gpu_util_percent"] == 85.0 and out["gpu_mem_mb_peak"] == 1500
    assert out["energy_j"] == 350.0 and out["j_per_image"] == 0.5


def test_a_sampler_whose_file_vanishes_says_why_it_stopped(tmp_path):
    import shutil
    import time

    from dlscale.train.telemetry import Sampler

    folder = tmp_path / "run"
    sampler = Sampler(folder / "telemetry.csv", interval=0.05, gpus=False).start()
    shutil.rmtree(folder)  # the run folder removed under a running job
    deadline = time.time() + 30
    while sampler.error is None and time.time() < deadline:
        time.sleep(0.05)
    sampler.stop()
    assert sampler.error is not None and "FileNotFoundError" in sampler.error
