"""What a point ran on, and how busy it kept the machine while it trained.

- describe_system(): the system description of a run (in the spirit of MLPerf's
  system_desc): host, CPU model, cores, memory, GPUs through NVML (model, count, memory,
  driver, CUDA driver), TensorFlow's CUDA/cuDNN build, Keras, Horovod, container image,
  environment modules, SLURM partition and node list.
- Sampler: a thread in the chief process that samples every `interval` seconds into
  telemetry.csv: time, host CPU % and the training process's RSS (psutil; for your own
  command, the RSS of its whole process tree) always; per GPU
  utilisation %, memory used, power and the energy counter (NVML) when there are GPUs.
  `summary(start, end)` condenses the samples of an epoch for epochs.jsonl. Without a
  GPU there are no GPU columns, and `gpu_note` says why; nothing is filled with zeros.

NVML is reached through nvidia-ml-py (`import pynvml`) only where it is installed and a
driver answers; the GPU code paths are tested where a GPU exists (tests/gpu).
"""

from __future__ import annotations

import csv
import os
import platform
import socket
import threading
import time
from pathlib import Path

from dlscale.core.contract import TELEMETRY  # noqa: F401 (the file name, for readers)

HOST_COLUMNS = ["time_s", "cpu_percent", "rss_mb"]
GPU_FIELDS = ["util_percent", "mem_used_mb", "power_w", "energy_j"]


def nvml():
    """(pynvml module, None) when NVML answers, else (None, why not)."""
    try:
        import pynvml
    except ImportError:
        return None, "no GPU telemetry: nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded ...
        return None, f"no GPU telemetry: NVML did not start ({exc})"
    return pynvml, None


def visible_gpu_handles(pynvml) -> list:
    """NVML handles of the GPUs this process may use (CUDA_VISIBLE_DEVICES, when it
    lists indices), else of all GPUs."""
    count = pynvml.nvmlDeviceGetCount()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    indices = list(range(count))
    if visible is not None and all(v.strip().isdigit() for v in visible.split(",") if v):
        indices = [int(v) for v in visible.split(",") if v and int(v) < count]
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]


def cpuinfo_value(keys: tuple[str, ...], cpuinfo: str | None = None) -> str | None:
    """The value of the first line of /proc/cpuinfo (or of `cpuinfo`) whose key is one of
    `keys`; None where there is none or the file cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            return value.strip()
    return None


def cpu_model() -> str | None:
    model = cpuinfo_value(("model name",))
    return model if model is not None else platform.processor() or None


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags: the first `flags` (x86) or `Features` (Arm) line of
    /proc/cpuinfo (or of `cpuinfo`); empty where there is none."""
    return frozenset((cpuinfo_value(("flags", "Features"), cpuinfo) or "").split())


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def describe_gpus() -> dict:
    pynvml, why = nvml()
    if pynvml is None:
        return {"gpu_count": 0, "gpu_model": None, "gpu_note": why}
    handles = visible_gpu_handles(pynvml)
    names = [_text(pynvml.nvmlDeviceGetName(h)) for h in handles]
    memory = [pynvml.nvmlDeviceGetMemoryInfo(h).total / 2 ** 30 for h in handles]
    cuda = pynvml.nvmlSystemGetCudaDriverVersion()
    return {"gpu_count": len(handles), "gpu_model": names[0] if len(set(names)) == 1 else
            ", ".join(names) or None, "gpu_memory_gb": round(memory[0], 1) if memory else None,
            "gpu_driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}", "gpu_note": None}


def describe_system(versions: dict | None = None) -> dict:
    """The system description of this process's node (see the module's docstring)."""
    import psutil

    env = os.environ
    modules = [m for m in env.get("LOADEDMODULES", "").split(":") if m]
    container = (env.get("APPTAINER_CONTAINER") or env.get("SINGULARITY_CONTAINER")
                 or env.get("DLSCALE_CONTAINER"))
    return {"host": socket.gethostname(), "node": env.get("SLURMD_NODENAME"),
            "os": f"{platform.system()} {platform.release()}", "cpu_model": cpu_model(),
            "cpu_cores": psutil.cpu_count(logical=False), "cpu_threads": psutil.cpu_count(),
            "memory_gb": round(psutil.virtual_memory().total / 2 ** 30, 1),
            **describe_gpus(), **(versions or {}),
            "container": container, "modules": modules,
            "slurm_partition": env.get("SLURM_JOB_PARTITION"),
            "slurm_nodelist": env.get("SLURM_JOB_NODELIST")}


class Sampler:
    """Samples host and GPU use every `interval` seconds into `path` (telemetry.csv)
    from a daemon thread; start() and stop() are called by the training driver."""

    def __init__(self, path: Path, interval: float = 1.0, gpus: bool = True,
                 pid: int | None = None):
        """`pid`: sample the RSS of that process and its descendants (a command's tree)
        instead of this process's."""
        import psutil

        self.path, self.interval = Path(path), interval
        self.process, self.tree = psutil.Process(pid), pid is not None
        self.pynvml, self.gpu_note = nvml() if gpus else (None, "no GPU telemetry: cpu run")
        self.handles = visible_gpu_handles(self.pynvml) if self.pynvml else []
        if self.pynvml and not self.handles:
            self.pynvml, self.gpu_note = None, "no GPU telemetry: NVML sees no GPU"
        self.columns = HOST_COLUMNS + [f"gpu{i}_{f}" for i in range(len(self.handles))
                                       for f in GPU_FIELDS]
        self.rows: list[dict] = []
        self.error: str | None = None  # why the thread stopped sampling, if it did
        self._written = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dlscale-telemetry",
                                        daemon=True)
        self.t0 = time.perf_counter()

    def start(self) -> Sampler:
        import psutil

        psutil.cpu_percent(None)  # the first reading is 0: prime it
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "w", newline="") as handle:
            csv.writer(handle).writerow(self.columns)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self.interval + 5)
        if self.error is None:
            try:
                self._write()
            except OSError as exc:
                self.error = f"{type(exc).__name__}: {exc}"

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def sample(self) -> dict:
        import psutil

        row = {"time_s": round(self.now(), 3), "cpu_percent": psutil.cpu_percent(None),
               "rss_mb": round(self.rss() / 2 ** 20, 1)}
        for i, handle in enumerate(self.handles):
            p = self.pynvml
            row[f"gpu{i}_util_percent"] = p.nvmlDeviceGetUtilizationRates(handle).gpu
            row[f"gpu{i}_mem_used_mb"] = round(p.nvmlDeviceGetMemoryInfo(handle).used / 2 ** 20, 1)
            row[f"gpu{i}_power_w"] = p.nvmlDeviceGetPowerUsage(handle) / 1000
            row[f"gpu{i}_energy_j"] = p.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000
        return row

    def rss(self) -> int:
        """Bytes resident: the process's, or with a tree the sum over it and its
        descendants (each that ends while it is read counts 0)."""
        import psutil

        if not self.tree:
            return self.process.memory_info().rss
        total = 0
        try:
            processes = [self.process, *self.process.children(recursive=True)]
        except psutil.Error:  # the command has ended
            return 0
        for process in processes:
            try:
                total += process.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _take(self) -> None:
        with self._lock:
            self.rows.append(self.sample())

    def _write(self) -> None:
        with self._lock:
            new, self._written = self.rows[self._written:], len(self.rows)
        if new:
            with open(self.path, "a", newline="") as handle:
                csv.DictWriter(handle, self.columns).writerows(new)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self._take()
                self._write()
        except Exception as exc:  # the thread's death is reported by the driver, not lost
            self.error = f"{type(exc).__name__}: {exc}"

    def summary(self, start: float, end: float, images: int) -> dict:
        """The epoch's summary (see summarize) from this sampler's samples; asked at the
        epoch's end, it first takes the sample that covers the end if none has yet."""
        if not self.rows or self.rows[-1]["time_s"] < end:
            self._take()
        return summarize(list(self.rows), len(self.handles), start, end, images,
                         self.interval)


def summarize(rows: list[dict], gpus: int, start: float, end: float, images: int,
              interval: float) -> dict:
    """Means and peaks of the samples whose period overlaps the window from `start` to
    `end` (sampler seconds). A sample at t covers (t - interval, t]: its CPU % is psutil's
    mean since the previous sample, so the samples from the first after `start` to the
    first at or after `end` (t < end + interval) describe the window, even one shorter
    than the interval. Gives mean host CPU %, peak RSS, and with GPUs mean GPU % (over
    GPUs and samples), peak GPU memory, energy in J (the counters' rise from the first to
    the last of those samples, summed over GPUs: it may include up to one interval more
    than the window) and J per image. Empty without such a sample."""
    rows = [r for r in rows if start < r["time_s"] < end + interval]
    if not rows:
        return {}
    out = {"cpu_percent": round(sum(r["cpu_percent"] for r in rows) / len(rows), 1),
           "rss_mb_peak": max(r["rss_mb"] for r in rows)}
    if gpus:
        ids = range(gpus)
        out["gpu_util_percent"] = round(sum(r[f"gpu{i}_util_percent"] for r in rows
                                            for i in ids) / (len(rows) * gpus), 1)
        out["gpu_mem_mb_peak"] = max(r[f"gpu{i}_mem_used_mb"] for r in rows for i in ids)
        if len(rows) > 1:
            energy = sum(rows[-1][f"gpu{i}_energy_j"] - rows[0][f"gpu{i}_energy_j"]
                         for i in ids)
            out["energy_j"] = round(energy, 1)
            out["j_per_image"] = round(energy / images, 4) if images else None
    return out
