"""glibc's malloc tuned for a training process. TensorFlow's CPU kernels and tf.data take
and give back buffers of up to megabytes at every step; with glibc's defaults each heap
is trimmed as soon as its top is free and grown again at the next step, every page
faulted in and zeroed again. 64 MiB kept at the top of each heap, and requests up to
32 MiB served from the heap rather than mmap, take most of that kernel time away for a
little more resident memory (docs/benchmarks.md, "Tests and CI"). glibc reads
GLIBC_TUNABLES once, as a process starts: train.py starts itself again, in place, with
them."""

from __future__ import annotations

import os
import sys

TUNABLES_ENV = "GLIBC_TUNABLES"
MALLOC_TUNABLES = {"glibc.malloc.top_pad": 64 * 2**20,
                   "glibc.malloc.mmap_threshold": 32 * 2**20}


def tuned(environ) -> str | None:
    """GLIBC_TUNABLES with dlscale's malloc values added to what `environ` sets (a value
    you set wins); None when nothing is to add."""
    entries = [e for e in environ.get(TUNABLES_ENV, "").split(":") if e]
    named = {e.partition("=")[0] for e in entries}
    missing = [f"{name}={value}" for name, value in MALLOC_TUNABLES.items()
               if name not in named]
    return ":".join(entries + missing) if missing else None


def restart_tuned() -> None:
    """Start this process again with the tunables, unless it has them: os.execv, so the
    process keeps its PID, its signals and its place in the launcher's process group, and
    nothing of it has run yet but Python's start. A C library that is not glibc ignores
    the variable; the second start finds it set and goes on."""
    value = tuned(os.environ)
    if value is None or not sys.platform.startswith("linux"):
        return
    os.environ[TUNABLES_ENV] = value
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execv(sys.executable, sys.orig_argv)
