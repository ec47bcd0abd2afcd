"""What each TensorFlow process of dlscale pays at its start and end (train.py,
prepare_data.py, find_batch_size.py): JAX is not imported where no Keras trains on it,
nor what Keras imports only for other inputs and drawing, train.py starts with glibc's
malloc tuned, and the process ends without Python's teardown, its status, atexit
handlers and output kept. Real interpreters, real TensorFlow and JAX."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import SCRIPTS

from dlscale.train.allocator import tuned


def python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(SCRIPTS), "PATH": "/usr/bin",
                                            **(env or {})})


def test_a_training_process_starts_again_in_place_with_mallocs_tunables():
    """glibc reads GLIBC_TUNABLES as a process starts: restart_tuned starts it again with
    os.execv (the same PID, the same flags), once; a value you set is kept."""
    start = """
import json, os, sys
print(json.dumps([os.getpid(), os.environ.get("GLIBC_TUNABLES"), sys.argv[1:]]), flush=True)
from dlscale.train.allocator import restart_tuned
restart_tuned()
print(json.dumps([os.getpid(), os.environ.get("GLIBC_TUNABLES"), sys.argv[1:]]))
"""
    ours = "glibc.malloc.top_pad=67108864:glibc.malloc.mmap_threshold=33554432"
    proc = python(start, "a flag", "--x")
    first, second, after = (json.loads(line) for line in proc.stdout.splitlines())
    assert proc.returncode == 0 and first == [first[0], None, ["a flag", "--x"]]
    assert second == after == [first[0], ours, ["a flag", "--x"]]  # started again once
    mine = "glibc.malloc.top_pad=1048576:glibc.rtld.optional_static_tls=4096"
    proc = python(start, env={"GLIBC_TUNABLES": mine})
    assert json.loads(proc.stdout.splitlines()[-1])[1] == (
        mine + ":glibc.malloc.mmap_threshold=33554432")
    assert tuned({"GLIBC_TUNABLES": ours}) is None  # nothing to add: no second start


def test_a_training_starts_its_framework_without_what_it_never_uses():
    """TensorFlow's import imports JAX where it is installed (tf.lite): not in a process
    whose Keras is 2, or 3 on TensorFlow; there `import jax` says why it fails. Keras and
    TensorFlow also import pandas, SciPy and Matplotlib, only to take DataFrames and
    sparse matrices or to draw: not while a training imports them (SciPy stays on JAX,
    which needs it); afterwards they import as usual, for your model's module. What the
    import made is frozen out of the garbage collector's walks, which go on afterwards."""
    check = """
import gc, sys
from dlscale.train import keraschoice
keraschoice.use_keras({keras}, "{backend}")
keraschoice.import_framework()
assert gc.isenabled() and gc.get_freeze_count() > 100_000, gc.get_freeze_count()
print(sorted(m for m in ("jax", "tensorflow", "pandas", "scipy", "matplotlib")
             if m in sys.modules))
import pandas, matplotlib
try:
    import jax
except ImportError as exc:
    print(exc)
"""
    # (Keras 3 on TensorFlow: tests/workflow/test_keras3_workflow.py trains it so)
    proc = python(check.format(keras=2, backend="tensorflow"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [
        "['tensorflow']", "JAX is kept out of this process: its Keras trains on "
        "TensorFlow (training.backend: jax trains on JAX)"]
    proc = python(check.format(keras=3, backend="jax"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["['jax', 'scipy']"]


def test_a_command_line_ends_with_its_status_atexit_and_output_but_no_teardown():
    end = """
import atexit, sys
from dlscale.core.cli import exit_without_teardown

class Teardown:
    def __del__(self):
        print("torn down", file=sys.stderr)

kept = Teardown()
atexit.register(lambda: print("atexit ran", file=sys.stderr))

def main():
    print("no newline yet", end="")
    {ending}

exit_without_teardown(main)
"""
    proc = python(end.format(ending="return 3"))
    assert (proc.returncode, proc.stdout) == (3, "no newline yet")
    assert proc.stderr == "atexit ran\n"  # Python's teardown would print "torn down"
    proc = python(end.format(ending="sys.exit('error: a reason')"))
    assert (proc.returncode, proc.stderr) == (1, "error: a reason\natexit ran\n")
    proc = python(end.format(ending="raise SystemExit(None)"))
    assert proc.returncode == 0
    proc = python(end.format(ending="raise ValueError('a bug')"))
    assert proc.returncode == 1 and "ValueError: a bug" in proc.stderr
