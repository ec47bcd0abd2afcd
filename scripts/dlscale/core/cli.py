"""Small helpers every command line shares: failing in one line, ending without Python's
teardown, KEY=VALUE flags."""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable
from typing import NoReturn


def fail(message: str, code: int = 1) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def exit_without_teardown(main: Callable[[], int | None]) -> NoReturn:
    """Run a command line's main() and end the process as sys.exit would, less Python's
    teardown: the atexit handlers run (Horovod's and JAX's shutdown, logging's flush) and
    the standard streams are flushed, then os._exit. Once TensorFlow is imported, freeing
    its modules and objects one by one at exit costs seconds of CPU per process
    (docs/benchmarks.md, "Tests and CI") and keeps nothing: a
    run's records are written, atomically, and closed before main returns. An exception other than
    SystemExit ends the process the usual way, with its traceback."""
    try:
        code = main()
    except SystemExit as stop:
        code = stop.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what sys.exit("message") prints
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to keep
            pass
    os._exit(code or 0)


def parse_meta(items: list[str], flag: str = "--meta") -> dict:
    """KEY=VALUE flags as a dict; ValueError naming the flag for one without '='."""
    meta = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{flag} takes KEY=VALUE, got '{item}'")
        meta[key] = value
    return meta
