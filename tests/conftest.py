"""Shared test helpers: import path for scripts/, generated datasets, running snakemake."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
sys.path.insert(0, str(SCRIPTS))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import make_synthetic_cifar  # noqa: E402

from dlscale.data.datasets import DEBIAN_FASHION_MNIST  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
HOROVOD_PYTHON = ROOT / ".venv-horovod" / "bin" / "python"  # built by `make horovod`
HOROVOD_READY = (ROOT / ".venv-horovod" / ".installed").exists()
TORCH_PYTHON = ROOT / ".venv-torch" / "bin" / "python"  # built by `make setup-torch`
TORCH_READY = (ROOT / ".venv-torch" / ".installed").exists()
# a test of backend torch needs .venv-torch; in CI (make test builds it) a missing one fails
needs_torch = pytest.mark.skipif(not TORCH_READY and not IN_CI,
                                 reason="the PyTorch environment is not built (make setup-torch)")
FASHION = DEBIAN_FASHION_MNIST
# real data where the machine has it; in CI (make sysdeps installs it) a missing copy fails
needs_fashion = pytest.mark.skipif(
    not FASHION.is_dir() and not IN_CI,
    reason="Debian's dataset-fashion-mnist is missing (make sysdeps)")


# What a test of training, records or ownership asks Snakemake for, where it checks no
# plot, report page or history: the study's tables (runs.csv, scaling.csv, failed.csv and
# epochs.csv, one rule), with every point and record they are made from. `rule all` adds
# the plots, the why tables, the report's first page and the history: about 7 s of CPU a
# study, which the tests of those check.
TABLES = "results/tables/scaling.csv"


# The files that take longest, longest first: `make test` hands whole files to three
# workers in collection order (`--dist loadfile --no-loadscope-reorder`). xdist's own
# order (files with most tests first) started the one-test demo last: once the set-up and
# the rest had shrunk, it ran its last 2 to 3 minutes with the cores half idle
# (docs/benchmarks.md, "Where CI's time goes"). The order changes no
# result, only which worker takes a file, and when; the unit files, many and short, last.
LONGEST_FIRST = (
    "cluster/test_slurm.py", "cluster/test_slurm_endings.py", "workflow/test_demo.py",
    "training/test_train.py",
    "workflow/test_analysis_workflow.py", "training/test_keras3.py",
    "workflow/test_own_model.py", "workflow/test_contract_workflow.py",
    "workflow/test_resize.py", "workflow/test_history_workflow.py",
    "workflow/test_train_workflow.py", "workflow/test_failures_workflow.py",
    "workflow/test_why_workflow.py", "workflow/test_keras3_workflow.py",
    "training/test_features.py", "workflow/test_command_endings.py")


def pytest_collection_modifyitems(config, items):
    """Collect the longest files first (LONGEST_FIRST), the others after in their order."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    gone = [name for name in rank if not (ROOT / "tests" / name).is_file()]
    if gone:  # a renamed file would silently lose its place
        raise pytest.UsageError(f"LONGEST_FIRST names no test file: {', '.join(gone)}")

    tests = (ROOT / "tests").resolve()

    def key(item):
        path = Path(str(item.fspath)).resolve()
        name = path.relative_to(tests).as_posix() if path.is_relative_to(tests) else ""
        return rank.get(name, len(rank))

    items.sort(key=key)  # stable: a file's tests keep their order


@pytest.fixture(autouse=True)
def process_as_found():
    """Each test leaves the pytest process as it found it: its environment, which every
    Snakemake and training a later test starts inherits (a DLSCALE_FORCED left set made
    the next local study train a kept point again), and dlscale's own import finders (a
    test that chose Keras 2 in this process kept JAX out of the tests after it:
    keraschoice). A finder a package installed when a test first imported it stays: six's
    serves six.moves for as long as six is imported, and with it removed, TensorFlow's
    import failed in every later test of that worker ("No module named 'six.moves'")."""
    environment, finders = dict(os.environ), list(sys.meta_path)
    yield
    if dict(os.environ) != environment:
        os.environ.clear()
        os.environ.update(environment)
    sys.meta_path[:] = finders + [finder for finder in sys.meta_path if finder not in finders
                                  and not type(finder).__module__.startswith("dlscale.")]


@pytest.fixture(scope="session")
def cifar_python(tmp_path_factory) -> Path:
    """A small archive in the official python layout (pickled batches)."""
    return make_synthetic_cifar.write_archive(
        tmp_path_factory.mktemp("cifar") / "cifar-10-python.tar.gz", "python", 100, 40, seed=1)


@pytest.fixture(scope="session")
def cifar_binary(tmp_path_factory) -> Path:
    """The same images in the official binary layout."""
    return make_synthetic_cifar.write_archive(
        tmp_path_factory.mktemp("cifarbin") / "cifar-10-binary.tar.gz", "binary", 100, 40, seed=1)


def run_snakemake(workdir: Path, *args: str, check: bool = True, timeout: float = 900,
                  snakefile: Path = ROOT / "Snakefile",
                  env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the project's workflow from the command line (the stable interface) in workdir,
    with `env` added to the environment."""
    proc = subprocess.run(snakemake_command(workdir, *args, snakefile=snakefile),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=snakemake_env(env))  # one stream: it logs to both
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-8000:]}")
    return proc


def snakemake_command(workdir: Path, *args: str, snakefile: Path = ROOT / "Snakefile"
                      ) -> list[str]:
    return [sys.executable, "-m", "snakemake", "-s", str(snakefile), "--directory",
            str(workdir), *args]


def snakemake_env(env: dict | None = None) -> dict:
    """This environment, with the test's python first on PATH (the rules run `python`)."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            **(env or {})}


# Runs the command in argv[1:] with SIGINT at its default, as a terminal starts it: a
# shell that starts a command in the background (a CI runner may start the tests so)
# ignores SIGINT for it and all it starts, and a Python started with SIGINT ignored never
# raises KeyboardInterrupt, so Snakemake would not see a test's Ctrl-C
SIGINT_AT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                     "os.execv(sys.argv[1], sys.argv[1:])")


def start_snakemake(workdir: Path, *args: str, output: bool = True,
                    env: dict | None = None, new_session: bool = False) -> subprocess.Popen:
    """The workflow started in the background (a test acts on it while it runs, Ctrl-C's
    SIGINT included); its output as text on .stdout, or discarded. `new_session`: in a
    process group of its own, as a terminal's foreground job (the group Ctrl-C reaches)."""
    sink = subprocess.PIPE if output else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-c", SIGINT_AT_DEFAULT,
                             *snakemake_command(workdir, *args)], stdout=sink,
                            stderr=subprocess.STDOUT, text=True, env=snakemake_env(env),
                            start_new_session=new_session)


def training_processes(workdir: Path, point: str) -> list:
    """The train.py processes (psutil) training `point` of the study in `workdir`: the
    first script their command names is train.py (launch.py's names train.py too)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        words = proc.info["cmdline"] or []
        script = next((w for w in words if w.endswith(".py")), "")
        if (proc.info["cwd"] == str(workdir) and script.endswith("train.py")
                and any(w.rstrip("/").endswith(f"runs/{point}") for w in words)):
            found.append(proc)
    return found


def dlscale_status(workdir: Path) -> str:
    """What `dlscale status` (the console command pip installed) prints for a study."""
    proc = subprocess.run([str(Path(sys.executable).with_name("dlscale")), "status",
                           str(workdir)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def comparison_config(path: Path, archive: Path, compare: str, gpus: str = "[1, 2]") -> Path:
    """A 2-epoch SimpleCNN sweep on 1 and 2 CPU replicas (or `gpus`) that compares
    `compare` (e.g. "strategy: [mirrored, horovod]") in one chart."""
    return write_config(path, f"""
data: {{source: {archive}, image_size: 32, shards: 2}}
sweep: {{models: [SimpleCNN], gpus: {gpus}, {compare}}}
training: {{epochs: 2, batch_per_gpu: 8, device: cpu}}
resources: {{cpus_per_gpu: 1, mem_mb_per_gpu: 1000, runtime_min: 10}}
analysis: {{accuracy_tolerance: 1.0}}
""")


@pytest.fixture(scope="session")
def small_data(tmp_path_factory) -> Path:
    """400 training and 100 test images at 32 px in 4 shards per split."""
    from dlscale.data import preparation

    root = tmp_path_factory.mktemp("small")
    archive = make_synthetic_cifar.write_archive(root / "cifar.tar.gz", "python", 400, 100, 3)
    preparation.prepare("cifar10", archive, root / "data", 32, 4)
    return root / "data"


# Python source that makes TensorFlow unimportable in the process that runs it first, as
# on the lent GPU machines and in a JAX user's environment (issue 60)
NO_TENSORFLOW = """
import importlib.abc, sys
class NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "tensorflow":
            raise ModuleNotFoundError("tensorflow is not installed here", name=name)
sys.meta_path.insert(0, NoTensorFlow())
"""


def run_script(name: str, *args: str, env: dict | None = None, timeout: float = 600,
               cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run scripts/<name> as a user would, with this interpreter."""
    return subprocess.run([sys.executable, str(SCRIPTS / name), *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)


MODULES_INIT = Path("/usr/share/modules/init/bash")  # Debian's environment-modules


def site_modules(root: Path) -> tuple[str, dict]:
    """A site's modulefile as a test writes it: it sets DLSCALE_SITE_STACK and puts this
    venv first on PATH. Returns (module name, environment for snakemake): MODULEPATH,
    and BASH_ENV so that the rules' non-interactive bash has the `module` command."""
    folder = root / "modulefiles" / "dlscale-stack"
    folder.mkdir(parents=True)
    (folder / "1.0").write_text("#%Module1.0\nsetenv DLSCALE_SITE_STACK test-stack\n"
                                f"prepend-path PATH {Path(sys.executable).parent}\n")
    return "dlscale-stack/1.0", {"MODULEPATH": str(root / "modulefiles"),
                                 "BASH_ENV": str(MODULES_INIT)}


def read_telemetry(path: Path) -> tuple[list[dict], int]:
    """(rows as numbers, GPU count) of a telemetry.csv."""
    import csv

    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        gpus = len([c for c in reader.fieldnames or [] if c.endswith("_util_percent")])
        rows = [{k: float(v) for k, v in row.items() if v not in ("", None)} for row in reader]
    return rows, gpus
