"""A run's JSON-lines records, and a run killed (or delayed) at a file's first write."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import IN_CI


def records(path):
    """The records of a JSON-lines file (epochs.jsonl, telemetry)."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def killed_at_write(args: list[str], cwd: Path, *paths: str, calls: str = "write"):
    """Run `args` under strace, SIGKILLed at its first write() (or other `calls`: HDF5
    writes with pwrite64) to any of `paths` (relative to `cwd`): a kill that lands while
    the file is being written, not before or after."""
    return at_first_write(args, cwd, paths, calls, "signal=KILL")


def at_first_write(args: list[str], cwd: Path, paths, calls: str, inject: str):
    """Run `args` under strace, its first of `calls` to any of `paths` (relative to `cwd`)
    given strace's `inject` (a signal, a delay)."""
    if not shutil.which("strace"):
        if IN_CI:
            pytest.fail("strace is missing (make sysdeps installs it)")
        pytest.skip("needs strace (make sysdeps)")
    watched = [arg for path in paths for arg in ("-P", str(cwd / path))]
    return subprocess.run(["strace", "-f", "-qq", "-o", os.devnull, *watched,
                           "-e", f"trace={calls}",
                           "-e", f"inject={calls}:{inject}:when=1", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600)
