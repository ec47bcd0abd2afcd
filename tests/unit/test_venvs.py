"""scripts/venvs.sh, the Makefile's kept environments: a venv built once per set of pins
is copied back for a later checkout, at that checkout's path. Real venvs (`python -m venv`
without pip), real copies and links."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT

VENVS = ROOT / "scripts" / "venvs.sh"
SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


def venvs(cache, *args) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(VENVS), *map(str, args)], capture_output=True,
                          text=True, timeout=120,
                          env=dict(os.environ, DLSCALE_VENV_CACHE=str(cache)))


def make_venv(path):
    """A venv with one script of its own, as pip writes them: its first line names the
    venv's python by its full path."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    tool = path / "bin" / "tool"
    tool.write_text(f"#!{path}/bin/python\nimport sys\nprint(sys.prefix)\n")
    tool.chmod(0o755)
    (path / SITE / "m.py").write_text("installed = True\n")
    return path


def test_a_kept_venv_is_copied_to_a_new_checkout_and_runs_there(tmp_path):
    cache, built = tmp_path / "cache", make_venv(tmp_path / "first" / ".venv")
    kept = venvs(cache, "keep", built, "tensorflow-1")
    assert kept.returncode == 0, kept.stderr
    # a path with a space cannot be a script's first line: built there, not copied
    spaced = venvs(cache, "restore", tmp_path / "second checkout" / ".venv", "tensorflow-1")
    assert spaced.returncode == 1 and not (tmp_path / "second checkout").exists()
    copy = tmp_path / "second" / ".venv"
    restored = venvs(cache, "restore", copy, "tensorflow-1")
    assert restored.returncode == 0, restored.stderr
    # the copy's own script runs its own python, with the first venv gone
    subprocess.run(["rm", "-rf", str(tmp_path / "first")], check=True)
    ran = subprocess.run([str(copy / "bin" / "tool")], capture_output=True, text=True)
    assert ran.stdout.strip() == str(copy)
    assert str(built) not in (copy / "bin" / "activate").read_text()
    # the copy links the kept files (as uv links its cache); its own path went into new
    # files, never into the kept ones
    module = f"{SITE}/m.py"
    assert os.stat(copy / module).st_ino == os.stat(cache / "tensorflow-1" / module).st_ino
    assert str(built) in (cache / "tensorflow-1" / "bin" / "activate").read_text()
    assert os.stat(copy / "pyvenv.cfg").st_ino != os.stat(
        cache / "tensorflow-1" / "pyvenv.cfg").st_ino
    assert not (copy / ".dlscale-venv-path").exists()
    # a new set of pins replaces the kept one of that name, not the others
    venvs(cache, "keep", make_venv(tmp_path / "jax"), "jax-1")
    assert venvs(cache, "keep", copy, "tensorflow-2").returncode == 0
    assert sorted(p.name for p in cache.iterdir()) == ["jax-1", "tensorflow-2"]


def test_nothing_kept_is_said_by_the_status_and_bad_arguments_in_one_line(tmp_path):
    target = tmp_path / ".venv"
    target.mkdir()
    proc = venvs(tmp_path / "cache", "restore", target, "tensorflow-1")
    assert proc.returncode == 1 and proc.stderr == ""  # the Makefile then builds one
    assert target.exists()  # untouched: the Makefile removes it before it builds
    proc = venvs(tmp_path / "cache", "keep", tmp_path / "nothing", "tensorflow-1")
    assert proc.returncode == 2
    assert "nothing is not a virtual environment" in proc.stderr
    proc = venvs(tmp_path / "cache", "keep", target, "../escape")
    assert (proc.returncode, proc.stderr.strip().split(": ", 1)[1]) == (
        2, "KEY '../escape' must be a plain name")
